"""Inference-time lookahead through the world model (paper §5.2, Table 6).

Best-of-k: sample ``k`` candidate actions from the agent, predict the next state of each with the
simulator (without committing), score every predicted state with a value function and execute the
best candidate; ties go to the earliest sample, so with a value that cannot tell candidates apart
the search reduces to the agent's own first choice.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from methods.webworld.actions import ActionParseError, parse_action

logger = logging.getLogger(__name__)

__all__ = ["VALUE_PROMPT", "llm_value_fn", "lookahead_search", "parse_value_reply"]

VALUE_PROMPT = (
    "You judge progress of a web agent.\n\nGoal: {goal}\n\nPredicted page after the agent's next "
    "action:\n{state}\n\nReply with two lines: 'Status: SUCCESS' or 'Status: ONGOING', then "
    "'Score: <number between 0 and 1>' for how close this page is to completing the goal."
)


def lookahead_search(
    agent: Callable[[], str],
    simulator: Any,
    value_fn: Callable[[str], float],
    k: int = 3,
) -> tuple[str, dict]:
    """One best-of-``k`` lookahead step.

    Source: paper Section 5.2 and Table 6 (best-of-k lookahead through the world
    model).

    Args:
        agent: callable returning one sampled candidate action for the current observation.
        simulator: an object with ``peek(actions) -> [(state, info), ...]`` that does not change
            its context (e.g. :class:`~methods.webworld.simulator.WebWorldSimulator`, or the toy's
            oracle / copy simulators).
        value_fn: predicted state -> value; exceptions and non-numbers count as 0.
        k: number of candidates (paper: BoN(3)).

    Returns:
        ``(action, info)`` with ``info = {"candidates", "values", "chosen"}``. Candidates that do
        not parse are kept with value ``-inf`` (never chosen while a valid one exists).

    Raises:
        ValueError: if ``k < 1``.
    """
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    cands = [agent() for _ in range(k)]
    valid = []
    for c in cands:
        try:
            parse_action(c)
            valid.append(c)
        except ActionParseError:
            pass
    preds = dict(zip(valid, simulator.peek(valid), strict=True)) if valid else {}
    values = []
    for c in cands:
        if c not in preds:
            values.append(float("-inf"))
            continue
        try:
            v = float(value_fn(preds[c][0]))
            v = v if v == v else 0.0
        except Exception as e:  # noqa: BLE001 - a failing value model scores 0 (our bad-input rules)
            logger.debug("value_fn failed on %r: %s", c, e)
            v = 0.0
        values.append(v)
    best = max(range(k), key=lambda i: (values[i], -i))
    return cands[best], {"candidates": cands, "values": values, "chosen": best}


_STATUS = re.compile(r"Status:\s*(SUCCESS|ONGOING|FAILURE)", re.I)
_SCORE = re.compile(r"Score:\s*([-+]?\d*\.?\d+)", re.I)


def parse_value_reply(text: str) -> tuple[str, float]:
    """Parses a value-model reply into ``(status, score)``; no ``Status:`` -> ``("ONGOING", 0.0)``.

    The value model's reply format of §5.2 (Table 6); the lenient fallback is ours.

    SUCCESS without a score counts as 1.0; scores are clamped to ``[0, 1]``.
    """
    m = _STATUS.search(text or "")
    if m is None:
        return "ONGOING", 0.0
    status = m.group(1).upper()
    s = _SCORE.search(text)
    score = float(s.group(1)) if s else (1.0 if status == "SUCCESS" else 0.0)
    return status, min(max(score, 0.0), 1.0)


def llm_value_fn(llm: Any, goal: str, prompt: str = VALUE_PROMPT) -> Callable[[str], float]:
    """A value function backed by a chat LLM (the paper's value model, pointwise scoring).

    Source: paper Section 5.2 and Table 6; the prompt wording is our choice.
    """

    def value(state: str) -> float:
        reply = llm.chat([{"role": "user", "content": prompt.format(goal=goal, state=state)}])
        status, score = parse_value_reply(reply)
        return 1.0 if status == "SUCCESS" else score

    return value
