"""Answer metrics: token F1 (official normalisation) and an LLM-judge score (official evaluation code; the judge
is gpt-4o-mini at temperature 0 there)."""

from __future__ import annotations

import logging
import re

from common.metrics import normalize_answer as _normalize_answer
from common.metrics import token_f1 as _token_f1

logger = logging.getLogger(__name__)

_JUDGE_PROMPT = (
    "You grade a short answer to a question about a long conversation.\n"
    "Question: {q}\nReference answer: {gold}\nModel answer: {pred}\n"
    'Give a score between 0 (wrong) and 1 (fully correct). Reply only with JSON: {{"score": x}}'
)
_SCORE_RE = re.compile(r"\"?score\"?\s*:\s*([-+]?\d*\.?\d+)")


def normalize_answer(s: str) -> str:
    """SQuAD normalisation plus zero..nine -> digits (the official evaluation code's; the paper
    reports F1): :func:`common.metrics.normalize_answer` with ``number_words=True``."""
    return _normalize_answer(s, number_words=True)


def token_f1(pred: str, gold: str) -> float:
    """Token-level F1 between normalised prediction and gold (SQuAD style; the paper's F1 metric,
    official evaluation code): :func:`common.metrics.token_f1` under :func:`normalize_answer`."""
    return _token_f1(pred, gold, normalize_answer)


def parse_judge_score(reply: str) -> float | None:
    """Extracts ``{"score": x}`` from a judge reply, clipped to [0, 1]; None when unparsable.

    Our engineering (the reply format our judge prompt asks for)."""
    m = _SCORE_RE.search(reply or "")
    if m is None:
        return None
    return min(1.0, max(0.0, float(m.group(1))))


def llm_judge_score(client, question: str, pred: str, gold: str) -> tuple[float, bool]:
    """LLM-judge score in [0, 1] (official: gpt-4o-mini-2024-07-18, temperature 0).

    Args:
        client: a ``common.llm.ChatLLM`` (``OpenAIChat``, ``HFChat`` or ``ScriptedChat``).
        question, pred, gold: the item.

    Returns:
        ``(score, parsed)``; an unparsable reply scores 0 with ``parsed=False`` (count these).
    """
    msg = [{"role": "user", "content": _JUDGE_PROMPT.format(q=question, gold=gold, pred=pred)}]
    score = parse_judge_score(client.chat(msg, temperature=0.0))
    if score is None:
        return 0.0, False
    return score, True
