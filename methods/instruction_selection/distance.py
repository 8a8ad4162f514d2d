"""Subset–query distances in representation space (the paper's
distance-minimisation view, §6 Theorems 6.1–6.2; docs/methods/instruction_selection.md).

The paper reads each selector as an approximate minimiser of a distance between the empirical
distributions of the chosen subset ``P̂_S`` and the queries ``P̂_Q``. We report three: the
query-side covering distance (what RR greedily reduces), the candidate-side distance (what DG
minimises exactly), and ``W₁`` with the cosine ground metric ``d = 1 − S`` (what Theorems 6.1–6.2
bound the loss gap with). Shapes: M queries, N candidates, B subset size.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .selectors import _check_similarity


def _subset_cost(S: np.ndarray, subset: Sequence[int]) -> np.ndarray:
    S = _check_similarity(S)
    idx = np.asarray(list(subset), dtype=np.int64)
    if idx.ndim != 1 or len(idx) == 0:
        raise ValueError("subset must be a non-empty list of candidate indices")
    if idx.min() < 0 or idx.max() >= S.shape[1]:
        raise ValueError(
            f"subset indices must lie in [0, {S.shape[1]}), got {idx.min()}..{idx.max()}"
        )
    return 1.0 - S[:, idx]  # [M, B]


def query_cover_distance(S: np.ndarray, subset: Sequence[int]) -> float:
    """``(1/M) Σ_i min_{j∈subset} (1 − S_ij)``: how well the subset covers every query.

    Our inference: the query-side distance that RR greedily reduces, in the paper's reading of RR as
    an approximate distance minimiser (§6); the exact form is not in the paper text we read."""
    return float(_subset_cost(S, subset).min(axis=1).mean())


def candidate_side_distance(S: np.ndarray, subset: Sequence[int]) -> float:
    """``(1/B) Σ_{j∈subset} min_i (1 − S_ij)``: how close each chosen example is to some query.

    The distance that DG minimises exactly (paper §6, selectors as distance minimisers; the form is
    our inference from DG's max aggregation, official ``selection/doubly_greedy.py``)."""
    return float(_subset_cost(S, subset).min(axis=0).mean())


def wasserstein1(S: np.ndarray, subset: Sequence[int], reg: float | None = None) -> float:
    """``W₁(P̂_subset, P̂_Q)`` with uniform weights and ground cost ``1 − S`` (POT).

    The ``W₁(P̂_S, P̂_Q)`` term of Theorems 6.1–6.2 (paper §6); the cosine ground cost ``1 − S`` is
    our inference (the features are L2-normalised, as in the paper's similarity).

    Args:
        S: similarities ``[M, N]``.
        subset: candidate indices (duplicates count twice, as in a with-replacement sample).
        reg: None for the exact ``ot.emd2``; a positive value for entropic ``ot.sinkhorn2``.
    """
    import ot

    cost = _subset_cost(S, subset)  # [M, B]
    a = np.full(cost.shape[0], 1.0 / cost.shape[0])
    b = np.full(cost.shape[1], 1.0 / cost.shape[1])
    if reg is None:
        return float(ot.emd2(a, b, cost))
    if not reg > 0:
        raise ValueError(f"reg must be None or > 0, got {reg}")
    return float(ot.sinkhorn2(a, b, cost, reg))
