"""Parsers for the three LLM outputs of the LLMInertia pipeline.

Official code: THUMLP/LLMInertia ``scripts/vllm_infer_evidence_medical.py`` (pair regex in
``find_entity_pairs_in_input``) and ``evaluation/eval_overthink.py::map_result`` (yes/no mapping).
All parsers are total: they never raise on malformed model text. ``parse_yes_no`` returns the
string ``"error"`` when no verdict can be read, so callers can count unparsable answers.
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = ["YES_NO_RULES", "YesNo", "parse_entity_list", "parse_pairs", "parse_yes_no"]

YES_NO_RULES = ("official", "lenient")

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
# Official ``map_result`` regexes, verbatim semantics: no word boundary after the verdict (so
# "Conclusion: Nope" is "no"), no markdown ``**`` between field and verdict, no closing bracket
# after "answer".
_OFFICIAL_CONCLUSION_RE = re.compile(
    r"[【\[\(【]?\s*conclusion\s*[】\]\)】]?\s*[:：]?\s*(yes|no|是|否)", re.IGNORECASE
)
_OFFICIAL_ANSWER_RE = re.compile(r"(answer|答案)\s*[:：]?\s*(yes|no|是|否)", re.IGNORECASE)
# a tuple "(left, right)"; non-greedy on the left so the first comma splits (repo regex semantics)
_PAIR_RE = re.compile(r"\((.*?),\s*(.*?)\)")


def _check_str(text: object, name: str = "text") -> str:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be str, got {type(text).__name__}")
    return text


def parse_entity_list(text: str) -> list[str]:
    """Splits a comma-separated entity list (step 1 output) into unique entities (official code
    ``scripts/vllm_infer_evidence_medical.py``, the step-1 reply split on commas).

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


def parse_pairs(text: str, dedup: bool = False) -> list[tuple[str, str]]:
    """Extracts ``(entity, associated entity)`` tuples from a probe reply (step 2 output; official
    code ``scripts/vllm_infer_evidence_medical.py`` regex).

    ``dedup=False`` (official ``find_entity_pairs_in_input``): every ``(left, right)`` match of the
    non-greedy regex, both sides stripped, in reply order, repeats included. ``dedup=True`` (this
    repository's earlier parser): also strips a stray ``(`` on the left, drops pairs with an empty
    side or ``left == right`` (case-insensitive) and case-insensitive duplicates.

    Args:
        text: raw model reply.
        dedup: filter and de-duplicate as described above.

    Returns:
        Pairs in reply order; ``[]`` if nothing parses.

    Raises:
        TypeError: if ``text`` is not a string.
    """
    _check_str(text)
    if not isinstance(dedup, bool):
        raise TypeError(f"dedup must be bool, got {type(dedup).__name__}")
    if not dedup:
        return [(a.strip(), b.strip()) for a, b in _PAIR_RE.findall(text)]
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


def parse_yes_no(text: str, rule: str = "official") -> YesNo:
    """Maps a final answer to ``"yes"``, ``"no"`` or ``"error"`` (official code
    ``evaluation/eval_overthink.py``, ``map_result``; ``rule="lenient"`` is our inference).

    Both rules try, in order: 1. a "conclusion" field in any bracket style (【】, [], ()) with an
    optional colon; 2. an "answer"/"答案" field; 3. the whole reply as a bare verdict; 4. ``"error"``
    (the negation-keyword heuristics are commented out in the official code and stay off).

    ``rule="official"`` reproduces ``map_result`` exactly: the verdict may run on into a longer word
    ("Conclusion: Nope" -> no), no ``**`` is allowed between field and verdict, and a bare reply
    counts only after removing spaces and ``。，,`` -- so a bare ``No.`` or ``Yes.`` is ``"error"``.
    ``rule="lenient"`` (this repository's earlier parser) requires a word boundary after the
    verdict, allows markdown bold and brackets after "answer", and strips ``.。!！*"'`` from a bare
    reply (``No.`` -> no).

    Args:
        text: raw model reply (stripped first, as the official evaluation does).
        rule: ``"official"`` or ``"lenient"``.

    Returns:
        The verdict, or ``"error"`` for malformed output.

    Raises:
        TypeError: if ``text`` is not a string.
    """
    _check_str(text)
    if rule not in YES_NO_RULES:
        raise ValueError(f"rule must be one of {YES_NO_RULES}, got {rule!r}")
    if rule == "official":
        return _parse_yes_no_official(text.strip())
    m = _CONCLUSION_RE.search(text)
    if m:
        return _verdict(m.group(1))
    m = _ANSWER_RE.search(text)
    if m:
        return _verdict(m.group(1))
    bare = text.strip().strip(".。!！ *\"'").strip()
    return _verdict(bare) if bare else "error"


def _parse_yes_no_official(predict: str) -> YesNo:
    m = _OFFICIAL_CONCLUSION_RE.search(predict)
    if m:
        return _verdict(m.group(1))
    m = _OFFICIAL_ANSWER_RE.search(predict)
    if m:
        return _verdict(m.group(2))
    simple = predict.replace(" ", "").replace("。", "").replace("，", "").replace(",", "").lower()
    return _verdict(simple.strip())
