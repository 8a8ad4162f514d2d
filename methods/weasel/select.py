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
from collections import defaultdict
from collections.abc import Sequence
from typing import Literal

import numpy as np

__all__ = [
    "brute_force_select",
    "compute_budget",
    "greedy_select",
    "greedy_select_many",
    "greedy_select_naive",
    "objective",
]

# Largest stacked distance block (elements) one vectorised step of ``greedy_select_many`` holds.
_MAX_BLOCK = 1 << 22


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
    """The selection objective ``F(J) = Σ_{j∈J} Φ(j) + λ Σ_{i<j∈J} D(i,j)``.

    Paper: the importance–diversity objective (abstract; project page); its exact form with λ is
    the official code's (``select_greedy.py``).

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
    """Greedy maximiser of the Weasel objective, vectorised over candidates.

    Paper: solved "efficiently with a greedy algorithm" (abstract; project page); the steps and
    tie rules below are official code ``select_greedy.py::greedy_select``.

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


def _greedy_stack(phi: np.ndarray, dist: np.ndarray, budget: int, lam: float) -> np.ndarray:
    """The greedy of :func:`greedy_select` on ``B`` same-size trajectories at once.

    ``phi`` is ``[B, n]``, ``dist`` is ``[B, n, n]`` and ``2 <= budget < n``. Every trajectory runs
    the same steps, so the best pair and each growth step are one ``argmax`` over ``B`` rows; each
    element is computed with the same floating-point operations in the same order as the naive loop
    (``(Φ(i) + Φ(j)) + λ·D(i,j)``; ``Σ_{i∈J} D(k,i)`` accumulated in insertion order), so ties and
    results are identical. Returns the ``[B, budget]`` chosen indices, each row sorted.
    """
    b, n = phi.shape
    rows = np.arange(b)
    pair = phi[:, :, None] + phi[:, None, :]  # [B, n, n]
    pair += lam * dist
    pair += np.where(np.tri(n, dtype=bool), -np.inf, 0.0)  # keep i < j only (x + 0 = x exactly)
    flat = pair.reshape(b, n * n).argmax(axis=1)  # row-major first maximum: first pair
    i0, j0 = np.divmod(flat, n)
    chosen = np.empty((b, budget), dtype=np.int64)
    chosen[:, 0], chosen[:, 1] = i0, j0
    acc = np.zeros((b, n))  # [B, n] running Σ_{i∈J} D(k, i)
    acc += dist[rows, :, i0]
    acc += dist[rows, :, j0]
    taken = np.zeros((b, n), dtype=bool)
    taken[rows, i0] = taken[rows, j0] = True
    for s in range(2, budget):
        gain = phi + lam * acc  # [B, n]
        gain[taken] = -np.inf
        k = gain.argmax(axis=1)  # first maximum: lowest index on ties
        chosen[:, s] = k
        taken[rows, k] = True
        acc += dist[rows, :, k]
    chosen.sort(axis=1)
    return chosen


def _group_by_size(
    importances: Sequence[np.ndarray], distances: Sequence[np.ndarray], budgets: Sequence[int]
) -> tuple[list[np.ndarray], list[np.ndarray], dict[tuple[int, int], list[int]]]:
    """Checks shapes and budgets per trajectory; groups trajectory ids by ``(n, min(budget, n))``."""
    phis, dists = [], []
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for t, (p, d, k) in enumerate(zip(importances, distances, budgets)):
        p = np.asarray(p, dtype=np.float64)
        d = np.asarray(d, dtype=np.float64)
        if p.ndim != 1 or d.ndim != 2 or d.shape != (p.shape[0], p.shape[0]):
            raise ValueError(
                f"trajectory {t}: importance must be [n] and distance [n, n], got shapes "
                f"{p.shape} and {d.shape}"
            )
        try:
            k = _check_budget(k)
        except (TypeError, ValueError) as e:
            raise type(e)(f"trajectory {t}: {e}") from None
        phis.append(p)
        dists.append(d)
        groups[(p.shape[0], min(k, p.shape[0]))].append(t)
    return phis, dists, groups


def greedy_select_many(
    importances: Sequence[np.ndarray],
    distances: Sequence[np.ndarray],
    budgets: Sequence[int] | int,
    lam: float = 1.0,
) -> list[list[int]]:
    """:func:`greedy_select` on many trajectories, vectorised over candidates and trajectories.

    The same greedy (the paper's greedy solver of the importance–diversity objective; official
    ``select_greedy.py::greedy_select``) and the same result as
    ``[greedy_select(p, d, k, lam) for p, d, k in zip(importances, distances, budgets)]``.
    Trajectories are grouped by ``(n, min(budget, n))`` and each group is stacked, so one numpy
    operation serves every trajectory of the group (blocks of at most ``2**22`` distance entries).
    This is how the selector scores a corpus (issue: ≥ 5× the naive loop at 50,000 steps).

    Args:
        importances: per trajectory, ``[n_t]`` unary scores Φ.
        distances: per trajectory, ``[n_t, n_t]`` pairwise distances D.
        budgets: per trajectory, the subset size T0 ≥ 1 (or one int for all).
        lam: diversity weight λ ≥ 0.

    Returns:
        Per trajectory, the sorted list of ``min(budget, n_t)`` selected indices.

    Raises:
        ValueError: on lists of different lengths, bad shapes, NaN/Inf, λ < 0 or budget < 1 (the
            message names the trajectory).
        TypeError: if a budget is not an int or λ is not a real number.
    """
    n_traj = len(importances)
    if isinstance(budgets, (int, np.integer)) and not isinstance(budgets, bool):
        budgets = [int(budgets)] * n_traj
    if len(distances) != n_traj or len(budgets) != n_traj:
        raise ValueError(
            f"importances, distances and budgets must have the same length, got {n_traj}, "
            f"{len(distances)} and {len(budgets)}"
        )
    _check_inputs(np.zeros(0), np.zeros((0, 0)), lam)  # λ alone
    phis, dists, groups = _group_by_size(importances, distances, budgets)
    out: list[list[int]] = [[] for _ in range(n_traj)]
    for (n, k), members in groups.items():
        if n == 0:
            continue
        step = max(1, _MAX_BLOCK // (n * n))
        for s in range(0, len(members), step):
            block = members[s : s + step]
            phi = np.stack([phis[t] for t in block])  # [B, n]
            dist = np.stack([dists[t] for t in block])  # [B, n, n]
            for arr, name in ((phi, "importance"), (dist, "distance")):
                bad = ~np.isfinite(arr).reshape(len(block), -1).all(axis=1)
                if bad.any():
                    t_bad = block[int(np.argmax(bad))]
                    raise ValueError(f"trajectory {t_bad}: {name} contains NaN or Inf")
            if n <= k:
                sel = np.broadcast_to(np.arange(n), (len(block), n))
            elif k == 1:
                sel = phi.argmax(axis=1)[:, None]
            else:
                sel = _greedy_stack(phi, dist, k, lam)
            for t, row in zip(block, sel.tolist()):
                out[t] = row
    return out


def greedy_select_naive(
    importance: np.ndarray, distance: np.ndarray, budget: int, lam: float = 1.0
) -> list[int]:
    """Plain-loop reference for :func:`greedy_select` (O(n² + n·k²)), the loops of official code
    ``select_greedy.py::greedy_select`` on numpy input; used by tests and the bench."""
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

    For tests only (``n ≤ 14``); ties go to the lexicographically first subset. The paper checks
    its greedy against brute force the same way (secondary notes; docs/methods/weasel.md).

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
    """Per-trajectory budget T0 (official code ``select_greedy.py::compute_t0``; the paper states a
    fixed budget ``|J| = T0`` only).

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
