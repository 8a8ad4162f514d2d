"""Agent-trajectory synthesis inside the world model and the agent-SFT data (paper §5.1, App. N.2).

The paper rolls an agent out inside WebWorld for a goal, keeps only rollouts that a value model
judges successful, re-labels the goal from what was actually done (Abstract-and-Instantiate), and
fine-tunes the agent on the kept trajectories (8K of them, Table 5). Here:

* :func:`instantiate_goal` asks an LLM for a concrete goal matching a rollout (``NONE`` -> None);
* :func:`synthesize` runs ``agent -> simulator.step`` loops, stops on ``send_msg_to_user`` /
  ``infeasible`` or ``max_steps``, and rejects rollouts that are truncated, hit a format mismatch,
  fail the success check or get no goal;
* :func:`agent_sft_dataset` turns kept trajectories into one chat per step
  (observation + goal -> action) for TRL SFT of the agent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from datasets import Dataset

from methods.webworld.actions import ActionParseError, parse_action
from methods.webworld.data import Trajectory

logger = logging.getLogger(__name__)

__all__ = [
    "AGENT_PROMPT",
    "INSTANTIATE_PROMPT",
    "agent_sft_dataset",
    "instantiate_goal",
    "synthesize",
]

AGENT_PROMPT = (
    "You are a web agent. Goal: {goal}\n\nCurrent page:\n{state}\n\nReply with exactly one action "
    "call, e.g. click('12') or fill('5', 'text')."
)
INSTANTIATE_PROMPT = (
    "A web agent started on this page:\n{s0}\n\nIt performed: {actions}\n\nand ended on:\n"
    "{s_final}\n\nWrite one concrete task instruction that this sequence accomplishes. If it "
    "accomplishes nothing meaningful, answer NONE."
)
_TERMINAL = ("send_msg_to_user", "infeasible", "report_infeasible")  # + the demo spelling


def instantiate_goal(llm: Any, s0: str, actions: Sequence[str], s_final: str) -> str | None:
    """Asks ``llm`` for the goal a rollout achieved; ``NONE`` (any case/whitespace) -> None.

    Source: paper Section 5.1 and App. N.2 (Abstract-and-Instantiate); the prompt
    wording is ours.

    Goal instantiation of the trajectory synthesis, §5.1.
    """
    reply = llm.chat(
        [
            {
                "role": "user",
                "content": INSTANTIATE_PROMPT.format(
                    s0=s0, actions=", ".join(actions), s_final=s_final
                ),
            }
        ]
    ).strip()
    return None if not reply or reply.strip().strip(".").upper() == "NONE" else reply


def synthesize(
    agent: Callable[[str, str], str],
    simulator: Any,
    tasks: Iterable[tuple[str, str]],
    success_fn: Callable[[str, str], bool],
    max_steps: int = 15,
    goal_llm: Any = None,
) -> tuple[list[Trajectory], dict[str, int]]:
    """Rolls ``agent`` out inside ``simulator`` for each ``(goal, s0)`` and keeps the good rollouts.

    Args:
        agent: ``(goal, state) -> action string``.
        simulator: a :class:`~methods.webworld.simulator.WebWorldSimulator` (``reset``/``step``).
        tasks: ``(goal, s0)`` pairs (seed tasks).
        success_fn: ``(goal, final_state) -> bool`` (the value model as a success filter).
        max_steps: step cap (our choice (docs deviations): 15).
        goal_llm: if given, the kept goal is re-instantiated from the rollout
            (:func:`instantiate_goal`); a ``NONE`` answer drops the rollout.

    Returns:
        ``(trajectories, counts)``; counts has ``kept`` and the reasons for rejection.
    """
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    kept: list[Trajectory] = []
    counts = dict(kept=0, bad_action=0, truncated=0, format_mismatch=0, failed=0, no_goal=0)
    for goal, s0 in tasks:
        states, actions = [simulator.reset(s0, instruction=None)], []
        reason = None
        for _ in range(max_steps):
            a = agent(goal, states[-1])
            try:
                name = parse_action(a).name
            except ActionParseError:
                reason = "bad_action"
                break
            actions.append(a)
            if name in _TERMINAL:
                states.append(states[-1])
                break
            s, info = simulator.step(a)
            states.append(s)
            if info.get("truncated"):
                reason = "truncated"
                break
            if info.get("format_mismatch"):
                reason = "format_mismatch"
                break
        if reason is None and not (actions and success_fn(goal, states[-1])):
            reason = "failed"
        if reason is None and goal_llm is not None:
            goal = instantiate_goal(goal_llm, s0, actions, states[-1])
            reason = "no_goal" if goal is None else None
        if reason is not None:
            counts[reason] += 1
            continue
        kept.append(Trajectory(goal, states, actions, source="synthesized"))
        counts["kept"] += 1
    return kept, counts


def agent_sft_dataset(trajs: Iterable[Trajectory], prompt: str = AGENT_PROMPT) -> Dataset:
    """One prompt-completion chat per step: user = goal + observation ``s_t``, assistant = ``a_t``.

    Source: paper Section 5.1 (agent SFT on synthesised trajectories); the format is
    our inference (not given).

    The agent SFT data of §5.1.
    """
    rows = []
    for t in trajs:
        for s, a in zip(t.states, t.actions, strict=False):
            rows.append(
                {
                    "prompt": [
                        {"role": "user", "content": prompt.format(goal=t.instruction, state=s)}
                    ],
                    "completion": [{"role": "assistant", "content": a}],
                }
            )
    if not rows:
        raise ValueError("trajs must contain at least one step")
    return Dataset.from_list(rows)
