"""Target-centred AXTree pruning of training prompts (official ``prune_axtree.py``).

Every kept step's accessibility tree is cut to the ``2w + 1`` bid lines centred on the element that
the gold action targets (plus the non-bid lines between them and the tree's root line). Steps whose
action has no target, whose target is not in the tree, or whose window would prune nothing fall back
to the first ``F`` bid lines. Only training prompts are pruned: the target is unknown at test time.

A *bid line* is a line of the AXTree section that carries a BrowserGym element id. By default the id
is the line-leading ``[a12]`` token (docs/methods/weasel.md); ``compat_repo_regex=True`` takes the first bracket
anywhere on the line, like the official code.

Deviations from the official code (both listed in docs/methods/weasel.md): the window's last kept line is always
followed by a newline before ``# History of interaction with the task:``, and the root line is never
emitted twice.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field, fields

__all__ = [
    "NO_TARGET_ACTIONS",
    "TARGET_ACTIONS",
    "PruneStats",
    "extract_target_bid",
    "prune_axtree_centered",
    "prune_axtree_prefix",
    "prune_record",
]

logger = logging.getLogger(__name__)

AXTREE_HEADER = re.compile(r"## AXTree:\s*")
HISTORY_HEADER = "# History of interaction with the task:"
TARGET_ACTIONS = frozenset(
    {
        "click",
        "dblclick",
        "hover",
        "press",
        "focus",
        "clear",
        "fill",
        "select_option",
        "upload_file",
    }
)
NO_TARGET_ACTIONS = frozenset(
    {"noop", "scroll", "send_msg_to_user", "go_back", "go_forward", "goto", "new_tab", "tab_close"}
)
_ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL)
_CALL = re.compile(r"^\s*([A-Za-z_]\w*)\s*\((.*)\)\s*$", re.DOTALL)
_QUOTED = re.compile(r"""['"]([\w\d]+)['"]""")
_BID_ANCHORED = re.compile(r"^\s*\[([A-Za-z]*\d+)\]")
_BID_REPO = re.compile(r"\[([^\]]+)\]")


@dataclass
class PruneStats:
    """Per-dataset pruning counters (official ``prune_axtree.py``, docs/methods/weasel.md)."""

    centered: int = 0
    fallback_threshold: int = 0  # had a target, but it was absent or nothing was pruned
    threshold: int = 0  # no target: prefix fallback
    missing_axtree: int = 0
    unparseable_action: int = 0
    unknown_action: int = 0
    missing_messages: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    methods: list[str] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict[str, float]:
        return {f.name: float(getattr(self, f.name)) for f in fields(self) if f.name != "methods"}


def extract_target_bid(action_text: str) -> tuple[str | None, str | None]:
    """The action name and the bid it targets (official code ``prune_axtree.py::extract_bid_from_action``).

    Reads the ``<action>…</action>`` content if present, else the whole string. Element actions
    target their first quoted argument; ``drag_and_drop`` targets the bid with the larger integer
    part; navigation/scroll/message actions have no target.

    Returns:
        ``(name, bid)``; ``(name, None)`` for actions without a target and for unknown names;
        ``(None, None)`` when the string is not a single call ``name(args)`` (malformed: the caller
        counts it; nothing is guessed).

    Raises:
        TypeError: if ``action_text`` is not a string.
    """
    if not isinstance(action_text, str):
        raise TypeError(f"action_text must be a str, got {type(action_text).__name__}")
    m = _ACTION_TAG.search(action_text)
    body = m.group(1) if m else action_text
    call = _CALL.match(body)
    if call is None:
        return None, None
    name, args = call.group(1), call.group(2)
    if name == "drag_and_drop":
        bids = _QUOTED.findall(args)
        if len(bids) < 2:
            return name, None

        def _num(b: str) -> int:
            digits = re.sub(r"\D", "", b)
            return int(digits) if digits else -1

        return name, max(bids[:2], key=_num)
    if name in TARGET_ACTIONS:
        q = _QUOTED.search(args)
        return name, (q.group(1) if q else None)
    return name, None


def _line_bid(line: str, compat_repo_regex: bool) -> str | None:
    m = (_BID_REPO.search if compat_repo_regex else _BID_ANCHORED.match)(line)
    return m.group(1) if m else None


def _split(prompt: str) -> tuple[str, str, str] | None:
    """``(head incl. '## AXTree:' + whitespace, body, tail from '# History…')`` or None."""
    h = AXTREE_HEADER.search(prompt)
    if h is None:
        return None
    end = prompt.find(HISTORY_HEADER, h.end())
    if end < 0:
        return None
    return prompt[: h.end()], prompt[h.end() : end], prompt[end:]


def _join(head: str, kept_lines: list[str], body: str, tail: str) -> str:
    trailing = body[len(body.rstrip()) :] or "\n"
    if "\n" not in trailing:
        trailing = "\n"  # Deviation: the official centred branch drops this newline (official ``prune_axtree.py``)
    return head + "\n".join(kept_lines) + trailing + tail


def _check_window(name: str, value: int, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")


def prune_axtree_prefix(prompt: str, max_bids: int = 120, compat_repo_regex: bool = False) -> str:
    """Keeps the AXTree lines up to and including the ``max_bids``-th bid line.

    The fallback of target-centred pruning (official code ``prune_axtree.py::prune_threshold``).

    The prompt outside the AXTree body is returned byte-identical; a prompt without an AXTree
    section is returned unchanged.

    Raises:
        ValueError: if ``max_bids < 1``.
    """
    _check_window("max_bids", max_bids, 1)
    parts = _split(prompt)
    if parts is None:
        return prompt
    head, body, tail = parts
    lines = body.rstrip().split("\n")
    kept, seen = [], 0
    for line in lines:
        kept.append(line)
        if _line_bid(line, compat_repo_regex) is not None:
            seen += 1
            if seen >= max_bids:
                break
    if len(kept) == len(lines):
        return prompt
    return _join(head, kept, body, tail)


def prune_axtree_centered(
    prompt: str, bid: str, window: int = 60, compat_repo_regex: bool = False
) -> str:
    """Keeps the bid lines within ``window`` positions of ``bid``.

    Paper: target-centred AXTree pruning, "keeps only content around the ground-truth action
    target" (abstract); the window rule is official code ``prune_axtree.py::prune_gold_centered``.

    With bids ``B`` in line order and ``k* = B.index(bid)``, the kept set is
    ``S = B[max(k*−w, 0) : k*+w+1]``. Walking the lines after the root, output starts at the first
    bid line in ``S``, keeps bid lines in ``S`` and non-bid lines, and stops at the first bid line
    outside ``S``. The root line is emitted once, first. Returns the prompt unchanged when there is no
    AXTree section or ``bid`` is not in it (callers then fall back to the prefix).

    Raises:
        ValueError: if ``window < 0``.
    """
    _check_window("window", window, 0)
    parts = _split(prompt)
    if parts is None:
        return prompt
    head, body, tail = parts
    lines = body.rstrip().split("\n")
    bids = [b for b in (_line_bid(ln, compat_repo_regex) for ln in lines) if b is not None]
    if bid not in bids:
        return prompt
    k = bids.index(bid)
    in_window = set(bids[max(k - window, 0) : k + window + 1])
    root, kept, started = lines[0], [], False
    for line in lines[1:]:
        b = _line_bid(line, compat_repo_regex)
        if not started:
            if b is not None and b in in_window:
                started = True
                kept.append(line)
            continue
        if b is None or b in in_window:
            kept.append(line)
        else:
            break
    return _join(head, [root, *kept], body, tail)


def _message(messages: list[dict], role: str, pos: int) -> dict | None:
    for m in messages:
        if m.get("role") == role:
            return m
    return messages[pos] if len(messages) > pos else None


def prune_record(
    rec: dict,
    window: int = 60,
    fallback: int = 120,
    stats: PruneStats | None = None,
    compat_repo_regex: bool = False,
) -> tuple[dict, PruneStats]:
    """Prunes the user prompt of one chat record ``{"messages": [system, user, assistant]}``.

    Official code ``prune_axtree.py::prune_item`` (the counters for malformed actions are ours).

    Centred pruning when the assistant's action targets a bid present in the tree and the window
    prunes something; otherwise the prefix fallback. Malformed actions and unknown action names are
    counted in ``stats`` (never guessed) and take the prefix fallback.

    Returns:
        ``(new_record, stats)``; the input record is not modified.

    Raises:
        ValueError: if ``window < 0`` or ``fallback < 1``.
    """
    _check_window("window", window, 0)
    _check_window("fallback", fallback, 1)
    stats = stats if stats is not None else PruneStats()
    messages = rec.get("messages") or []
    user, asst = _message(messages, "user", 1), _message(messages, "assistant", 2)
    if user is None or asst is None:
        stats.missing_messages += 1
        return rec, stats
    prompt = user["content"]
    if _split(prompt) is None:
        stats.missing_axtree += 1
        return rec, stats
    name, bid = extract_target_bid(asst["content"])
    if name is None:
        stats.unparseable_action += 1
    elif name not in TARGET_ACTIONS and name not in NO_TARGET_ACTIONS and name != "drag_and_drop":
        stats.unknown_action += 1
    new_prompt, method = prompt, "threshold"
    if bid is not None:
        if not bid.isalnum():
            logger.warning("target bid %r is not alphanumeric", bid)
        new_prompt = prune_axtree_centered(prompt, bid, window, compat_repo_regex)
        method = "centered" if new_prompt != prompt else "fallback_threshold"
    if method != "centered":
        new_prompt = prune_axtree_prefix(prompt, fallback, compat_repo_regex)
    setattr(stats, method, getattr(stats, method) + 1)
    stats.methods.append(method)
    stats.tokens_before += len(prompt.split())
    stats.tokens_after += len(new_prompt.split())
    new_messages = [dict(m) for m in messages]
    new_messages[messages.index(user)]["content"] = new_prompt
    return {**rec, "messages": new_messages}, stats
