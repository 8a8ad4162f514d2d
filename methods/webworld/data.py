"""Trajectory containers and the trajectory-level filters of paper §3.3 and App. H."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "CHAT_LAYOUTS",
    "Trajectory",
    "chat_messages",
    "drop_noop_transitions",
    "filter_trajectory",
    "to_chat",
]

# ShareGPT speaker -> chat role (``Qwen/WebWorldData`` rows are ``conversations: [{from, value}]``).
SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "system": "system"}
CHAT_LAYOUTS = (
    "{'messages': [{'role': 'system'|'user'|'assistant', 'content': str}, ...]} (chat) or "
    "{'conversations': [{'from': 'system'|'human'|'gpt', 'value': str}, ...]} (ShareGPT, "
    "the layout of Qwen/WebWorldData)"
)


@dataclass
class Trajectory:
    """One interaction trajectory ``tau = (I, s_0, a_0, ..., s_T)`` (paper Eq. 2).

    Attributes:
        instruction: the task instruction I ('' for random crawls).
        states: page states ``s_0 .. s_T`` (T+1 strings).
        actions: actions ``a_0 .. a_{T-1}`` (T strings).
        fmt: state format, e.g. ``a11y``, ``html``, ``xml``, ``markdown``.
        source: provenance tag (e.g. ``level1``).
    """

    instruction: str
    states: list[str]
    actions: list[str]
    fmt: str = "a11y"
    source: str = ""

    def __post_init__(self) -> None:
        if len(self.states) != len(self.actions) + 1:
            raise ValueError(
                f"states must have len(actions) + 1 entries, got {len(self.states)} states and "
                f"{len(self.actions)} actions"
            )

    @property
    def n_transitions(self) -> int:
        """Number of ``(s_t, a_t, s_{t+1})`` transitions T.

        Source: engineering, not in the paper.
        """
        return len(self.actions)


def _count_tokens(tok: Any, text: str) -> int:
    if tok is None:
        return len(text.split())
    if hasattr(tok, "encode"):
        return len(tok.encode(text, add_special_tokens=False))
    if callable(tok):
        return len(tok(text))
    raise TypeError(f"tok must be None, a tokenizer with .encode or a callable, got {type(tok)}")


def filter_trajectory(
    traj: Trajectory,
    tok: Any = None,
    max_tokens: int = 30_000,
    max_turns: int = 30,
    blocklist: Sequence[str] = (),
) -> bool:
    """Returns True if a trajectory passes the trajectory-level filters (paper §3.3).

    Source: paper Section 3.3 and App. H (trajectory-level filtering).

    A trajectory is dropped when it has no transitions, more than ``max_turns`` transitions, more than
    ``max_tokens`` tokens over instruction + states + actions, or contains a block-listed keyword
    (case-insensitive).

    Args:
        traj: the trajectory.
        tok: a tokenizer with ``encode`` (HF), a callable ``str -> list``, or None (whitespace words).
        max_tokens: token budget (paper: 30K).
        max_turns: transition budget (paper: 30).
        blocklist: keywords whose presence drops the trajectory.
    """
    if not isinstance(traj, Trajectory):
        raise TypeError(f"traj must be a Trajectory, got {type(traj).__name__}")
    if max_tokens <= 0 or max_turns <= 0:
        raise ValueError(
            f"max_tokens and max_turns must be positive, got {max_tokens}, {max_turns}"
        )
    if traj.n_transitions == 0 or traj.n_transitions > max_turns:
        return False
    texts = [traj.instruction, *traj.states, *traj.actions]
    if blocklist:
        low = "\n".join(texts).lower()
        if any(w.lower() in low for w in blocklist):
            return False
    return sum(_count_tokens(tok, t) for t in texts) <= max_tokens


def _default_norm(s: str) -> str:
    return "\n".join(ln.rstrip() for ln in s.strip().splitlines())


def drop_noop_transitions(
    traj: Trajectory, normalise: Callable[[str], str] | None = _default_norm
) -> Trajectory:
    """Removes transitions ``(s_t, a_t, s_{t+1})`` with no observable change, ``s_{t+1} == s_t``.

    Source: paper Section 3.3 and App. H (drop transitions with no observable
    change).

    Dropping transition t removes ``a_t`` and ``s_{t+1}``; since ``s_{t+1}`` equals ``s_t`` the
    remaining sequence is still a valid trajectory. States are compared after ``normalise``
    (default: strip trailing whitespace per line).

    Args:
        traj: the trajectory.
        normalise: state normaliser before comparison, or None for exact comparison.

    Returns:
        A new trajectory (the input is not modified); it may have zero transitions.
    """
    if not isinstance(traj, Trajectory):
        raise TypeError(f"traj must be a Trajectory, got {type(traj).__name__}")
    norm = normalise or (lambda s: s)
    states, actions = [traj.states[0]], []
    for a, s_next in zip(traj.actions, traj.states[1:], strict=True):
        if norm(s_next) == norm(states[-1]):
            continue
        actions.append(a)
        states.append(s_next)
    return replace(traj, states=states, actions=actions)


def to_chat(traj: Trajectory, **templates: str) -> dict:
    """Renders a trajectory as one training chat ``{"messages": [...]}`` (paper App. N.1).

    Every state after ``s_0`` becomes an assistant turn. ``templates`` go to
    :func:`methods.webworld.prompts.build_messages` (``system``, ``first_turn``, ``continue_turn``).
    """
    from methods.webworld.prompts import build_messages

    if not isinstance(traj, Trajectory):
        raise TypeError(f"traj must be a Trajectory, got {type(traj).__name__}")
    return {"messages": build_messages(traj.states[0], traj.actions, traj.states[1:], **templates)}


def chat_messages(row: Any) -> list[dict]:
    """The ``[{"role", "content"}]`` turns of one chat row, in either layout of :data:`CHAT_LAYOUTS`.

    ShareGPT speakers map ``human -> user``, ``gpt -> assistant``, ``system -> system``; a top-level
    ``system`` string (LLaMA-Factory's ShareGPT column) becomes a leading system turn. Source:
    the ``Qwen/WebWorldData`` card (https://huggingface.co/datasets/Qwen/WebWorldData) and its rows.

    Raises:
        ValueError: naming what is wrong (no known layout, an unknown speaker, a non-string turn,
            or a chat that does not end with an assistant turn).
    """
    if not isinstance(row, dict):
        raise ValueError(f"a row must be a JSON object, got {type(row).__name__}")
    if "messages" in row:
        turns, role_key, text_key, roles = row["messages"], "role", "content", None
    elif "conversations" in row:
        turns, role_key, text_key, roles = row["conversations"], "from", "value", SHAREGPT_ROLES
    else:
        raise ValueError(f"no 'messages' or 'conversations' key (keys: {sorted(row)[:8]})")
    if not isinstance(turns, list) or not turns:
        raise ValueError(f"{role_key!r} turns must be a non-empty list, got {turns!r:.80}")
    msgs = []
    if roles is not None and isinstance(row.get("system"), str) and row["system"]:
        msgs.append({"role": "system", "content": row["system"]})
    for i, t in enumerate(turns):
        if not isinstance(t, dict) or not isinstance(t.get(text_key), str):
            raise ValueError(
                f"turn {i} must be an object with a string {text_key!r}, got {t!r:.80}"
            )
        who = t.get(role_key)
        role = who if roles is None else roles.get(who)
        if role not in ("system", "user", "assistant"):
            raise ValueError(f"turn {i}: unknown {role_key!r} value {who!r}")
        msgs.append({"role": role, "content": t[text_key]})
    if msgs[-1]["role"] != "assistant":
        raise ValueError(
            f"the chat must end with an assistant turn, ends with {msgs[-1]['role']!r}"
        )
    return msgs
