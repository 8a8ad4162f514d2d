"""The SAD signature's measures: Rolls-Tovee sparseness, ``N_recon`` and relative contributions.

Sources: the paper's SAD signature (known through third-party explainers) and the ``N_recon``
procedure of ``utils.py`` in the authors' earlier ``gaabrielfranco/sparse-attention-decomposition``.
:func:`methods.sv_features.sad.sparse_attention_decomposition` applies them per firing edge.
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)

__all__ = ["n_recon", "relative_contributions", "rolls_tovee", "sparseness"]


def rolls_tovee(v: torch.Tensor, nan_on_zero: bool = False) -> torch.Tensor:
    """Rolls-Tovee sparseness ``S(v) = (mean |v|)^2 / mean(v^2)`` over the last axis, in ``[1/n, 1]``.

    Source: the paper's Rolls-Tovee sparseness (via explainers; the full text was not read); the
    bounds ``[1/n, 1]`` are our inference (checked in tests).

    Lower is sparser: ``1/n`` for a one-hot vector, ``1`` for equal magnitudes.

    Args:
        v: ``[..., n]``.
        nan_on_zero: return NaN for all-zero rows instead of raising.

    Raises:
        ValueError: on an empty last axis or an all-zero row (unless ``nan_on_zero``).
    """
    if not isinstance(v, torch.Tensor):
        raise TypeError(f"v must be a torch.Tensor, got {type(v).__name__}")
    if v.ndim == 0 or v.shape[-1] == 0:
        raise ValueError(f"v must have a non-empty last axis, got shape {tuple(v.shape)}")
    sq = (v * v).mean(-1)
    zero = sq == 0
    if zero.any() and not nan_on_zero:
        raise ValueError("v has an all-zero row: sparseness is undefined (use nan_on_zero=True)")
    out = v.abs().mean(-1) ** 2 / torch.where(zero, torch.ones_like(sq), sq)
    return torch.where(zero, torch.full_like(out, float("nan")), out)


sparseness = rolls_tovee


def n_recon(
    v: torch.Tensor, target: torch.Tensor | float | None = None, tau: float = 0.9
) -> torch.Tensor:
    """Fewest terms of ``v`` (largest first, in the target's direction) whose sum reaches ``tau*target``.

    Source: the paper's ``N_recon`` (via explainers), procedure as ``utils.py`` of
    ``gaabrielfranco/sparse-attention-decomposition``; default τ = 0.9 is our inference.

    Terms are sorted descending if ``target > 0`` and ascending if ``target < 0``; the count is the
    first prefix whose partial sum reaches ``tau * target`` (within ``1e-6 * sum|v|``). A zero target
    gives 0 (logged). If no prefix reaches it (possible only for ``tau > 1``) the count is ``n``.

    Args:
        v: ``[..., n]`` contributions.
        target: ``[...]`` or scalar; default ``v.sum(-1)``.
        tau: the fraction, ``> 0``.

    Returns:
        ``LongTensor [...]``.

    Raises:
        ValueError: on ``tau <= 0`` or an empty last axis.
    """
    if not tau > 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    if v.ndim == 0 or v.shape[-1] == 0:
        raise ValueError(f"v must have a non-empty last axis, got shape {tuple(v.shape)}")
    v = v.double()
    t = (
        v.sum(-1)
        if target is None
        else torch.as_tensor(target, dtype=torch.float64).expand(v.shape[:-1])
    )
    sgn = torch.sign(t)
    w = v * sgn[..., None]
    cs = torch.sort(w, dim=-1, descending=True).values.cumsum(-1)
    eps = 1e-6 * v.abs().sum(-1, keepdim=True)
    reached = cs >= (tau * t.abs())[..., None] - eps
    n = v.shape[-1]
    first = torch.where(
        reached.any(-1), reached.float().argmax(-1) + 1, torch.full_like(t, n).long()
    )
    zero = sgn == 0
    if zero.any():
        logger.info("n_recon: %d target(s) exactly 0, returning 0 for them", int(zero.sum()))
    return torch.where(zero, torch.zeros_like(first), first).long()


def relative_contributions(A: torch.Tensor, visible: torch.Tensor | None = None) -> torch.Tensor:
    """``a~_k(j) = a_k(j) - mean_{j' != j, visible} a_k(j')`` ("relative attention").

    Source: the paper's relative attention (via explainers); the per-term form by linearity is
    our inference.

    Args:
        A: ``[..., m, r]`` contributions over ``m`` sources.
        visible: optional bool ``[..., m]``; invisible sources are ignored (and get 0).

    Raises:
        ValueError: if fewer than 2 sources are visible.
    """
    if A.ndim < 2:
        raise ValueError(f"A must be [..., m, r], got shape {tuple(A.shape)}")
    if visible is None:
        visible = torch.ones(A.shape[:-1], dtype=torch.bool)
    m = visible.sum(-1, keepdim=True)  # [..., 1]
    if (m < 2).any():
        raise ValueError("relative contributions need at least 2 visible sources (m >= 2)")
    Av = A * visible[..., None]
    total = Av.sum(-2, keepdim=True)
    rel = A - (total - A) / (m[..., None] - 1)
    return rel * visible[..., None]
