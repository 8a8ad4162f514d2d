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


def webworld() -> dict:
    """A page, its history and real next page, an agent and a value function; a scripted served model."""
    import random

    from tests.fake_openai import FakeOpenAI
    from tests.methods.test_webworld import _fake_reply

    server = FakeOpenAI(_fake_reply)
    os.environ["OPENAI_BASE_URL"] = server.url
    os.environ["OPENAI_API_KEY"] = "sk-docs-test"
    page = (
        "RootWebArea 'Shop', focused\n\t[19] link 'Cart', clickable\n\t[20] button 'Buy', clickable"
    )
    given = {
        "a11y_text": page,
        "obs": page,
        "history": f"STATE: {page}",
        "real_next": "RootWebArea 'Cart', focused\n\t[31] button 'Checkout', clickable",
        "agent_sample": lambda obs: random.choice(["click('19')", "click('20')"]),
        "value_fn": lambda state: float("Cart" in state),
    }
    return given
