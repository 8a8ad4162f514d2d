"""MCCE bench: cost of the official whole-archive NSGA-II selection and of the HV metric, as ratios.

Selection runs on the *entire* archive every generation (official
``model/util.py::nsga2_so_selection``), so its cost grows with the
budget. This measures, on random 5-objective t vectors, `nsga2_so_select(archive, 50)` and the
top-100 hypervolume against a plain top-k by F (the scalar baseline), at archive sizes up to the
paper's budget of 5000.

    python scripts/bench/mcce.py
"""

from __future__ import annotations

import sys
import time

import numpy as np

from methods.mcce import Candidate, fitness, hypervolume, nsga2_so_select


def _timeit(fn, reps: int = 3) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    print("command:", " ".join(["python", *sys.argv]))
    print("| archive | select (s) | top-k (s) | select / top-k | HV top-100 (s) | HV / top-k |")
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for n in (500, 1000, 2500, 5000):
        t = rng.random((n, 5))
        cands = [Candidate(f"C{i}", {}, t[i], float(fitness(t[i])), index=i) for i in range(n)]
        sel = _timeit(lambda c=cands: nsga2_so_select(c, 50))
        topk = _timeit(lambda c=cands: sorted(c, key=lambda x: -x.total)[:50])
        hv = _timeit(lambda c=cands: hypervolume(c, top=100))
        print(f"| {n} | {sel:.4f} | {topk:.5f} | {sel / topk:.0f}x | {hv:.4f} | {hv / topk:.0f}x |")


if __name__ == "__main__":
    main()
