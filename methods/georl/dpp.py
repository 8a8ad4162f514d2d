"""Determinantal-point-process geometry of a group of descriptions (Geo-RL abstract).

Geo-RL rewards a group of N sampled descriptions for the volume of the parallelotope that their
unit-norm embeddings span. With a quality factor this is the log-determinant of a DPP L-ensemble
``L = D S D + jitter I`` (Kulesza & Taskar's quality-diversity decomposition), and each sample is
credited with its closed-form leave-one-out (LOO) marginal ``r_i = log det L - log det L_{-i,-i}``,
which equals ``-log (L^{-1})_ii`` and so comes from a single Cholesky factorisation.

The paper's full text was not available: the formulas follow the abstract's ingredients and standard
DPP algebra (see ``docs/methods/georl.md``). Every function works in float64 and accepts optional
leading batch dimensions ``[..., N, N]`` so that many groups are scored in one call.
"""

from __future__ import annotations

import logging
import math

import torch
from torch import Tensor

from common.advantages import group_advantages

logger = logging.getLogger(__name__)

__all__ = [
    "l_ensemble",
    "log_volume",
    "loo_advantages",
    "loo_gains",
    "loo_gains_bruteforce",
]

_NORM_TOL = 1e-12


def _check_embeddings(emb: Tensor) -> Tensor:
    if not isinstance(emb, Tensor):
        raise TypeError(f"emb must be a torch.Tensor [..., N, d], got {type(emb).__name__}")
    if emb.dim() < 2:
        raise ValueError(f"emb must be at least 2-D [..., N, d], got shape {tuple(emb.shape)}")
    n = emb.shape[-2]
    if n < 2:
        raise ValueError(
            f"emb must hold N >= 2 descriptions per group (the leave-one-out gain is undefined "
            f"for one), got N={n}"
        )
    emb = emb.to(torch.float64)
    if not torch.isfinite(emb).all():
        raise ValueError("emb contains NaN or inf values; embed empty texts as a fixed unit vector")
    norms = emb.norm(dim=-1, keepdim=True)  # [..., N, 1]
    if (norms <= _NORM_TOL).any():
        raise ValueError(
            "emb contains a zero-norm row; substitute a fixed unit 'EMPTY' vector for empty texts"
        )
    return emb / norms


def l_ensemble(
    emb: Tensor,
    quality: Tensor | None = None,
    gamma: float = 1.0,
    jitter: float = 1e-3,
    q_min: float = 0.05,
) -> Tensor:
    """Quality-weighted DPP kernel of one (or a batch of) description group(s).

    The abstract names a DPP over the sampled descriptions; the quality factor ``q^gamma`` in the
    kernel is our inference (Kulesza & Taskar's quality-diversity L-ensemble).

    ``L = diag(w) S diag(w) + jitter * I`` with ``S = phi phi^T`` the cosine Gram matrix of the
    row-normalised embeddings and ``w = q^gamma`` the per-description quality weight. For
    ``jitter = 0``, ``log det L = 2 gamma sum_i log q_i + log det S`` (derived).

    Args:
        emb: Embeddings ``[..., N, d]``; rows are re-normalised to unit length.
        quality: Grounding quality ``[..., N]`` in ``(0, 1]``; ``None`` means all ones. Values
            that are NaN or ``<= 0`` are floored to ``q_min`` (and counted in a debug log);
            values above 1 raise, since they signal a calibration bug.
        gamma: Quality exponent (our default 2, no paper value; 0 switches quality off).
        jitter: Ridge ``delta >= 0`` added to the diagonal. It bounds the LOO gain of an exact
            duplicate at about ``log(2 delta)``.
        q_min: Floor for quality values.

    Returns:
        ``L`` of shape ``[..., N, N]`` in float64.

    Raises:
        ValueError: for N < 2, non-finite or zero-norm embeddings, quality > 1 or of the wrong
            shape, a negative jitter, or ``jitter == 0`` with ``N > d`` (singular kernel).
    """
    phi = _check_embeddings(emb)  # [..., N, d]
    n, d = phi.shape[-2], phi.shape[-1]
    if not math.isfinite(jitter) or jitter < 0:
        raise ValueError(f"jitter must be a finite number >= 0, got {jitter}")
    if not math.isfinite(gamma) or gamma < 0:
        raise ValueError(f"gamma must be a finite number >= 0, got {gamma}")
    if not 0 < q_min <= 1:
        raise ValueError(f"q_min must lie in (0, 1], got {q_min}")
    if jitter == 0 and n > d:
        raise ValueError(
            f"with jitter=0 the kernel of N={n} descriptions in d={d} dimensions is singular "
            f"(N > d); use jitter > 0 or fewer descriptions per group"
        )
    gram = phi @ phi.transpose(-1, -2)  # [..., N, N]
    if quality is not None:
        if not isinstance(quality, Tensor):
            quality = torch.as_tensor(quality)
        q = quality.to(torch.float64)
        if q.shape != phi.shape[:-1]:
            raise ValueError(
                f"quality must have shape {tuple(phi.shape[:-1])} (one value per description), "
                f"got {tuple(q.shape)}"
            )
        if (q > 1 + 1e-9).any():
            raise ValueError(
                f"quality must lie in (0, 1], got max {q.max().item():.4g}; check the grounding "
                f"calibration"
            )
        bad = torch.isnan(q) | (q <= 0)
        if bad.any():
            logger.debug("l_ensemble: floored %d quality values to q_min=%g", int(bad.sum()), q_min)
        q = torch.where(bad, torch.full_like(q, q_min), q).clamp(min=q_min)
        w = q.pow(gamma)  # [..., N]
        gram = gram * w.unsqueeze(-1) * w.unsqueeze(-2)
    eye = torch.eye(n, dtype=torch.float64, device=phi.device)
    return gram + jitter * eye


def _check_kernel(L: Tensor) -> Tensor:
    if not isinstance(L, Tensor):
        raise TypeError(f"L must be a torch.Tensor [..., N, N], got {type(L).__name__}")
    if L.dim() < 2 or L.shape[-1] != L.shape[-2]:
        raise ValueError(f"L must be square [..., N, N], got shape {tuple(L.shape)}")
    if L.shape[-1] < 2:
        raise ValueError(f"L must have N >= 2 (leave-one-out needs two items), got N={L.shape[-1]}")
    L = L.to(torch.float64)
    if not torch.isfinite(L).all():
        raise ValueError("L contains NaN or inf values")
    asym = (L - L.transpose(-1, -2)).abs().max().item()
    if asym > 1e-8 * max(1.0, L.abs().max().item()):
        raise ValueError(f"L must be symmetric, got max |L - L^T| = {asym:.3g}")
    return L


def _max_offdiag_correlation(L: Tensor) -> float:
    diag = L.diagonal(dim1=-2, dim2=-1).clamp(min=1e-300)
    corr = L / (diag.unsqueeze(-1) * diag.unsqueeze(-2)).sqrt()
    n = L.shape[-1]
    off = ~torch.eye(n, dtype=torch.bool, device=L.device)
    return corr[..., off].abs().max().item()


def _cholesky(L: Tensor, retries: int = 3, base: float = 1e-9) -> Tensor:
    """Cholesky factor of ``L``; on failure adds ``base * 10^k * trace/N`` to the diagonal.

    A numerical guard of ours (the paper's abstract gives no algorithm; docs/methods/georl.md,
    Deviations: "Cholesky retry")."""
    chol, info = torch.linalg.cholesky_ex(L)
    if not bool((info != 0).any()):
        return chol
    scale = L.diagonal(dim1=-2, dim2=-1).mean().abs().item() or 1.0
    eye = torch.eye(L.shape[-1], dtype=L.dtype, device=L.device)
    for k in range(1, retries + 1):
        eps = base * 10**k * scale
        chol, info = torch.linalg.cholesky_ex(L + eps * eye)
        if not bool((info != 0).any()):
            logger.warning("Cholesky of L needed extra jitter %.3g (near-duplicate samples?)", eps)
            return chol
    raise ValueError(
        f"L is not positive definite even after {retries} jitter escalations; groups with failures: "
        f"{torch.nonzero(info).flatten().tolist()}; max off-diagonal correlation "
        f"{_max_offdiag_correlation(L):.6f} (near-duplicates); raise `jitter`"
    )


def log_volume(L: Tensor) -> Tensor:
    """Group objective ``F(Y) = log det L = 2 * sum(log diag(chol(L)))``.

    Source: the paper's abstract (parallelotope volume); the log-det form is our inference (no paper
    text).

    The abstract rewards the parallelotope volume; the log-det form is our formula.

    For ``L = S`` (no quality, no jitter) this is ``2 log Vol``, the log squared volume of the
    parallelotope spanned by the unit embeddings.

    Args:
        L: Positive-definite kernel ``[..., N, N]``.

    Returns:
        ``[...]`` float64 log-determinants (a 0-d tensor for a single group).
    """
    chol = _cholesky(_check_kernel(L))
    return 2.0 * chol.diagonal(dim1=-2, dim2=-1).log().sum(-1)


def loo_gains(L: Tensor) -> Tensor:
    """Closed-form leave-one-out marginal rewards (named in the abstract;
    the Schur-complement form is our derivation).

    Source: the paper's abstract names the closed-form leave-one-out reward; the Schur-complement
    formula is our inference.

    ``r_i = log det L - log det L_{-i,-i} = -log (L^{-1})_{ii}`` (Schur complement), all ``N`` from
    one Cholesky factorisation ``L = C C^T`` and ``L^{-1} = cholesky_inverse(C)``. Geometrically,
    for ``L = S`` it is the log squared height of ``phi_i`` above the span of the other embeddings.

    Args:
        L: Positive-definite kernel ``[..., N, N]`` (e.g. from :func:`l_ensemble`).

    Returns:
        ``r`` of shape ``[..., N]`` in float64.

    Raises:
        ValueError: for a non-square, non-symmetric, non-finite or non-PD kernel, or N < 2.
    """
    chol = _cholesky(_check_kernel(L))  # [..., N, N]
    inv = torch.cholesky_inverse(chol)  # [..., N, N]
    return -inv.diagonal(dim1=-2, dim2=-1).log()


def loo_gains_bruteforce(L: Tensor) -> Tensor:
    """Reference for tests: ``slogdet(L) - slogdet(L_{-i,-i})`` for each ``i`` (O(N^4)).

    Source: engineering (test reference), not in the paper.
    """
    L = _check_kernel(L)
    n = L.shape[-1]
    full = torch.linalg.slogdet(L).logabsdet
    out = []
    for i in range(n):
        keep = [j for j in range(n) if j != i]
        sub = L[..., keep, :][..., :, keep]
        out.append(full - torch.linalg.slogdet(sub).logabsdet)
    return torch.stack(out, dim=-1)


def loo_advantages(r: Tensor, mode: str = "raw", eps: float = 1e-6) -> Tensor:
    """Token-level advantage of each description from its LOO gain (our inference).

    ``"raw"`` returns ``r`` itself: the LOO gain is the group objective minus a baseline that does
    not depend on the sample, so ``sum_i r_i grad log pi(c_i)`` is unbiased for ``grad E[F]``.
    ``"normalized"`` is the GRPO-style ablation ``(r - mean) / (std + eps)`` over the last dim
    (:func:`common.advantages.group_advantages`).

    Args:
        r: LOO gains ``[..., N]``.
        mode: ``"raw"`` or ``"normalized"``.
        eps: Added to the std in ``"normalized"`` mode.
    """
    if mode == "raw":
        return r
    if mode == "normalized":
        return group_advantages(r, eps=eps)
    raise ValueError(f"mode must be 'raw' or 'normalized', got {mode!r}")
