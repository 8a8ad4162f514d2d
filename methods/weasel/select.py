"""The importance–diversity objective and its greedy maximiser (the paper's objective and greedy, as on
its project page; official ``select_greedy.py``).

For one trajectory of ``n`` steps, Weasel picks a subset ``J`` of size ``T0`` that maximises the
max-sum-diversification objective

    F(J) = Σ_{j∈J} Φ(j) + λ · Σ_{i<j; i,j∈J} D(i, j)

with unary importance ``Φ`` (``[n]``) and a symmetric pairwise distance ``D`` (``[n, n]``, zero
diagonal). The problem is NP-hard; the paper and the official code solve it greedily: best pair
first, then the step with the largest marginal gain, until the budget is reached. Ties are broken
deterministically (lexicographically first pair, then lowest index).

Shape letters: n steps in one trajectory, k = |J| the budget.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

__all__ = [
    "brute_force_select",
    "compute_budget",
    "greedy_select",
    "greedy_select_naive",
    "objective",
]


def _check_inputs(
    importance: np.ndarray, distance: np.ndarray, lam: float
) -> tuple[np.ndarray, np.ndarray]:
    phi = np.asarray(importance, dtype=np.float64)
    dist = np.asarray(distance, dtype=np.float64)
    if phi.ndim != 1:
        raise ValueError(f"importance must be 1-D [n], got shape {phi.shape}")
    if dist.ndim != 2 or dist.shape[0] != dist.shape[1]:
        raise ValueError(f"distance must be a square [n, n] matrix, got shape {dist.shape}")
    if dist.shape[0] != phi.shape[0]:
        raise ValueError(
            f"distance size {dist.shape[0]} does not match len(importance) = {phi.shape[0]}"
        )
    if not np.all(np.isfinite(phi)):
        raise ValueError("importance contains NaN or Inf")
    if not np.all(np.isfinite(dist)):
        raise ValueError("distance contains NaN or Inf")
    if not isinstance(lam, (int, float)) or isinstance(lam, bool) or not math.isfinite(lam):
        raise TypeError(f"lam must be a finite real number, got {lam!r}")
    if lam < 0:
        raise ValueError(f"lam must be >= 0, got {lam}")
    return phi, dist


def _check_budget(budget: int) -> int:
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
        raise TypeError(f"budget must be an int, got {type(budget).__name__}")
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    return int(budget)


def objective(
    J: Sequence[int], importance: np.ndarray, distance: np.ndarray, lam: float = 1.0
) -> float:
    """The selection objective ``F(J) = Σ_{j∈J} Φ(j) + λ Σ_{i<j∈J} D(i,j)`` (official ``select_greedy.py``).

    Args:
        J: distinct step indices in ``[0, n)``.
        importance: ``[n]`` unary scores Φ.
        distance: ``[n, n]`` pairwise distances D (only the pairs ``i < j`` of ``J`` are read,
            through the upper triangle ``D[min, max]``).
        lam: diversity weight λ ≥ 0.

    Returns:
        The objective value as a float.

    Raises:
        ValueError: on bad shapes, non-finite values, λ < 0, repeated or out-of-range indices.
    """
    phi, dist = _check_inputs(importance, distance, lam)
    idx = [int(j) for j in J]
    if len(set(idx)) != len(idx):
        raise ValueError(f"J must hold distinct indices, got {idx}")
    if any(j < 0 or j >= phi.shape[0] for j in idx):
        raise ValueError(f"J indices must lie in [0, {phi.shape[0]}), got {idx}")
    srt = sorted(idx)
    pair_sum = sum(dist[a, b] for a, b in itertools.combinations(srt, 2))
    return float(phi[srt].sum() + lam * pair_sum)


def greedy_select(
    importance: np.ndarray, distance: np.ndarray, budget: int, lam: float = 1.0
) -> list[int]:
    """Greedy maximiser of the Weasel objective (official ``select_greedy.py``), vectorised.

    1. ``n = 0`` → ``[]``; ``n ≤ budget`` → all steps; ``budget = 1`` → ``[argmax Φ]``.
    2. Start from the best pair ``argmax_{i<j} Φ(i) + Φ(j) + λ D(i,j)`` (ties: lexicographically
       first pair).
    3. Grow by ``argmax_{k∉J} Φ(k) + λ Σ_{i∈J} D(k,i)`` (ties: lowest ``k``) until ``|J| = budget``.
    4. Return ``J`` sorted, so the trajectory order is kept.

    The running column sum ``Σ_{i∈J} D(:, i)`` is updated once per added step, so the growth phase
    costs O(n·k) instead of the naive O(n·k²); the floating-point summation order is the same as in
    :func:`greedy_select_naive`, so both return the same set.

    Args:
        importance: ``[n]`` unary scores Φ.
        distance: ``[n, n]`` symmetric pairwise distances D.
        budget: the subset size T0 ≥ 1.
        lam: diversity weight λ ≥ 0.

    Returns:
        Sorted list of ``min(budget, n)`` distinct indices.

    Raises:
        ValueError: on bad shapes, NaN/Inf, λ < 0 or budget < 1.
        TypeError: if budget is not an int.
    """
    phi, dist = _check_inputs(importance, distance, lam)
    budget = _check_budget(budget)
    n = phi.shape[0]
    if n == 0:
        return []
    if n <= budget:
        return list(range(n))
    if budget == 1:
        return [int(np.argmax(phi))]
    pair = phi[:, None] + phi[None, :] + lam * dist  # [n, n]
    pair[np.tril_indices(n)] = -np.inf  # keep i < j only
    flat = int(np.argmax(pair))  # row-major first maximum = lexicographically first pair
    i0, j0 = divmod(flat, n)
    chosen = [i0, j0]
    acc = np.zeros(n)  # [n] running Σ_{i∈J} D(k, i), same summation order as the naive loop
    acc += dist[:, i0]
    acc += dist[:, j0]
    mask = np.zeros(n, dtype=bool)
    mask[chosen] = True
    while len(chosen) < budget:
        gain = phi + lam * acc  # [n]
        gain[mask] = -np.inf
        k = int(np.argmax(gain))  # first maximum = lowest index on ties
        chosen.append(k)
        mask[k] = True
        acc += dist[:, k]
    return sorted(chosen)


def greedy_select_naive(
    importance: np.ndarray, distance: np.ndarray, budget: int, lam: float = 1.0
) -> list[int]:
    """Plain-loop reference for :func:`greedy_select` (O(n² + n·k²)); used by tests and the bench."""
    phi, dist = _check_inputs(importance, distance, lam)
    budget = _check_budget(budget)
    n = phi.shape[0]
    if n == 0:
        return []
    if n <= budget:
        return list(range(n))
    if budget == 1:
        return [int(np.argmax(phi))]
    best, best_pair = -math.inf, (0, 1)
    for i in range(n):
        for j in range(i + 1, n):
            val = phi[i] + phi[j] + lam * dist[i, j]
            if val > best:
                best, best_pair = val, (i, j)
    chosen = list(best_pair)
    while len(chosen) < budget:
        best, best_k = -math.inf, -1
        for k in range(n):
            if k in chosen:
                continue
            s = 0.0
            for i in chosen:
                s += dist[k, i]
            val = phi[k] + lam * s
            if val > best:
                best, best_k = val, k
        chosen.append(best_k)
    return sorted(chosen)


def brute_force_select(
    importance: np.ndarray, distance: np.ndarray, budget: int, lam: float = 1.0
) -> list[int]:
    """Exact maximiser of the objective by enumerating all subsets of size ``min(budget, n)``.

    For tests only (``n ≤ 14``); ties go to the lexicographically first subset.

    Raises:
        ValueError: on bad input, or ``n > 14``.
    """
    phi, dist = _check_inputs(importance, distance, lam)
    budget = _check_budget(budget)
    n = phi.shape[0]
    if n > 14:
        raise ValueError(f"brute_force_select is for n <= 14, got n = {n}")
    k = min(budget, n)
    best, best_J = -math.inf, list(range(k))
    for J in itertools.combinations(range(n), k):
        val = objective(J, phi, dist, lam)
        if val > best:
            best, best_J = val, list(J)
    return best_J


def compute_budget(
    n: int, mode: Literal["fixed", "percentage"] = "fixed", fixed: int = 3, pct: float = 0.25
) -> int:
    """Per-trajectory budget T0 (official ``select_greedy.py``, official code).

    ``fixed``: ``clip(fixed, 1, n)``; ``percentage``: ``clip(ceil(pct·n), 1, n)``. Returns 0 for
    an empty trajectory.

    Raises:
        ValueError: on ``n < 0``, ``fixed < 1``, ``pct ∉ (0, 1]`` or an unknown mode.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if mode == "fixed":
        if fixed < 1:
            raise ValueError(f"fixed must be >= 1, got {fixed}")
        raw = fixed
    elif mode == "percentage":
        if not 0 < pct <= 1:
            raise ValueError(f"pct must lie in (0, 1], got {pct}")
        raw = math.ceil(pct * n)
    else:
        raise ValueError(f"mode must be 'fixed' or 'percentage', got {mode!r}")
    if n == 0:
        return 0
    return int(min(max(raw, 1), n))
