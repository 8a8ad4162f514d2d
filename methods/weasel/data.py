"""AgentLab-format step records, trajectory reconstruction and the final subset.

The paper selects steps per trajectory and trains on the selected subset (paper: abstract; project
page, "How Weasel selects training data"); the record format, the trajectory reconstruction and the
subset rules are the official code's (``prepare_scores.py`` for parsing and segmentation,
``postprocess_dataset.py`` for the subset) and are listed in docs/methods/weasel.md (Deviations).

One record is one step: chat messages ``[system, user, assistant]``. The user prompt carries the
``## Goal:``, ``## AXTree:`` and interaction-history sections of BrowserGym's GenericAgent; the
assistant text is ``<think>…</think><action>…</action>``. Trajectories are rebuilt by grouping
records on the exact goal string and splitting each group's indices into runs of consecutive
indices.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "NO_GOAL",
    "StepRecord",
    "Trajectory",
    "build_subset",
    "load_agentlab_file",
    "parse_agentlab_prompt",
    "parse_records",
    "segment_by_goal",
]

logger = logging.getLogger(__name__)

NO_GOAL = "<NO_GOAL_FOUND>"
_GOAL = re.compile(r"## Goal:\s*(.*?)(?=\n#{1,2} |\Z)", re.DOTALL)
_OBS = re.compile(r"# Observation of current step:(.*?)(?=# Action space:|\Z)", re.DOTALL)
_AXTREE = re.compile(
    r"## AXTree:\s*(.*?)(?=\n# History of interaction with the task:|\n## |\Z)", re.DOTALL
)
_HISTORY = re.compile(r"# History of interaction with the task:(.*?)(?=\n# |\Z)", re.DOTALL)
_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL)


def parse_agentlab_prompt(user_prompt: str) -> dict[str, str]:
    """Sections of a GenericAgent user prompt: ``goal``, ``obs_history``, ``axtree``, ``history``.

    Official code ``prepare_scores.py`` (``extract_goal``, ``extract_axtree``,
    ``extract_obs_history``); the paper does not give the prompt format. Missing sections are empty
    strings. Several AXTree sections are joined with a blank line.
    """
    if not isinstance(user_prompt, str):
        raise TypeError(f"user_prompt must be a str, got {type(user_prompt).__name__}")
    goal = _GOAL.search(user_prompt)
    obs = _OBS.search(user_prompt)
    hist = _HISTORY.search(user_prompt)
    return {
        "goal": goal.group(1).strip() if goal else "",
        "obs_history": obs.group(1).strip() if obs else "",
        "axtree": "\n\n".join(m.strip() for m in _AXTREE.findall(user_prompt)),
        "history": hist.group(1).strip() if hist else "",
    }


@dataclass(frozen=True)
class StepRecord:
    """One parsed training step: the texts scored by Φ and D (official code ``prepare_scores.py``)."""

    messages: list[dict]
    index: int
    goal: str
    obs_history: str
    axtree: str
    assistant: str
    action: str | None


@dataclass(frozen=True)
class Trajectory:
    """A maximal run of consecutive record indices sharing one goal."""

    goal: str
    index: list[int]


def _find(messages: list[dict], role: str, pos: int, last: bool = False) -> dict | None:
    """The first (``last``: the last) message of ``role``, else the message at ``pos`` (official
    ``prepare_scores.py::get_message_content``: user first, assistant last, fallbacks 1 and 2)."""
    found = [m for m in messages if isinstance(m, dict) and m.get("role") == role]
    if found:
        return found[-1] if last else found[0]
    return messages[pos] if len(messages) > pos and isinstance(messages[pos], dict) else None


LAYOUT = (
    'a JSON list (or JSON lines) of {"messages": [{"role": "system"|"user"|"assistant", '
    '"content": str}, ...]} records, the user prompt in AgentLab GenericAgent form (## Goal:, '
    "## AXTree:)"
)


def _record_problem(rec) -> str | None:
    """Why ``rec`` is not a usable chat record, or None."""
    msgs = rec.get("messages") if isinstance(rec, dict) else None
    if not isinstance(msgs, list):
        return f"no 'messages' list (keys {sorted(rec) if isinstance(rec, dict) else type(rec).__name__})"
    bad = [
        k
        for k, m in enumerate(msgs)
        if not isinstance(m, dict) or not isinstance(m.get("content"), str)
    ]
    if bad:
        return f"message(s) {bad[:3]} are not {{role, content: str}} dicts"
    roles = [m.get("role") for m in msgs]
    if "user" not in roles or "assistant" not in roles:
        return f"roles {roles}: needs a user and an assistant turn"
    return None


def load_agentlab_file(path: str | Path, max_errors: int = 5) -> list[dict]:
    """Reads AgentLab-format chat records: a JSON list or JSON lines (official
    ``prepare_scores.py::load_jsonl_or_json`` reads both), every record checked.

    Raises:
        FileNotFoundError: if ``path`` is missing.
        ValueError: on an empty file, a JSON value that is not a list, or records without a
            ``messages`` list holding user and assistant turns; the message names the first
            ``max_errors`` bad records and the expected layout.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"path does not exist: {p}")
    text = p.read_text(encoding="utf-8").strip()
    if not text:
        raise ValueError(f"{p} is empty; expected {LAYOUT}")
    if text.startswith("["):
        rows = json.loads(text)
    else:
        try:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as e:
            raise ValueError(
                f"{p}: neither a JSON list nor JSON lines ({e}); expected {LAYOUT}"
            ) from e
    errors = []
    for i, rec in enumerate(rows):
        why = _record_problem(rec)
        if why:
            errors.append(f"record {i}: {why}")
            if len(errors) >= max_errors:
                break
    if errors:
        raise ValueError(f"{p}: unusable record(s): " + "; ".join(errors) + f". Expected {LAYOUT}")
    return rows


def parse_records(
    records: Sequence[dict], allow_missing_goal: bool = False
) -> tuple[list[StepRecord], dict[str, int]]:
    """Parses chat records into :class:`StepRecord` (official code ``prepare_scores.py``:
    ``get_user_prompt``, ``get_assistant_response``; the errors are ours, docs/methods/weasel.md).

    Records without a user or assistant message are skipped and counted.

    Returns:
        ``(steps, counts)`` with ``counts = {"skipped_no_message": …, "missing_goal": …}``.

    Raises:
        ValueError: if ``records`` is empty, or a record has no ``## Goal:`` and
            ``allow_missing_goal`` is False (set it to group such records under ``NO_GOAL``).
    """
    if len(records) == 0:
        raise ValueError("records is empty: nothing to select from")
    out, counts = [], {"skipped_no_message": 0, "missing_goal": 0}
    for i, rec in enumerate(records):
        messages = rec.get("messages") or []
        user, asst = _find(messages, "user", 1), _find(messages, "assistant", 2, last=True)
        if user is None or asst is None:
            counts["skipped_no_message"] += 1
            continue
        sec = parse_agentlab_prompt(user["content"])
        goal = sec["goal"]
        if not goal:
            if not allow_missing_goal:
                raise ValueError(
                    f"record {i} has no '## Goal:' section; pass allow_missing_goal=True to group "
                    f"such records under {NO_GOAL!r}"
                )
            counts["missing_goal"] += 1
            goal = NO_GOAL
        act = _ACTION.search(asst["content"])
        out.append(
            StepRecord(
                messages=messages,
                index=i,
                goal=goal,
                obs_history=sec["obs_history"],
                axtree=sec["axtree"],
                assistant=asst["content"],
                action=act.group(1).strip() if act else None,
            )
        )
    if counts["skipped_no_message"]:
        logger.warning(
            "%d record(s) without a user/assistant message skipped", counts["skipped_no_message"]
        )
    return out, counts


def segment_by_goal(records: Sequence[StepRecord]) -> list[Trajectory]:
    """Groups records by goal and splits each group into runs of consecutive indices.

    Official code ``prepare_scores.py`` (``group_trajectories``, ``split_contiguous``): the paper
    selects per trajectory but does not say how trajectories are rebuilt from step records.

    Warns when one goal yields several segments (unrelated trajectories sharing a goal string are
    then split silently otherwise). Trajectories come out ordered by their first index.
    """
    groups: dict[str, list[int]] = {}
    for r in records:
        groups.setdefault(r.goal, []).append(r.index)
    out: list[Trajectory] = []
    n_split = 0
    for goal, idx in groups.items():
        idx = sorted(idx)
        start = 0
        segs = 0
        for k in range(1, len(idx) + 1):
            if k == len(idx) or idx[k] != idx[k - 1] + 1:
                out.append(Trajectory(goal=goal, index=idx[start:k]))
                start, segs = k, segs + 1
        n_split += segs > 1
    if n_split:
        logger.warning("%d goal(s) split into several non-contiguous segments", n_split)
    return sorted(out, key=lambda t: t.index[0])


def build_subset(
    records: Sequence[dict],
    selected: Sequence[int],
    max_user_chars: int = 40000,
    max_examples: int = 10000,
    seed: int = 0,
    dedupe: bool = False,
    preserve_order: bool = False,
) -> list[dict]:
    """The final training set from selected indices (official code ``postprocess_dataset.py``;
    the paper reports the 10K-step AgentTrek subset, the caps are the official code's).

    Drops records whose user prompt is longer than ``max_user_chars`` (before sampling), then keeps
    a ``random.Random(seed).sample`` of ``max_examples`` if more remain.

    Raises:
        IndexError: if a selected index is out of range (the message previews the bad indices).
        ValueError: if ``max_user_chars`` or ``max_examples`` < 1.
    """
    if max_user_chars < 1 or max_examples < 1:
        raise ValueError("max_user_chars and max_examples must be >= 1")
    sel = list(dict.fromkeys(selected)) if dedupe else list(selected)
    bad = [i for i in sel if not 0 <= i < len(records)]
    if bad:
        raise IndexError(
            f"{len(bad)} selected index(es) out of range [0, {len(records)}): {bad[:5]}"
        )

    def _user_len(rec: dict) -> int:
        user = _find(rec.get("messages") or [], "user", 1)
        return len(user["content"]) if user else 0

    keep = [i for i in sel if _user_len(records[i]) <= max_user_chars]
    if len(keep) < len(sel):
        logger.info("%d record(s) over %d user chars dropped", len(sel) - len(keep), max_user_chars)
    if len(keep) > max_examples:
        keep = random.Random(seed).sample(keep, max_examples)
    else:
        logger.info("pool of %d <= max_examples=%d: all kept", len(keep), max_examples)
    if preserve_order:
        keep = sorted(keep)
    return [records[i] for i in keep]
