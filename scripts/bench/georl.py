"""Geo-RL: closed-form leave-one-out gains (one Cholesky) vs brute-force slogdet, same inputs.

Per group size N: time of ``loo_gains`` (method) vs ``loo_gains_bruteforce`` (baseline) on 64 groups
of N 384-d embeddings, and the max absolute difference of the gains (must be ~0).
"""

from __future__ import annotations

import torch

from methods.georl import l_ensemble, loo_gains, loo_gains_bruteforce
from scripts.bench._harness import row, spread_ratio, time_pair


def run(quick: bool = False) -> dict:
    torch.manual_seed(0)
    ns, reps = ((4, 16), 3) if quick else ((4, 8, 16, 32, 64), 7)
    rows, diffs = [], []
    for n in ns:
        emb = torch.randn(64, n, 384)
        q = torch.rand(64, n) * 0.9 + 0.1
        L = l_ensemble(emb, q, gamma=2.0, jitter=1e-3)
        m, b, _, q1, q3 = time_pair(
            lambda L=L: loo_gains(L), lambda L=L: loo_gains_bruteforce(L), reps
        )
        diffs.append(f"N={n}: {(loo_gains(L) - loo_gains_bruteforce(L)).abs().max().item():.1e}")
        # the closed form must be faster than brute force: ratio < 1
        rows.append(
            row(f"LOO gains time (s), N={n}, 64 groups", m, b, spread_ratio(q1, q3), max_ratio=1.0)
        )
    return {
        "title": "Geo-RL LOO gains: closed form vs brute force",
        "command": "python -m scripts.bench georl",
        "rows": rows,
        "notes": "Max |closed form − brute force|: "
        + ", ".join(diffs)
        + ". Threshold: ours, the closed "
        "form should not be slower than brute force (the issue sets none for this bench).",
    }
