"""Geo-RL: geometric-coverage reinforcement learning for exhaustive visual description.

ICML 2026 (title, authors and arXiv id not found; reconstructed from the abstract). Idea: sample N
descriptions of one image, embed them, and reward the group for the log-volume of the DPP
L-ensemble they span (quality-weighted Gram determinant); each description is credited with its
closed-form leave-one-out marginal ``-log (L^{-1})_ii``, an unbiased per-sample policy-gradient signal.
"""

from methods.georl.dpp import (
    l_ensemble,
    log_volume,
    loo_advantages,
    loo_gains,
    loo_gains_bruteforce,
)

__all__ = [
    "l_ensemble",
    "log_volume",
    "loo_advantages",
    "loo_gains",
    "loo_gains_bruteforce",
]
