"""Feature / singular-vector alignment and the least-squares oracle.

Sources: the paper's toy model and Theorem 1 (known through third-party explainers; the full text
was not read), the precursor toy ``mcrovella/sparse-learning`` ``mark/toy_xformer.ipynb``; the
least-squares oracle is our inference.

Conventions: features are the **columns** of ``X [D, N]``; an attention head's QK matrix
``Omega [D, D]`` gives the logit ``r^T Omega s`` (query ``r``, key ``s``); ``Omega = U diag(S) Vh``.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

logger = logging.getLogger(__name__)


def _check_matrix(name: str, x: torch.Tensor) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} has non-finite entries")
    return x


def svd_alignment(vectors: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """|cos| between every feature and every singular vector.

    Source: the paper's toy measurement ``C_U[i, k] = |cos(w_i, u_k)|`` (via explainers), as the
    precursor ``mark/toy_xformer.ipynb``; our inference where the explainers are silent.

    Singular vectors are sign-ambiguous, so the absolute cosine is used.

    Args:
        vectors: singular vectors as columns, ``[D, r]`` (``U``, or ``Vh.T``).
        features: feature directions as columns, ``[D, N]``.

    Returns:
        ``C [N, r]`` with ``C[i, k] = |cos(features[:, i], vectors[:, k])|``.

    Raises:
        ValueError: on a dimension mismatch or a zero-norm column (naming its index).
    """
    _check_matrix("vectors", vectors)
    _check_matrix("features", features)
    if vectors.shape[0] != features.shape[0]:
        raise ValueError(
            f"vectors ({vectors.shape[0]}) and features ({features.shape[0]}) differ in dimension"
        )
    for name, m in (("features", features), ("vectors", vectors)):
        norms = m.norm(dim=0)
        bad = torch.nonzero(norms <= 1e-12).flatten().tolist()
        if bad:
            raise ValueError(f"{name} has zero-norm column(s) {bad}; the cosine is undefined")
    f = features / features.norm(dim=0, keepdim=True)
    v = vectors / vectors.norm(dim=0, keepdim=True)
    return (f.T @ v).abs()


def feature_sv_cosines(
    features: torch.Tensor, U: torch.Tensor, Vh: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(C_U [N, r], C_V [N, r])``: |cos| of each feature with the left / right singular vectors.

    Source: the paper's toy measurement (via explainers); the layout is our choice.
    """
    return svd_alignment(U, features), svd_alignment(Vh.T, features)


def match_pairs_to_ranks(
    C_U: torch.Tensor, C_V: torch.Tensor, pairs: list[tuple[int, int]]
) -> list[tuple[tuple[int, int], int, float]]:
    """Hungarian matching of (query feature, key feature) pairs to singular ranks (the multi-pair toy).

    Source: our choice (``scipy.optimize.linear_sum_assignment`` on ``−(C_U + C_V)``) for the
    paper's multi-pair toy.

    The cost of giving pair ``(i, j)`` rank ``k`` is ``-(C_U[i, k] + C_V[j, k])``; the reported score is
    the pair's alignment ``min(C_U[i, k], C_V[j, k])``.

    Args:
        C_U, C_V: ``[N, r]`` |cos| matrices from :func:`feature_sv_cosines`.
        pairs: the target pairs ``(i, j)``.

    Returns:
        ``[(pair, rank, alignment)]`` in the order of ``pairs``; pairs left unmatched (more pairs than
        ranks) get rank ``-1`` and their best single-rank alignment.

    Raises:
        ValueError: on empty ``pairs``, mismatched shapes or an out-of-range feature index.
    """
    if not pairs:
        raise ValueError("pairs must be non-empty")
    if C_U.shape != C_V.shape:
        raise ValueError(f"C_U {tuple(C_U.shape)} and C_V {tuple(C_V.shape)} differ in shape")
    n, r = C_U.shape
    for i, j in pairs:
        if not (0 <= i < n and 0 <= j < n):
            raise ValueError(f"pair {(i, j)} out of range for {n} features")
    if len(pairs) > r:
        logger.warning(
            "%d pairs but only %d ranks: the theory assumes n_pairs <= rank", len(pairs), r
        )
    cu = C_U.detach().double().cpu().numpy()
    cv = C_V.detach().double().cpu().numpy()
    rows_i = [p[0] for p in pairs]
    rows_j = [p[1] for p in pairs]
    cost = -(cu[rows_i] + cv[rows_j])  # [P, r]
    ri, ci = linear_sum_assignment(cost)
    rank_of = dict(zip(ri.tolist(), ci.tolist(), strict=True))
    out = []
    for p_idx, (i, j) in enumerate(pairs):
        if p_idx in rank_of:
            k = rank_of[p_idx]
            out.append(((i, j), k, float(min(cu[i, k], cv[j, k]))))
        else:
            out.append(((i, j), -1, float(np.max(np.minimum(cu[i], cv[j])))))
    return out


def lsq_optimal_omega(X: torch.Tensor, Y: torch.Tensor, T: torch.Tensor) -> torch.Tensor:
    """Closed-form least-squares QK matrix (our inference: a least-squares version of Theorem 1).

    Minimises ``E[(r^T Omega s - f_r^T T f_s)^2]`` over ``Omega`` for ``r = X f_r``, ``s = Y f_s`` with
    independent zero-mean isotropic features (``E f f^T = c I``). The normal equations
    ``(Sigma_X (x) Sigma_Y) vec(Omega) = vec(X T Y^T)`` give
    ``Omega* = Sigma_X^+ X T Y^T Sigma_Y^+`` with ``Sigma_X = X X^T`` (Moore-Penrose when singular).

    Args:
        X: query-side features ``[D, N_X]``.
        Y: key-side features ``[D, N_Y]``.
        T: target template ``[N_X, N_Y]``.

    Returns:
        ``Omega* [D, D]``.

    Raises:
        ValueError: on shape mismatches, non-finite input or an empty / all-zero template ``T``.
    """
    _check_matrix("X", X)
    _check_matrix("Y", Y)
    _check_matrix("T", T)
    if X.shape[0] != Y.shape[0]:
        raise ValueError(
            f"X and Y must share the model dimension, got {X.shape[0]} and {Y.shape[0]}"
        )
    if T.shape != (X.shape[1], Y.shape[1]):
        raise ValueError(f"T must have shape {(X.shape[1], Y.shape[1])}, got {tuple(T.shape)}")
    if T.numel() == 0 or not bool((T != 0).any()):
        raise ValueError(
            f"T must have at least one nonzero entry (no target pairs), got shape {tuple(T.shape)} "
            "with all zeros: Omega* would be the zero matrix"
        )
    sx = torch.linalg.pinv(X @ X.T, hermitian=True)
    sy = torch.linalg.pinv(Y @ Y.T, hermitian=True)
    return sx @ X @ T @ Y.T @ sy


def whitened_feature_dirs(
    X: torch.Tensor, Y: torch.Tensor, a: int, b: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Theorem 1's singular directions ``Sigma_X^-1 x_a`` and ``Sigma_Y^-1 y_b``, unit-normalised."""
    _check_matrix("X", X)
    _check_matrix("Y", Y)
    if not 0 <= a < X.shape[1]:
        raise ValueError(f"a={a} out of range for {X.shape[1]} query features")
    if not 0 <= b < Y.shape[1]:
        raise ValueError(f"b={b} out of range for {Y.shape[1]} key features")
    u = torch.linalg.pinv(X @ X.T, hermitian=True) @ X[:, a]
    v = torch.linalg.pinv(Y @ Y.T, hermitian=True) @ Y[:, b]
    return u / u.norm(), v / v.norm()


def interference_norm(X: torch.Tensor) -> float:
    """Spectral norm of the off-diagonal Gram matrix ``X^T X - diag(X^T X)`` (our choice)."""
    _check_matrix("X", X)
    g = X.T @ X
    return float(torch.linalg.matrix_norm(g - torch.diag(torch.diag(g)), ord=2))


def orthogonality_gap(W: torch.Tensor, attended: list[int]) -> float:
    """max |cos(w_i, w_i')| over attended ``i`` and unattended ``i'`` (secondary metric).

    Source: the paper's orthogonalisation finding (Theorem 3, via explainers); this max-cosine
    metric is our inference.
    """
    _check_matrix("W", W)
    if not attended:
        raise ValueError("attended must be non-empty")
    n = W.shape[1]
    others = [i for i in range(n) if i not in set(attended)]
    if not others:
        return 0.0
    c = svd_alignment(W[:, others], W[:, attended])
    return float(c.max())
