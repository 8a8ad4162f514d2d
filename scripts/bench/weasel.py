"""Bench: Weasel greedy selection (vectorised) vs the naive O(n² + n·k²) Python loop.

Usage: python scripts/bench/weasel.py [--n-steps 50000] [--traj-len 20] [--budget 3]
Prints the wall-clock of both on the same random trajectories (metric distances from points in R²)
and their ratio, and checks that both return the same subsets.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from methods.weasel.select import greedy_select, greedy_select_naive


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-steps", type=int, default=50_000)
    ap.add_argument("--traj-len", type=int, default=20)
    ap.add_argument("--budget", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    inst = []
    for _ in range(a.n_steps // a.traj_len):
        pts = rng.uniform(size=(a.traj_len, 2))
        dist = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
        inst.append((rng.uniform(size=a.traj_len), dist))
    t0 = time.perf_counter()
    fast = [greedy_select(p, d, a.budget) for p, d in inst]
    t_fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    slow = [greedy_select_naive(p, d, a.budget) for p, d in inst]
    t_slow = time.perf_counter() - t0
    assert fast == slow, "vectorised and naive greedy disagree"
    print(f"command: python {' '.join(sys.argv)}")
    print(f"steps={a.n_steps} trajectories={len(inst)} n={a.traj_len} budget={a.budget}")
    print(
        f"vectorised {t_fast:.2f} s, naive {t_slow:.2f} s, naive/vectorised = {t_slow / t_fast:.1f}x"
    )


if __name__ == "__main__":
    main()
