"""Chat format of the world model (paper App. N.1): system prompt, first turn, continuation turns.

The default wording is our own (mirrored in ``methods/webworld/config.py``); the released
checkpoints were trained with the model card's exact system string, which callers pass in.
"""

from __future__ import annotations

import re

__all__ = ["CONTINUE_TURN", "FIRST_TURN", "SYSTEM_PROMPT", "build_messages", "strip_reasoning"]

SYSTEM_PROMPT = (
    "You simulate a web browser. You receive the state of a web page and then a series of actions. "
    "After each action, write the complete page state that the browser would show next. Use exactly "
    "the same format as the input state. Output only the page state: no commentary, no code, and do "
    "not shorten it."
)
FIRST_TURN = "Initial Page State:\n{state}\n\nFirst Action: '{action}'\n\nNext Page State:"
CONTINUE_TURN = (
    "Continue the trajectory: predict the page state after this action.\n\n"
    "Action: '{action}'\n\nNext Page State:"
)


def build_messages(
    s0: str,
    actions: list[str],
    states: list[str] | None = None,
    system: str = SYSTEM_PROMPT,
    first_turn: str = FIRST_TURN,
    continue_turn: str = CONTINUE_TURN,
) -> list[dict]:
    """Builds the multi-turn chat ``system, user(s0, a0), assistant(s1), user(a1), ...``.

    Source: paper App. N.1 and the ``Qwen/WebWorld-8B`` model card (chat layout); the
    default wording is ours (our choice).

    Args:
        s0: initial page state.
        actions: ``a_0 .. a_{k-1}`` (at least one).
        states: predicted/true next states ``s_1 ..``; ``len(actions)`` of them gives a full training
            sample, ``len(actions) - 1`` an inference prompt that ends with a user turn.
        system, first_turn, continue_turn: templates (``{state}``, ``{action}`` placeholders).

    Returns:
        A list of ``{"role", "content"}`` dicts.
    """
    if not actions:
        raise ValueError("actions must contain at least one action")
    states = list(states or [])
    if len(states) not in (len(actions), len(actions) - 1):
        raise ValueError(
            f"states must have len(actions) or len(actions) - 1 entries, got {len(states)} for "
            f"{len(actions)} actions"
        )
    msgs = [{"role": "system", "content": system}]
    for i, a in enumerate(actions):
        tpl = first_turn.format(state=s0, action=a) if i == 0 else continue_turn.format(action=a)
        msgs.append({"role": "user", "content": tpl})
        if i < len(states):
            msgs.append({"role": "assistant", "content": states[i]})
    return msgs


_THINK = re.compile(r"<(think|reason)>.*?</\1>", re.S)
_FENCE = re.compile(r"^```[^\n]*\n(.*?)\n?```$", re.S)


def strip_reasoning(text: str) -> str:
    """Removes ``<think>``/``<reason>`` blocks and a surrounding code fence from a model output.

    Source: the official demo code (``demo/``); not in the paper.
    """
    s = _THINK.sub("", text).strip()
    m = _FENCE.match(s)
    return m.group(1).strip() if m else s
