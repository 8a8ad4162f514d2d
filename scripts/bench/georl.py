"""Geo-RL bench: closed-form LOO gains (one Cholesky) vs brute-force slogdet, same inputs.

Reports, per group size N, the time ratio brute ÷ closed form and the max absolute difference.
Run: ``python scripts/bench/georl.py`` (CPU, a few seconds).
"""

from __future__ import annotations

import sys
import time

import torch

from methods.georl import l_ensemble, loo_gains, loo_gains_bruteforce


def _time(fn, reps: int) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    print("command:", " ".join(["python", *sys.argv]))
    print("| N | groups | brute / closed-form time | max abs diff |")
    print("|---|---|---|---|")
    for n in (4, 8, 16, 32, 64):
        emb = torch.randn(64, n, 384)
        q = torch.rand(64, n) * 0.9 + 0.1
        L = l_ensemble(emb, q, gamma=2.0, jitter=1e-3)  # 64 groups
        fast = _time(lambda L=L: loo_gains(L), 5)
        slow = _time(lambda L=L: loo_gains_bruteforce(L), 2)
        diff = (loo_gains(L) - loo_gains_bruteforce(L)).abs().max().item()
        print(f"| {n} | 64 | {slow / fast:.1f}x | {diff:.1e} |")


if __name__ == "__main__":
    main()
