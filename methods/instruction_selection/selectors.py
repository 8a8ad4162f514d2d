"""Subset selectors that turn a similarity matrix into an ordering of the pool (the paper's
selection algorithms: RR, DG, UOT, KNN-Uniform, KNN-KDE; official ``selection/*.py``).

Every selector reads ``S`` of shape ``[M, N]`` (rows = queries, columns = candidates, cosine values)
and returns the first ``B`` indices of a full ordering, so subsets are nested across budgets. The
selectors are the paper's round-robin (RR), doubly-greedy max aggregation (DG), explicit unbalanced
optimal transport (UOT, the paper's new selector), and TSDS's KNN-Uniform and KNN-KDE; random and a
plain top-k are the baselines. Shapes: M queries, N candidates, B budget, D features.
"""

from __future__ import annotations

import heapq
import logging
import math
import warnings
from collections.abc import Sequence
from typing import Literal

import numpy as np

from .similarity import _as_2d_float

logger = logging.getLogger(__name__)

FillPolicy = Literal["error", "max_sim"]
TieBreak = Literal["official", "stable"]
TIE_BREAKS: tuple[str, ...] = ("official", "stable")


def _check_similarity(S: np.ndarray) -> np.ndarray:
    S = _as_2d_float(np.asarray(S) if not hasattr(S, "detach") else S, "S")
    if S.shape[0] == 0 or S.shape[1] == 0:
        raise ValueError(f"S must be [M, N] with M, N >= 1, got shape {S.shape}")
    return S.astype(np.float64)


def _check_budget(B: int, N: int) -> int:
    if isinstance(B, bool) or not isinstance(B, (int, np.integer)):
        raise TypeError(f"B must be an int, got {type(B).__name__}")
    if not 1 <= B <= N:
        raise ValueError(f"B must lie in [1, N={N}] (the pool size), got {B}")
    return int(B)


def _descending(scores: np.ndarray, tie_break: TieBreak = "stable") -> np.ndarray:
    """Indices by descending score.

    ``tie_break="stable"``: exact ties go to the smaller index. ``"official"``: numpy's default
    (unstable) ``np.argsort(-scores)``, as in the official ``selection/doubly_greedy.py`` and
    ``selection/uot.py``; the order among exactly tied scores is then whatever the sort leaves.
    """
    if tie_break == "official":
        return np.argsort(-scores)
    if tie_break == "stable":
        return np.argsort(-scores, kind="stable")
    raise ValueError(f"tie_break must be one of {TIE_BREAKS}, got {tie_break!r}")


def round_robin(S: np.ndarray, B: int) -> list[int]:
    """Greedy round-robin (RR): queries take turns picking their best unused candidate.

    Official ``selection/round_robin.py``.

    Query ``i = 0, 1, …, M−1, 0, 1, …`` picks ``argmax_{j ∉ used} S[i, j]`` (ties → smallest ``j``)
    until ``B`` candidates are chosen. Each row is sorted once and a pointer skips used columns, so
    the cost is ``O(M N log N + M B)`` instead of ``O(B N)``.

    Args:
        S: similarities ``[M, N]``.
        B: budget, ``1 <= B <= N``.

    Returns:
        ``B`` distinct candidate indices in pick order.
    """
    S = _check_similarity(S)
    M, N = S.shape
    B = _check_budget(B, N)
    ranked = np.argsort(-S, axis=1, kind="stable")  # [M, N]
    ptr = np.zeros(M, dtype=np.int64)
    used = np.zeros(N, dtype=bool)
    order: list[int] = []
    i = 0
    while len(order) < B:
        row = ranked[i]
        p = ptr[i]
        while used[row[p]]:  # always terminates: fewer than N columns are used
            p += 1
        j = int(row[p])
        used[j] = True
        order.append(j)
        ptr[i] = p + 1
        i = (i + 1) % M
    return order


def doubly_greedy(S: np.ndarray, B: int, tie_break: TieBreak = "official") -> list[int]:
    """Doubly-greedy / LESS max aggregation (DG): rank candidates by ``max_i S[i, j]``.

    Official ``selection/doubly_greedy.py``. The prefix of size ``B`` minimises the candidate-side
    distance ``(1/B) Σ_{j∈S} min_i (1 − S_ij)`` over all subsets of size ``B``. ``tie_break``: see
    :func:`_descending` (default: the official unstable argsort; ``"stable"``: smaller index first).
    """
    S = _check_similarity(S)
    B = _check_budget(B, S.shape[1])
    return [int(j) for j in _descending(S.max(axis=0), tie_break)[:B]]


def uot_plan(
    S: np.ndarray, eps: float = 0.01, reg_m: tuple[float, float] = (math.inf, 1e-4)
) -> np.ndarray:
    """The entropic unbalanced-OT plan between queries and candidates (UOT).

    Official ``selection/uot.py``.

    ``T* = argmin_{T≥0} ⟨T, C⟩ + ε KL(T‖abᵀ) + τ₁ KL(T1‖a) + τ₂ KL(Tᵀ1‖b)`` with
    ``C = (1 − S)/2``, ``a = 1/M``, ``b = 1/N``; solved by POT's ``sinkhorn_unbalanced``.

    Returns:
        The plan ``[M, N]``.

    Raises:
        ValueError: on ``eps <= 0``, negative ``reg_m``, a NaN plan or a plan whose query
            marginal is off by more than 5% of ``1/M`` or on which POT reports numerical errors
            (Sinkhorn underflow at a tiny ``eps``).
    """
    S = _check_similarity(S)
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    if len(reg_m) != 2 or any(not r > 0 for r in reg_m):
        raise ValueError(f"reg_m must be two positive numbers (inf allowed), got {reg_m}")
    import ot

    M, N = S.shape
    C = (1.0 - S) / 2.0  # [M, N] in [0, 1]
    a = np.full(M, 1.0 / M)
    b = np.full(N, 1.0 / N)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        T = ot.unbalanced.sinkhorn_unbalanced(
            a, b, C, reg=eps, reg_m=tuple(float(r) for r in reg_m), reg_type="kl"
        )
    broke = [str(w.message) for w in caught if "Numerical errors" in str(w.message)]
    if not np.isfinite(T).all():
        raise ValueError(
            f"the UOT plan has NaN/inf entries at eps={eps}; raise eps or use a log-domain solver"
        )
    # POT returns the last finite iterate when exp(-C/eps) underflows: a plan with (almost) no mass
    # whose ranking is the index order. The query marginal T1 must match a (exactly when tau_1 = inf,
    # up to the KL penalty otherwise); a far-off marginal means the solver broke down.
    rel = float(np.abs(T.sum(axis=1) - a).max() / a[0]) if math.isinf(reg_m[0]) else 0.0
    if broke or not rel < 0.05:
        raise ValueError(
            f"eps={eps} is too small for the Sinkhorn solver "
            f"({broke[0] if broke else f'query marginal off by {rel:.0%} of 1/M'}): exp(-C/eps) "
            "underflows and the ranking would be meaningless; use eps >= 1e-3"
        )
    return T


def uot(
    S: np.ndarray,
    B: int,
    eps: float = 0.01,
    reg_m: tuple[float, float] = (math.inf, 1e-4),
    tie_break: TieBreak = "official",
) -> list[int]:
    """Unbalanced-OT selector: rank candidates by received mass ``μ_j = Σ_i T*_ij``.

    Official ``selection/uot.py``. With ``τ₁ = ∞`` every query ships exactly ``1/M``; with
    ``τ₂ ≈ 0`` the candidate marginal is almost free, so mass concentrates on the candidates closest
    to the queries. ``tie_break``: see :func:`_descending` (default: the official unstable argsort).
    """
    S = _check_similarity(S)
    B = _check_budget(B, S.shape[1])
    mass = uot_plan(S, eps=eps, reg_m=reg_m).sum(axis=0)  # [N]
    return [int(j) for j in _descending(mass, tie_break)[:B]]


def knn_uniform_probs(
    S: np.ndarray, L: int = 5000, alpha: float = 0.01, C: float = 5.0
) -> tuple[np.ndarray, int]:
    """TSDS KNN-Uniform: each query spreads ``1/M`` evenly over its ``K`` nearest candidates.

    TSDS (Liu et al. 2024) as the paper runs it; official ``selection/tsds_subset.py``.

    ``d = 1 − S``; with each query's sorted distances ``d_{i,1} ≤ d_{i,2} ≤ …`` (at most
    ``L`` of them), ``K`` is the smallest ``K ≥ 1`` with
    ``(α/C) Σ_i Σ_{k≤K} (d_{i,K+1} − d_{i,k}) ≥ (1 − α) M``, or ``L`` if none qualifies.

    Returns:
        ``(p, K)``: probabilities ``[N]`` summing to 1 and the chosen ``K``.
    """
    S = _check_similarity(S)
    M, N = S.shape
    if L < 1:
        raise ValueError(f"L must be >= 1, got {L}")
    if not 0 < alpha < 1 or not C > 0:
        raise ValueError(f"need 0 < alpha < 1 and C > 0, got alpha={alpha}, C={C}")
    L = min(L, N)
    nn = np.argsort(1.0 - S, axis=1, kind="stable")[:, :L]  # [M, L]
    d = np.take_along_axis(1.0 - S, nn, axis=1)  # [M, L], ascending per row
    csum = np.cumsum(d, axis=1)  # [M, L]
    K = L
    for k in range(1, L):  # k neighbours, d[:, k] is the (k+1)-th distance
        lhs = (alpha / C) * float((k * d[:, k] - csum[:, k - 1]).sum())
        if lhs >= (1 - alpha) * M:
            K = k
            break
    p = np.zeros(N)
    np.add.at(p, nn[:, :K].ravel(), 1.0 / (K * M))
    return p, K


def _fill(p: np.ndarray, S: np.ndarray, B: int, fill: FillPolicy, name: str) -> list[int]:
    order = _descending(p)
    n_pos = int((p > 0).sum())
    if n_pos >= B:
        return [int(j) for j in order[:B]]
    if fill == "error":
        raise ValueError(
            f"{name} puts mass on only {n_pos} candidates < B={B}; lower B, raise alpha, or pass "
            "fill='max_sim' to rank the rest by their best query similarity"
        )
    if fill != "max_sim":
        raise ValueError(f"fill must be 'error' or 'max_sim', got {fill!r}")
    # Deviation (docs/methods/instruction_selection.md): an explicit fill policy instead of the
    # official abort below 10,000 non-zero candidates.
    head = [int(j) for j in order[:n_pos]]
    rest_scores = S.max(axis=0).copy()
    rest_scores[head] = -np.inf
    tail = [int(j) for j in _descending(rest_scores)[: B - n_pos]]
    return head + tail


def knn_uniform(
    S: np.ndarray,
    B: int,
    L: int = 5000,
    alpha: float = 0.01,
    C: float = 5.0,
    fill: FillPolicy = "error",
) -> list[int]:
    """KNN-Uniform selector: rank by the KNN-Uniform probabilities (ties → smaller index).

    Unlike the official ``tsds_subset.py`` (whose ``knn_uniform`` name silently dispatched to the
    KDE variant: its ``__main__`` tests for ``knn_uniform_cos``) this always runs the uniform kernel.
    """
    S = _check_similarity(S)
    B = _check_budget(B, S.shape[1])
    p, _ = knn_uniform_probs(S, L=L, alpha=alpha, C=C)
    return _fill(p, S, B, fill, "knn_uniform")


def kde_density(
    pool_feats: np.ndarray | Sequence[np.ndarray],
    candidates: np.ndarray,
    lr_weights: Sequence[float] | None = None,
    sigma: float = 0.75,
    kde_k: int = 1000,
) -> np.ndarray:
    """Kernel density of each candidate among ``candidates`` (TSDS KDE; official
    ``selection/tsds_subset.py::_knn_weighted_cosine_dist_topk_chunked``).

    Similarity is the LR-weighted cosine across checkpoints; for each candidate its ``kde_k`` most
    similar candidates (itself included) contribute ``κ = max(0, 1 − 2 d / σ²)`` with
    ``d = max(1 − sim, 0)``.

    Returns:
        ``kde`` of shape ``[len(candidates)]`` (about 1 or more: the self term is 1).
    """
    feats = [pool_feats] if isinstance(pool_feats, np.ndarray) else list(pool_feats)
    w = np.ones(len(feats)) if lr_weights is None else np.asarray(lr_weights, dtype=np.float64)
    if len(w) != len(feats):
        raise ValueError(f"lr_weights has {len(w)} entries for {len(feats)} feature sets")
    w = w / w.sum()
    sim = np.zeros((len(candidates), len(candidates)))
    for wt, F in zip(w, feats):
        F = _as_2d_float(np.asarray(F), "pool_feats")[candidates].astype(np.float64)
        F = F / np.linalg.norm(F, axis=1, keepdims=True)
        sim += wt * (F @ F.T)
    k = min(max(kde_k, 1), len(candidates))
    top = -np.sort(-sim, axis=1)[:, :k]  # [n, k]
    dist = np.maximum(1.0 - top, 0.0)
    kappa = np.maximum(0.0, 1.0 - 2.0 * dist / sigma**2)
    return kappa.sum(axis=1)


def knn_kde_probs(
    S: np.ndarray,
    pool_feats: np.ndarray | Sequence[np.ndarray],
    lr_weights: Sequence[float] | None = None,
    sigma: float = 0.75,
    kde_k: int = 1000,
    max_k: int = 5000,
    alpha: float = 0.01,
    C: float = 5.0,
    cap_by_pool: bool = True,
) -> np.ndarray:
    """TSDS KNN-KDE probabilities: KNN-Uniform with neighbours down-weighted by density.

    Follows the official ``selection/tsds_subset.py::run_tsds_kde`` (adapted there from TSDS):

    1. ``K = min(max_k, max(1, N // 10))`` and ``kde_k ← min(kde_k, max(1, N // 10))`` when
       ``cap_by_pool`` (the official caps); each query keeps its ``max(K, 2)`` nearest candidates
       (``d = max(1 − S, 0)``, stable sort) and every kept candidate gets a density ``kde``
       (:func:`kde_density`).
    2. A min-heap over queries keyed by each query's own cumulative inverse density
       ``c_i = Σ_{k'≤k} 1/kde_{i,k'}``: the popped query ``i`` (neighbours ``0..k`` so far) sets
       ``s = c_i`` and its cost ``cost_i = d_{i,k+1}·c_i − Σ_{k'≤k} d_{i,k'}/kde_{i,k'}`` (the other
       queries keep the cost of their last pop). Stop once ``(α/C) Σ_i cost_i ≥ (1−α) M``; the
       popped step that triggers the stop is not accepted.
    3. Mass ``1/(M s kde_{i,k})`` goes to each accepted neighbour ``k ≤ lastK_i`` of query ``i`` and
       the remainder ``max(1/M − Σ, 0)`` to its next neighbour ``lastK_i + 1``.

    Returns:
        ``p`` of shape ``[N]``, non-negative, summing to 1.

    Raises:
        ValueError: on ``max_k < 2`` or a pool of fewer than 2 candidates.
    """
    S = _check_similarity(S)
    M, N = S.shape
    if max_k < 2:
        raise ValueError(f"max_k must be >= 2, got {max_k}")
    if N < 2:
        raise ValueError(f"knn_kde needs at least 2 candidates, got N={N}")
    if cap_by_pool:  # official caps
        max_k = min(max_k, max(1, N // 10))
        kde_k = min(kde_k, max(1, N // 10))
    Lk = min(max(max_k, 2), N)
    D = np.maximum(1.0 - S, 0.0)
    nn = np.argsort(D, axis=1, kind="stable")[:, :Lk]  # [M, Lk]
    d = np.take_along_axis(D, nn, axis=1)  # [M, Lk], ascending per row
    cand = np.unique(nn)
    kde = np.ones(N)
    kde[cand] = kde_density(pool_feats, cand, lr_weights, sigma=sigma, kde_k=kde_k)
    kde_nn = kde[nn]  # [M, Lk]
    last_k = np.zeros(M, dtype=np.int64)  # accepted neighbours 0..last_k[i]
    wsum = d[:, 0] / kde_nn[:, 0]  # [M] Σ d/kde over neighbours 0..k of the queued entry
    cost = np.zeros(M)
    total = 0.0
    heap = [(1.0 / kde_nn[i, 0], 0, i) for i in range(M)]
    heapq.heapify(heap)
    s = 0.0
    target = (1 - alpha) * M
    while heap:
        count, k, i = heapq.heappop(heap)
        s = count
        total -= cost[i]
        cost[i] = d[i, k + 1] * count - wsum[i]
        total += cost[i]
        if (alpha / C) * total >= target:
            break  # official: the popped step is not accepted
        last_k[i] = k
        if k < Lk - 2:
            heapq.heappush(heap, (count + 1.0 / kde_nn[i, k + 1], k + 1, i))
            wsum[i] += d[i, k + 1] / kde_nn[i, k + 1]
    p = np.zeros(N)
    for i in range(M):
        acc = nn[i, : last_k[i] + 1]
        mass = 1.0 / (M * s * kde_nn[i, : last_k[i] + 1])
        np.add.at(p, acc, mass)
        p[nn[i, last_k[i] + 1]] += max(1.0 / M - mass.sum(), 0.0)
    return p / p.sum()


def knn_kde(
    S: np.ndarray,
    pool_feats: np.ndarray | Sequence[np.ndarray],
    B: int,
    lr_weights: Sequence[float] | None = None,
    sigma: float = 0.75,
    kde_k: int = 1000,
    max_k: int = 5000,
    alpha: float = 0.01,
    C: float = 5.0,
    fill: FillPolicy = "error",
    cap_by_pool: bool = True,
) -> list[int]:
    """KNN-KDE selector: rank by :func:`knn_kde_probs` (descending, ties → smaller index, as the
    official ``np.lexsort``)."""
    S = _check_similarity(S)
    B = _check_budget(B, S.shape[1])
    p = knn_kde_probs(S, pool_feats, lr_weights, sigma, kde_k, max_k, alpha, C, cap_by_pool)
    return _fill(p, S, B, fill, "knn_kde")


def random_select(N: int, B: int, seed: int = 0) -> list[int]:
    """The Random baseline: the first ``B`` of a seeded permutation of ``range(N)``.

    The paper's random baseline (official ``selection/random.py``; our permutation RNG is numpy's)."""
    if isinstance(N, bool) or not isinstance(N, (int, np.integer)) or N < 1:
        raise ValueError(f"N must be a positive int, got {N!r}")
    B = _check_budget(B, int(N))
    return [int(j) for j in np.random.default_rng(seed).permutation(int(N))[:B]]


def top_k(scores: np.ndarray | Sequence[float], B: int) -> list[int]:
    """The ``B`` highest scores (ties → smaller index); e.g. a 1-D per-candidate score.

    Our engineering: the budget step that ends every score-based selector."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or len(scores) == 0:
        raise ValueError(f"scores must be a non-empty 1-D array, got shape {scores.shape}")
    if not np.isfinite(scores).all():
        raise ValueError("scores has non-finite entries")
    B = _check_budget(B, len(scores))
    return [int(j) for j in _descending(scores)[:B]]


SELECTORS = {
    "rr": round_robin,
    "dg": doubly_greedy,
    "uot": uot,
    "knn_uniform": knn_uniform,
}
