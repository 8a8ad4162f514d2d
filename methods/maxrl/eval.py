"""Evaluation of MaxRL runs: pass@k curves, majority vote and test-time-scaling efficiency.

Implements the evaluation protocol of arXiv:2602.02710 (App. G, App. J.1, Fig. 5): the unbiased
pass@k estimator of Chen et al. (2021) per problem, majority voting over sampled answers, and the
"test-time scaling efficiency" of a method over a baseline at equal coverage (the paper does not
formalise it; the definition used here is in :func:`tts_efficiency`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from common.metrics import pass_at_k as _pass_at_k

__all__ = ["majority_vote", "pass_at_k", "tts_efficiency"]


def pass_at_k(n: int, c: Tensor, k: int) -> Tensor:
    """Unbiased pass@k per problem, ``1 − C(n−c, k)/C(n, k)``: :func:`common.metrics.pass_at_k`
    (log space) for each problem's count.

    Source: paper App. G (unbiased estimator of Chen et al. 2021).

    Args:
        n: Samples drawn per problem.
        c: ``[P]`` number of correct samples per problem (0 <= c <= n).
        k: Budget, 1 <= k <= n.

    Returns:
        ``[P]`` float64 pass@k estimates.

    Raises:
        ValueError: k outside [1, n] or c outside [0, n].
    """
    if not 1 <= k <= n:
        raise ValueError(f"k must satisfy 1 <= k <= n={n}, got k={k}")
    c = torch.as_tensor(c, dtype=torch.float64)
    if ((c < 0) | (c > n)).any():
        raise ValueError(f"c must lie in [0, n={n}]")
    values = [_pass_at_k(int(n), int(ci), int(k)) for ci in c.reshape(-1).tolist()]
    return torch.tensor(values, dtype=torch.float64).reshape(c.shape)  # [P]


def majority_vote(
    answers: Sequence[Sequence[str | None]],
    gold: Sequence[str],
    equiv: Callable[[str, str], bool] | None = None,
) -> float:
    """Fraction of problems whose most frequent answer is correct (App. J.1).

    Args:
        answers: Per problem, the extracted final answers of its samples (None = no answer).
        gold: Per problem, the reference answer.
        equiv: Answer equivalence; default exact string match after stripping.

    Returns:
        Majority-vote accuracy in [0, 1].
    """
    if len(answers) != len(gold):
        raise ValueError(f"answers ({len(answers)}) and gold ({len(gold)}) differ in length")
    if not answers:
        raise ValueError("answers is empty")
    equiv = equiv or (lambda a, b: a.strip() == b.strip())
    hits = 0
    for samples, ref in zip(answers, gold):
        votes = Counter(a.strip() for a in samples if a is not None and a.strip())
        if votes and equiv(votes.most_common(1)[0][0], ref):
            hits += 1
    return hits / len(answers)


def tts_efficiency(
    k_grid: Sequence[int], cov_method: Sequence[float], cov_baseline: Sequence[float]
) -> float:
    """Test-time scaling efficiency of a method over a baseline at equal coverage (Fig. 5).

    Definition (inferred, the paper gives none): take the baseline's coverage at the largest budget,
    ``c* = cov_baseline(k_max)``; find the smallest budget k' at which the method reaches c*,
    interpolating the method's curve linearly in log k; return ``k_max / k'``. Returns ``nan`` if
    the method never reaches c* on the grid.

    Args:
        k_grid: Increasing budgets, e.g. 1, 2, 4, ..., 1024.
        cov_method: pass@k of the method on ``k_grid``.
        cov_baseline: pass@k of the baseline on ``k_grid``.
    """
    k = np.asarray(k_grid, dtype=float)
    m, b = np.asarray(cov_method, dtype=float), np.asarray(cov_baseline, dtype=float)
    if not (k.shape == m.shape == b.shape) or k.ndim != 1 or k.size == 0:
        raise ValueError("k_grid, cov_method and cov_baseline must be 1-D of equal length")
    if (np.diff(k) <= 0).any() or k[0] < 1:
        raise ValueError("k_grid must be strictly increasing and >= 1")
    target = b[-1]
    reach = np.nonzero(m >= target)[0]
    if reach.size == 0:
        return float("nan")
    i = int(reach[0])
    if i == 0:
        return float(k[-1] / k[0])
    lo, hi = np.log(k[i - 1]), np.log(k[i])
    frac = (target - m[i - 1]) / (m[i] - m[i - 1])
    return float(k[-1] / np.exp(lo + frac * (hi - lo)))
