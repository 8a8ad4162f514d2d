"""AgentXRay bench: Red-Black MCTS ÷ unpruned MCTS on XRayBench-lite, same tasks and seeds.

Reports, per iteration budget N, the ratios red-black ÷ no-coloring of simulated tokens, primitive
executions and search wall time.
Run: ``python scripts/bench/agentxray.py`` (CPU, well under a minute).
"""

from __future__ import annotations

import statistics
import sys
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


def _search(coloring: bool, iters: int, seed: int, train):
    meter = CostMeter()
    ex = WorkflowExecutor(ToyChat(), TOY_TOOLS, meter)
    gen = StaticProfileGenerator(toy_agent_pool(), seed=seed, meter=meter)
    cfg = MCTSConfig(iterations=iters, coloring=coloring, seed=seed)
    t = time.perf_counter()
    res = AgentXRaySearch(PrimitiveSpace(list(TOY_TOOLS), gen), ex, sfe, cfg).run(train)
    return res.tokens["tokens/total"], res.executions, time.perf_counter() - t


def main() -> None:
    print("command:", " ".join(["python", *sys.argv]))
    bb = WorkflowExecutor(ToyChat(), TOY_TOOLS, CostMeter())
    hidden = [Primitive("agent", n) for n in HIDDEN_CHAIN]
    train = [(t, bb.run(hidden, t)) for t in make_tasks(8, 0)]
    print("| N | tokens RB/NC | executions RB/NC | wall RB/NC |")
    print("|---|---|---|---|")
    for iters in (20, 60):
        rows = [(_search(True, iters, s, train), _search(False, iters, s, train)) for s in range(3)]
        ratio = [statistics.mean(rb[i] / nc[i] for rb, nc in rows) for i in range(3)]
        print(f"| {iters} | {ratio[0]:.2f} | {ratio[1]:.2f} | {ratio[2]:.2f} |")


if __name__ == "__main__":
    main()
