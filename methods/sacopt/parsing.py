"""Parsers for LLM answers (official parameters.py / variables.py / constraint.py): the final ``=====`` block, JSON, a list, a 1-5 score.

Models are asked to reason first and end with a delimited block; these functions take the *last*
such block, tolerate Markdown fences and trailing prose, and return ``None`` when nothing usable is
there (callers count the failure and retry, our bad-input rules).
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

__all__ = [
    "parse_code_block",
    "parse_delimited_block",
    "parse_json_from_end",
    "parse_list_from_end",
    "parse_score",
]

_FENCE = re.compile(r"```[a-zA-Z]*\n?|```")


def _strip_fences(text: str) -> str:
    return _FENCE.sub("", text)


def parse_delimited_block(text: str, marker: str = "=====") -> str | None:
    """Content of the last block delimited by ``marker`` (e.g. ``CODE ===== ... =====``).

    A one-line block (``ANSWER: ===== YES =====``) works too. Returns ``None`` if there is no
    complete block. The official ``extract_code_from_end`` reads the first block (deviations table).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    parts = text.split(marker)
    if len(parts) < 3:
        return None
    # parts alternate outside/inside; the last complete block is parts[-2] when the count is odd.
    idx = len(parts) - 2 if len(parts) % 2 == 1 else len(parts) - 3
    block = _strip_fences(parts[idx]).strip("\n")
    lines = block.split("\n")
    indent = min((len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()), default=0)
    block = "\n".join(ln[indent:] for ln in lines).strip()
    return block or None


_PY_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.S)


def parse_code_block(text: str, marker: str = "=====") -> str | None:
    """Code from an answer: the last ``=====`` block, else the last ```` ```python ```` fence.

    The fallback follows ``util.py::extract_code_from_end`` of the official code, which reads a
    ```` ```python ```` fence when the answer has no ``=====`` block. Returns ``None`` if neither exists.
    """
    block = parse_delimited_block(text, marker)
    if block:
        return block
    fences = _PY_FENCE.findall(text)
    if fences:
        lines = fences[-1].strip("\n").split("\n")
        indent = min((len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()), default=0)
        code = "\n".join(ln[indent:] for ln in lines).strip()
        return code or None
    return None


def _balanced_from_end(text: str, open_ch: str, close_ch: str) -> list[str]:
    """Candidate balanced ``open..close`` spans, the last-ending first."""
    out = []
    end = text.rfind(close_ch)
    while end != -1:
        depth = 0
        for i in range(end, -1, -1):
            c = text[i]
            if c == close_ch:
                depth += 1
            elif c == open_ch:
                depth -= 1
                if depth == 0:
                    out.append(text[i : end + 1])
                    break
        end = text.rfind(close_ch, 0, end)
        if len(out) >= 8:
            break
    return out


def _drop_line_comments(s: str) -> str:
    return re.sub(r'(?m)^((?:[^"\n]|"[^"\n]*")*?)\s*//.*$', r"\1", s)


def parse_json_from_end(text: str) -> dict[str, Any] | None:
    """The last JSON object in ``text`` (fences, ``//`` comments and extra prose allowed; engineering)."""
    clean = _drop_line_comments(_strip_fences(text))
    for cand in _balanced_from_end(clean, "{", "}"):
        try:
            obj = json.loads(cand)
        except ValueError:
            try:
                obj = ast.literal_eval(cand)
            except (ValueError, SyntaxError):
                continue
        if isinstance(obj, dict):
            return obj
    return None


def parse_list_from_end(text: str) -> list[Any] | None:
    """The last Python/JSON list literal in ``text`` (nested brackets allowed; engineering)."""
    clean = _strip_fences(text)
    for cand in _balanced_from_end(clean, "[", "]"):
        for loader in (json.loads, ast.literal_eval):
            try:
                obj = loader(cand)
            except (ValueError, SyntaxError):
                continue
            if isinstance(obj, list):
                return obj
    return None


_SCORE = re.compile(r"([1-5])\s*out\s*of\s*5", re.IGNORECASE)


def parse_score(text: str) -> int | None:
    """The last ``x OUT OF 5`` score (case-insensitive), or ``None`` if absent.

    The official self-check regex (``\\d out of 5``), but its last match, not the first (deviations table).
    """
    found = _SCORE.findall(text)
    return int(found[-1]) if found else None
