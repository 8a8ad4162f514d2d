"""Parsers for the three LLM outputs of the LLMInertia pipeline (spec §3.2, §3.1 "parse_yes_no").

All parsers are total: they never raise on malformed model text. ``parse_yes_no`` returns the
string ``"error"`` when no verdict can be read, so callers can count unparsable answers.
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = ["YesNo", "parse_entity_list", "parse_pairs", "parse_yes_no"]

YesNo = Literal["yes", "no", "error"]

_YES = {"yes", "是"}
_NO = {"no", "否"}
# "conclusion" field in any bracket style, optional colon (ASCII or full width), then the verdict.
_CONCLUSION_RE = re.compile(
    r"[【\[\(]?\s*conclusion\s*[】\]\)]?\s*[:：]?\s*\**\s*(yes|no|是|否)\b",
    re.IGNORECASE,
)
_ANSWER_RE = re.compile(
    r"(?:answer|答案)\s*[】\]\)]?\s*[:：]?\s*\**\s*(yes|no|是|否)", re.IGNORECASE
)
# a tuple "(left, right)"; non-greedy on the left so the first comma splits (repo regex semantics)
_PAIR_RE = re.compile(r"\((.*?),\s*(.*?)\)")


def _check_str(text: object, name: str = "text") -> str:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be str, got {type(text).__name__}")
    return text


def parse_entity_list(text: str) -> list[str]:
    """Splits a comma-separated entity list (step 1 output) into unique entities.

    Splits on commas (and newlines), strips whitespace and trailing full stops, drops empty items
    and case-insensitive duplicates, keeping the first spelling and the original order.

    Args:
        text: raw model reply.

    Returns:
        Entities in order of first appearance; ``[]`` for an empty reply.

    Raises:
        TypeError: if ``text`` is not a string.
    """
    _check_str(text)
    out: list[str] = []
    seen: set[str] = set()
    for part in re.split(r"[,，\n]", text):
        item = part.strip().strip(".。").strip()
        if not item or item.lower() in seen:
            continue
        seen.add(item.lower())
        out.append(item)
    return out


def parse_pairs(text: str) -> list[tuple[str, str]]:
    """Extracts ``(entity, associated entity)`` tuples from a probe reply (step 2 output).

    Every ``(left, right)`` match of the repo's non-greedy regex is kept once; sides are stripped,
    pairs with an empty side or with ``left == right`` (case-insensitive) are dropped, and
    case-insensitive duplicates are removed. Prose around the tuples is ignored.

    Args:
        text: raw model reply.

    Returns:
        Pairs in reply order; ``[]`` if nothing parses.

    Raises:
        TypeError: if ``text`` is not a string.
    """
    _check_str(text)
    out: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for left, right in _PAIR_RE.findall(text):
        a = left.strip().lstrip("(").strip()
        b = right.strip()
        if not a or not b or a.lower() == b.lower():
            continue
        key = (a.lower(), b.lower())
        if key in seen:
            continue
        seen.add(key)
        out.append((a, b))
    return out


def _verdict(word: str) -> YesNo:
    w = word.lower()
    if w in _YES:
        return "yes"
    if w in _NO:
        return "no"
    return "error"


def parse_yes_no(text: str) -> YesNo:
    """Maps a final answer to ``"yes"``, ``"no"`` or ``"error"`` (repo order of rules, spec §3.1).

    1. a "conclusion" field in any bracket style (【】, [], ()) with an optional colon;
    2. else an "answer"/"答案" field;
    3. else the whole reply (stripped of punctuation) is yes/no;
    4. else ``"error"``. Negation-keyword heuristics stay disabled, as in the repo.

    Args:
        text: raw model reply.

    Returns:
        The verdict, or ``"error"`` for malformed output.

    Raises:
        TypeError: if ``text`` is not a string.
    """
    _check_str(text)
    m = _CONCLUSION_RE.search(text)
    if m:
        return _verdict(m.group(1))
    m = _ANSWER_RE.search(text)
    if m:
        return _verdict(m.group(1))
    bare = text.strip().strip(".。!！ *\"'").strip()
    return _verdict(bare) if bare else "error"
