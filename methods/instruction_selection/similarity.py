"""The query–candidate similarity matrix shared by every selector (official ``representation/``).

All representations are L2-normalised, so the similarity is a cosine: ``S[i, j] = ⟨φ(q_i), φ(z_j)⟩``
with rows = queries (M) and columns = pool candidates (N). Shapes: M queries, N candidates, D features.
"""

from __future__ import annotations

import numpy as np
import torch


def _as_2d_float(x: np.ndarray | torch.Tensor, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().float().numpy()
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array or torch tensor, got {type(x).__name__}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D [n, D], got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} has non-finite entries (NaN/inf); check the representation")
    return x.astype(np.float32, copy=False)


def cosine_matrix(
    Q: np.ndarray | torch.Tensor,
    X: np.ndarray | torch.Tensor,
    chunk: int = 256,
    normalize: bool = True,
) -> np.ndarray:
    """Cosine similarity between queries and candidates, computed in row chunks.

    The paper's query–candidate similarity of L2-normalised features (official
    ``representation/``).

    Args:
        Q: query features ``[M, D]``.
        X: candidate features ``[N, D]``.
        chunk: rows of ``Q`` per matmul (bounds peak memory to ``chunk × N``).
        normalize: L2-normalise rows first; with False the rows must already have unit norm.

    Returns:
        ``S`` of shape ``[M, N]``, float32, values in ``[-1, 1]``.

    Raises:
        ValueError: on mismatched feature dims, empty inputs, zero rows, non-unit rows with
            ``normalize=False``, or ``chunk < 1``.
    """
    Q = _as_2d_float(Q, "Q")
    X = _as_2d_float(X, "X")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    if Q.shape[1] != X.shape[1]:
        raise ValueError(f"Q and X must share the feature dim, got {Q.shape} and {X.shape}")
    if len(Q) == 0 or len(X) == 0:
        raise ValueError(f"Q and X must be non-empty, got {Q.shape} and {X.shape}")
    if normalize:
        qn = np.linalg.norm(Q, axis=1, keepdims=True)  # [M, 1]
        xn = np.linalg.norm(X, axis=1, keepdims=True)  # [N, 1]
        if (qn == 0).any() or (xn == 0).any():
            raise ValueError("Q and X must not contain all-zero rows (cosine undefined)")
        Q, X = Q / qn, X / xn
    else:
        for name, A in (("Q", Q), ("X", X)):
            if not np.allclose(np.linalg.norm(A, axis=1), 1.0, atol=1e-3):
                raise ValueError(f"{name} rows must have unit norm when normalize=False")
    S = np.empty((len(Q), len(X)), dtype=np.float32)  # [M, N]
    for s in range(0, len(Q), chunk):
        S[s : s + chunk] = Q[s : s + chunk] @ X.T
    return np.clip(S, -1.0, 1.0)
