"""Synthetic reward landscapes for the toy's diagnosis (issue 43; our CPU toy, not in the paper).

``method.landscape=chain`` replaces only the similarity of the toy: the executor appends the name of
every agent it runs to a trace line after the content (``TracingExecutor``; agents, tools and the
no-code rule see exactly the plain executor's content), and the reward of a chain against the black box is

    Sim_α(pred, ref) = (1 − α)·J(agents(pred), agents(ref)) + α·LCP(pred, ref)/L

with J the Jaccard index of the two sets of agent names (presence only), LCP the longest common
prefix of the two agent sequences and L the hidden chain's length. α = 0 is a landscape that depends
only on which agents a chain contains; α = 1 rewards only a correct prefix, the order-dependent
landscape a prefix tree (MCTS) is built for. ``presence_r2`` measures how additive a landscape is:
the R² of a linear fit of the reward on the agents' presence indicators.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np

from .executor import WorkflowExecutor
from .primitives import Primitive

TRACE_MARK = "\n\n# agentxray-trace: "  # our marker; never inside a code fence
LANDSCAPES = ("output", "chain")  # method.landscape: today's similarity on outputs | Sim_α


def split_trace(content: str) -> tuple[str, list[str]]:
    """(content without the trace line, the agent names it records) (our construction)."""
    body, sep, names = content.rpartition(TRACE_MARK)
    return (body, names.split(",")) if sep else (content, [])


def with_trace(content: str, names: Sequence[str]) -> str:
    """``content`` with a trailing trace line (outside every code fence; none for no names;
    our construction)."""
    return content + TRACE_MARK + ",".join(names) if names else content


class TracingExecutor(WorkflowExecutor):
    """``WorkflowExecutor`` that records the agents of a chain in a trailing trace line (our construction).

    Every primitive (agent or tool) and the no-code rule of ``final_output`` see exactly the
    content the plain executor gives them (the trace is split off first), so chains run, fail and
    cost as before; only ``chain_similarity`` reads the trace.
    """

    def step(self, p: Primitive, task: str, content: str) -> str | None:
        body, names = split_trace(content)
        out = super().step(p, task, body)
        if out is None:
            return None
        return with_trace(out, [*names, p.name] if p.kind == "agent" else names)

    def final_output(self, content: str | None) -> str:
        body, names = split_trace(content or "")
        out = super().final_output(body)
        return with_trace(out, names) if out else ""


def chain_of(text: str) -> list[str]:
    """The agent names recorded in an output's trace line (empty when there is none; our construction)."""
    return split_trace(text)[1]


def chain_score(pred: Sequence[str], ref: Sequence[str], alpha: float) -> float:
    """(1 − α)·J(set(pred), set(ref)) + α·LCP(pred, ref)/len(ref); ``ref`` must be non-empty (our
    construction: a landscape whose additivity α controls, not in the paper)."""
    if not ref:
        raise ValueError("the reference chain is empty: the black box must run the traced agents")
    a, b = set(pred), set(ref)
    jac = len(a & b) / len(a | b)
    lcp = 0
    while lcp < min(len(pred), len(ref)) and pred[lcp] == ref[lcp]:
        lcp += 1
    return (1.0 - alpha) * jac + alpha * lcp / len(ref)


def chain_similarity(alpha: float) -> Callable[[str, str], float]:
    """``Sim_α(pred, ref)`` on two traced outputs (``method.landscape=chain``; our construction)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")

    def sim(pred: str, ref: str) -> float:
        return chain_score(chain_of(pred), chain_of(ref), alpha)

    return sim


def presence_r2(
    score: Callable[[list[str]], float], agents: Sequence[str], n: int, max_len: int, seed: int
) -> dict[str, float]:
    """How additive a landscape is in the agents a chain contains (our construction).

    Draws ``n`` random chains (length 1–``max_len``, agents with replacement), scores each with
    ``score`` and fits reward ≈ b + Σ_a w_a·[a ∈ chain] by least squares. Returns the in-sample R²
    and the R² on a held-out half (fit on the first half of the draws).
    """
    rng = random.Random(seed)
    chains = [[rng.choice(agents) for _ in range(rng.randint(1, max_len))] for _ in range(n)]
    x = np.array([[1.0] + [float(a in c) for a in agents] for c in chains])
    y = np.array([score(c) for c in chains])

    def r2(fit: slice, ev: slice) -> float:
        w = np.linalg.lstsq(x[fit], y[fit], rcond=None)[0]
        res = y[ev] - x[ev] @ w
        return float(1.0 - res @ res / ((y[ev] - y[ev].mean()) @ (y[ev] - y[ev].mean())))

    half = n // 2
    return {
        "r2": r2(slice(None), slice(None)),
        "r2_heldout": r2(slice(0, half), slice(half, None)),
        "reward_mean": float(y.mean()),
        "reward_std": float(y.std()),
    }
