"""AgentXRay: Red-Black MCTS vs unpruned MCTS on XRayBench-lite, same tasks and seeds.

Per iteration budget N: simulated tokens, primitive executions and search wall time of red-black
(method) vs no colouring (baseline), mean over seeds 0-2 (ratio of the means).
"""

from __future__ import annotations

import statistics
import time

from methods.agentxray import (
    AgentXRaySearch,
    CostMeter,
    MCTSConfig,
    Primitive,
    PrimitiveSpace,
    StaticProfileGenerator,
    WorkflowExecutor,
    sfe,
)
from methods.agentxray.toy import HIDDEN_CHAIN, TOY_TOOLS, ToyChat, make_tasks, toy_agent_pool
from scripts.bench._harness import row


def _search(coloring: bool, iters: int, seed: int, train):
    meter = CostMeter()
    ex = WorkflowExecutor(ToyChat(), TOY_TOOLS, meter)
    gen = StaticProfileGenerator(toy_agent_pool(), seed=seed, meter=meter)
    cfg = MCTSConfig(iterations=iters, coloring=coloring, seed=seed)
    t = time.perf_counter()
    res = AgentXRaySearch(PrimitiveSpace(list(TOY_TOOLS), gen), ex, sfe, cfg).run(train)
    return res.tokens["tokens/total"], res.executions, time.perf_counter() - t


def run(quick: bool = False) -> dict:
    bb = WorkflowExecutor(ToyChat(), TOY_TOOLS, CostMeter())
    hidden = [Primitive("agent", n) for n in HIDDEN_CHAIN]
    train = [(t, bb.run(hidden, t)) for t in make_tasks(8, 0)]
    budgets, seeds = ((10,), 2) if quick else ((20, 60), 3)
    rows = []
    for iters in budgets:
        res = [
            (_search(True, iters, s, train), _search(False, iters, s, train)) for s in range(seeds)
        ]
        for i, name in enumerate(("simulated tokens", "primitive executions", "search wall s")):
            rb = [r[0][i] for r in res]
            nc = [r[1][i] for r in res]
            per = [a / b for a, b in zip(rb, nc)]
            rows.append(
                row(
                    f"{name}, N={iters}",
                    statistics.mean(rb),
                    statistics.mean(nc),
                    f"per-seed ratios {min(per):.2f}–{max(per):.2f} ({seeds} seeds)",
                )
            )
    return {
        "title": "AgentXRay Red-Black pruning vs unpruned MCTS",
        "command": "python -m scripts.bench agentxray",
        "rows": rows,
        "notes": "No threshold in the issue; ratios < 1 are the pruning's saving.",
    }
