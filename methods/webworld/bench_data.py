"""WebWorld-Bench files: the bench item and the readers of both layouts (paper §4, App. N.3).

:class:`BenchSample` is one item. :func:`load_bench_jsonl` reads the chat layout of
``Qwen/WebWorldData``; :func:`load_official_eval` reads the upstream bench layout
(``config/task_config.yaml``, ``core/tasks/web_wm.py``); :func:`load_bench_file` picks the reader.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from methods.webworld.data import chat_messages

logger = logging.getLogger(__name__)

__all__ = [
    "WEB2NAL_PROMPT",
    "BenchSample",
    "load_bench_file",
    "load_bench_jsonl",
    "load_official_eval",
]


@dataclass
class BenchSample:
    """One bench item: the context chat up to (and including) the last user turn, the action, the
    real next state and its dimension."""

    context: list[dict]
    action: str
    gt: str
    dim: str = "base"
    traj: str | None = None  # the judge's trajectory text; None: rendered from ``context``


def load_bench_jsonl(
    path: str | Path, dim: str | None = None, max_samples: int | None = None
) -> tuple[list[BenchSample], int]:
    """Reads a chat-format JSONL file (one chat per line: ``{"messages": [...]}`` or the ShareGPT
    ``{"conversations": [...]}`` of ``Qwen/WebWorldData``, :data:`methods.webworld.data.CHAT_LAYOUTS`);
    the last assistant turn is the ground truth. Corrupt or malformed lines are skipped and counted.

    Source: engineering (the ``Qwen/WebWorldData`` chat layouts), not in the paper.

    Returns:
        ``(samples, n_skipped)``.
    """
    path = Path(path)
    dim = dim or path.stem
    out, skipped = [], 0
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                msgs = chat_messages(json.loads(line))
                if len(msgs) < 2 or msgs[-2]["role"] != "user":
                    raise ValueError("must end with user, assistant")
                m = re.search(r"Action: '(.*)'", msgs[-2]["content"], re.S)
                action = m.group(1) if m else ""
                out.append(BenchSample(msgs[:-1], action, msgs[-1]["content"], dim))
            except (json.JSONDecodeError, KeyError, IndexError, TypeError, ValueError):
                skipped += 1
                continue
            if max_samples is not None and len(out) >= max_samples:
                break
    if skipped:
        logger.warning("%s: skipped %d corrupt lines", path, skipped)
    return out, skipped


WEB2NAL_PROMPT = (
    "Describe in natural language how the action below changes the web page: navigation, new or "
    "updated content, and interface changes.\n\nPage State:\n{state}\n\nAction: {action}\n\n"
    "Description:"
)


def _official_sample(row: dict, dim: str) -> BenchSample:
    """One official single-step row ``{observation, action, next_observation}``.

    The world model sees our chat format (:func:`~methods.webworld.prompts.build_messages`); the judge
    sees the row as the upstream ``core/tasks/web_wm.py::generate_prompt`` lays it out (page state and
    action for the trajectory; the page state alone for Web2NAL).
    """
    from methods.webworld.prompts import build_messages

    obs, action, nxt = row["observation"], row["action"], row["next_observation"]
    if not all(isinstance(v, str) for v in (obs, action, nxt)):
        raise TypeError("observation, action and next_observation must be strings")
    if dim == "Web2NAL":
        ctx = [{"role": "user", "content": WEB2NAL_PROMPT.format(state=obs, action=action)}]
        return BenchSample(ctx, action, nxt, dim, traj=obs)
    traj = f"Page State:\n{obs}\n\nAction: '{action}'\n\n"
    return BenchSample(build_messages(obs, [action]), action, nxt, dim, traj=traj)


def _official_trajectory(traj: list, dim: str) -> BenchSample:
    """One ``long.json`` trajectory, in either upstream layout (``core/tasks/web_wm.py``): alternating
    ``[{observation}, {action}, {observation}, ...]`` items, or steps
    ``{observation, action, next_observation}``. The last transition is the one predicted."""
    from methods.webworld.prompts import build_messages

    if not isinstance(traj, list) or not traj:
        raise ValueError("trajectory must be a non-empty list")
    first = traj[0]
    if ("observation" in first) != ("action" in first):  # alternating items
        if len(traj) < 3 or len(traj) % 2 == 0:
            raise ValueError("an alternating trajectory needs observation, (action, observation)+")
        s0 = traj[0]["observation"]
        actions = [t["action"] for t in traj[1::2]]
        states = [t["observation"] for t in traj[2::2]]
    else:
        s0 = first["observation"]
        actions = [t["action"] for t in traj]
        states = [t["next_observation"] for t in traj]
    gt = states[-1]
    msgs = build_messages(s0, actions, states[:-1])
    parts = [f"Initial State:\n{s0}"]
    for i, a in enumerate(actions):
        parts.append(f"\nAction: {a}")
        parts.append(f"\nNext State:\n{states[i]}" if i < len(actions) - 1 else "\nNext State:")
    return BenchSample(msgs, actions[-1], gt, dim, traj="".join(parts))


def load_official_eval(
    path: str | Path, dim: str | None = None, max_samples: int | None = None
) -> tuple[list[BenchSample], int]:
    """Reads a WebWorld-Bench file in the upstream layout (``config/task_config.yaml``): JSONL rows
    ``{observation, action, next_observation}`` (base, fine_grained, xml, ..., Web2NAL), or the JSON
    list of ``{"trajectory": [...]}`` of ``long.json``. Malformed items are skipped and counted.

    Source: official ``config/task_config.yaml`` and ``core/tasks/web_wm.py`` (upstream bench
    layout).

    Returns:
        ``(samples, n_skipped)``.
    """
    path = Path(path)
    dim = dim or path.stem
    out, skipped = [], 0
    if path.suffix == ".json":
        items = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(items, list):
            raise ValueError(f"{path}: a long.json file must hold a JSON list of trajectories")
        for it in items:
            try:
                out.append(_official_trajectory(it["trajectory"], dim))
            except (KeyError, IndexError, TypeError, ValueError):
                skipped += 1
            if max_samples is not None and len(out) >= max_samples:
                break
    else:
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    out.append(_official_sample(json.loads(line), dim))
                except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                    skipped += 1
                if max_samples is not None and len(out) >= max_samples:
                    break
    if skipped:
        logger.warning("%s: skipped %d malformed items", path, skipped)
    return out, skipped


def load_bench_file(
    path: str | Path, dim: str | None = None, max_samples: int | None = None
) -> tuple[list[BenchSample], int]:
    """Reads one bench file in either layout: ``.json`` (``long.json``) and JSONL rows with
    ``observation``/``next_observation`` go to :func:`load_official_eval`, chat JSONL
    (``{"messages": ...}``) to :func:`load_bench_jsonl`.

    Source: engineering, not in the paper.
    """
    path = Path(path)
    if path.suffix == ".json":
        return load_official_eval(path, dim, max_samples)
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(row, dict) and "observation" in row:
                    return load_official_eval(path, dim, max_samples)
                break
    return load_bench_jsonl(path, dim, max_samples)
