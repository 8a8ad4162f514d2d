"""What a docs usage block says the user brings, built as tiny offline stand-ins (tests/test_docs.py).

A block such as sacopt's reads the user's own problem file and calls a served model; the test writes
a small problem into the working folder and serves a scripted model on 127.0.0.1 through
``$OPENAI_BASE_URL`` (which ``common.llm.OpenAIChat`` honours), so the block runs exactly as written.
"""

from __future__ import annotations

import os
from pathlib import Path


def sacopt() -> None:
    """``description.txt`` (the farmer LP of tests/methods/test_sacopt.py) and a scripted served model."""
    from tests.fake_openai import FakeOpenAI
    from tests.methods.test_sacopt import FARMER, _extraction_llm

    Path("description.txt").write_text(FARMER)
    chat = _extraction_llm()
    server = FakeOpenAI(lambda body: chat.chat(body["messages"]))
    os.environ["OPENAI_BASE_URL"] = server.url
    os.environ["OPENAI_API_KEY"] = "sk-docs-test"
