"""KORE-Constraint linear algebra: approximate null space of an activation covariance (paper §3.2).

For a linear layer ``y = W0 x`` and the covariance ``C = X X^T`` of its inputs on old-knowledge data,
KORE picks the ``r`` eigenvectors of ``C`` with the smallest eigenvalues (Eq. 1), factorises the
projection ``W0 U U^T`` of the weight onto them into ``B A`` (Eq. 2) and folds the rest into a frozen
residual ``W_res = W0 - B A`` (Eq. 3). With ``A`` frozen, any update of ``B`` changes the layer's
output on old inputs by ``(B' - B) A X``, which is small because ``A X`` lives in the low-energy
directions of ``C`` (App. C).

Two ablation initialisations of the official code (KORE-LMM/KORE ``lora_null/adapterlib/decomposition.py``)
are options of :func:`kore_decompose`: ``eigvecs="largest"`` (``--first_eigen``: the ``r`` largest
eigenvectors instead of the smallest) and ``init="lora_null_v1"`` (``--singular_aware_2``: ``A = Û^T``,
``B = 0``, ``W_res = W0``, i.e. LoRA-Null's null-space down-projection with a zero up-projection).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch

logger = logging.getLogger(__name__)

NULL_ENERGY_WARN = 1e-2
EIGVECS = ("smallest", "largest")
INITS = ("kore", "lora_null_v1")


@dataclass
class KoreFactors:
    """The KORE initialisation of one linear layer (paper Eqs. 1-3), all in float64.

    Attributes:
        W_res: ``[d_out, d_in]`` frozen residual weight ``W0 - B @ A`` (Eq. 3).
        A: ``[r, d_in]`` down-projection, rows in the span of the ``r`` smallest eigenvectors of C.
        B: ``[d_out, r]`` up-projection (the only trained factor in KORE).
        null_energy: ``sum of the r chosen eigenvalues / trace(C)``; how far the chosen subspace
            is from an exact null space (0 = exact; near 1 for ``eigvecs="largest"``).
        null_eigvals: ``[r]`` the r chosen eigenvalues of C, ascending.
    """

    W_res: torch.Tensor
    A: torch.Tensor
    B: torch.Tensor
    null_energy: float
    null_eigvals: torch.Tensor


def check_rank(r, d_in: int, d_out: int, name: str = "r") -> int:
    """Validates an adapter rank against a layer shape (engineering; Eq. 2 keeps the top ``r`` factors).

    Raises:
        TypeError: if ``r`` is not an int.
        ValueError: if ``r < 1`` or ``r > min(d_out, d_in)``.
    """
    if isinstance(r, bool) or not isinstance(r, int):
        raise TypeError(f"{name} must be an int, got {type(r).__name__}")
    if r < 1:
        raise ValueError(f"{name} must be >= 1, got {r}")
    if r > min(d_in, d_out):
        raise ValueError(
            f"{name}={r} exceeds min(d_out={d_out}, d_in={d_in}) of the layer; the null-space "
            "factorisation needs r <= both dimensions"
        )
    return r


def check_covariance(C: torch.Tensor, d_in: int | None = None, name: str = "C") -> torch.Tensor:
    """Validates a covariance and returns it as a symmetric float64 tensor.

    Engineering (the official ``calib_cov_distribution`` likewise rejects NaN/Inf).

    Raises:
        TypeError: if ``C`` is not a floating tensor.
        ValueError: on wrong shape, NaN/Inf, all-zero (empty calibration) or asymmetry beyond 1e-5
            relative.
    """
    if not isinstance(C, torch.Tensor) or not C.is_floating_point():
        raise TypeError(f"{name} must be a floating torch.Tensor, got {type(C).__name__}")
    if C.ndim != 2 or C.shape[0] != C.shape[1]:
        raise ValueError(f"{name} must be square [d_in, d_in], got shape {tuple(C.shape)}")
    if d_in is not None and C.shape[0] != d_in:
        raise ValueError(f"{name} has shape {tuple(C.shape)} but the layer has d_in={d_in}")
    C = C.detach().to(torch.float64)
    if not torch.isfinite(C).all():
        raise ValueError(f"{name} contains NaN or Inf")
    scale = C.abs().max().item()
    if scale == 0.0:
        raise ValueError(f"{name} is all zeros (empty calibration set?)")
    if (C - C.T).abs().max().item() > 1e-5 * scale:
        raise ValueError(f"{name} is not symmetric (max |C - C^T| > 1e-5 * max |C|)")
    return (C + C.T) / 2


def smallest_eigvecs(
    C: torch.Tensor, r: int, psd_tol: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``r`` eigenvectors of a PSD covariance with the smallest eigenvalues (paper Eq. 1).

    Args:
        C: ``[d, d]`` symmetric PSD covariance ``X X^T``.
        r: how many directions (the adapter rank).
        psd_tol: eigenvalues below ``-psd_tol * max eigenvalue`` mean C is not PSD.

    Returns:
        ``(U_hat [d, r], eigvals [r])``: orthonormal columns, eigenvalues ascending (float64).

    Raises:
        ValueError: on a bad covariance, ``r`` outside ``[1, d]``, or a non-PSD C.
    """
    C = check_covariance(C)
    d = C.shape[0]
    check_rank(r, d, d)
    evals, evecs = torch.linalg.eigh(C)  # ascending
    top = evals[-1].item()
    if evals[0].item() < -psd_tol * max(top, 0.0) or top <= 0:
        raise ValueError(
            f"C is not positive semi-definite: min eigenvalue {evals[0].item():.3e}, max {top:.3e}"
        )
    return evecs[:, :r], evals[:r].clamp_min(0.0)


def largest_eigvecs(C: torch.Tensor, r: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``r`` eigenvectors of ``C`` with the largest eigenvalues (official ``--first_eigen``).

    Returns ``(U [d, r], eigvals [r])`` with eigenvalues ascending, like :func:`smallest_eigvecs`.
    """
    C = check_covariance(C)
    d = C.shape[0]
    check_rank(r, d, d)
    smallest_eigvecs(C, 1)  # PSD check
    evals, evecs = torch.linalg.eigh(C)  # ascending
    return evecs[:, d - r :], evals[d - r :].clamp_min(0.0)


def _check_decompose_args(W0: torch.Tensor, sigma_fuse: str, eigvecs: str, init: str) -> None:
    """Argument checks of :func:`kore_decompose`, naming the argument."""
    if not isinstance(W0, torch.Tensor) or not W0.is_floating_point():
        raise TypeError(f"W0 must be a floating torch.Tensor, got {type(W0).__name__}")
    if W0.ndim != 2:
        raise ValueError(f"W0 must be 2-D [d_out, d_in], got shape {tuple(W0.shape)}")
    if W0.is_meta:
        raise ValueError("W0 is a meta tensor; materialise (gather) the weight first")
    if sigma_fuse not in ("UV", "U", "V"):
        raise ValueError(f"sigma_fuse must be 'UV', 'U' or 'V', got {sigma_fuse!r}")
    if eigvecs not in EIGVECS:
        raise ValueError(f"eigvecs must be one of {EIGVECS}, got {eigvecs!r}")
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")


def _factor_projection(
    W: torch.Tensor, U_hat: torch.Tensor, r: int, sigma_fuse: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``B [d_out, r]``, ``A [r, d_in]`` with ``B A = W U_hat U_hat^T`` (paper Eq. 2): the top-r
    SVD of the projection, singular values placed by ``sigma_fuse`` (official code's options)."""
    M = (W @ U_hat) @ U_hat.T  # [d_out, d_in], W0 P
    U, S, Vh = torch.linalg.svd(M, full_matrices=False)
    U, S, Vh = U[:, :r], S[:r], Vh[:r]
    if sigma_fuse == "UV":
        s = S.sqrt()
        B, A = U * s, s[:, None] * Vh
    elif sigma_fuse == "U":
        B, A = U * S, Vh
    else:
        B, A = U, S[:, None] * Vh
    return B, A


def kore_decompose(
    W0: torch.Tensor,
    C: torch.Tensor,
    r: int,
    sigma_fuse: str = "UV",
    eigvecs: str = "smallest",
    init: str = "kore",
) -> KoreFactors:
    """KORE initialisation of one layer (paper Eqs. 1-3) and the official ablation inits.

    ``P = U_hat U_hat^T`` projects onto the r smallest-eigenvalue directions of C; the top-r SVD
    ``W0 P = U* S* V*^T`` (exact, since rank(W0 P) <= r) gives ``B = U* sqrt(S*)``,
    ``A = sqrt(S*) V*^T`` for ``sigma_fuse="UV"`` (``"U"``: ``B = U* S*, A = V*^T``; ``"V"``:
    ``B = U*, A = S* V*^T``), and ``W_res = W0 - B A = W0 (I - P)``.

    Args:
        W0: ``[d_out, d_in]`` pretrained weight (any float dtype; computed in float64).
        C: ``[d_in, d_in]`` input covariance of the layer on old-knowledge data.
        r: adapter rank, ``1 <= r <= min(d_out, d_in)``.
        sigma_fuse: where the singular values go: ``"UV"`` (split, repo default), ``"U"`` or ``"V"``.
        eigvecs: ``"smallest"`` (KORE, Eq. 1) or ``"largest"`` (the largest-eigenvector ablation,
            official ``--first_eigen``).
        init: ``"kore"`` (Eqs. 2-3, official ``--singular_aware``) or ``"lora_null_v1"`` (official
            ``--singular_aware_2``: ``A = Û^T``, ``B = 0``, ``W_res = W0``; ``sigma_fuse`` is moot since
            the official code sets the singular values to 1 and ``U`` to 0).

    Returns:
        :class:`KoreFactors` in float64.

    Raises:
        TypeError / ValueError: on a non-float or non-2D weight, a bad covariance or rank, or an
            unknown ``sigma_fuse``.
    """
    _check_decompose_args(W0, sigma_fuse, eigvecs, init)
    d_out, d_in = W0.shape
    check_rank(r, d_in, d_out)
    C = check_covariance(C, d_in)
    pick = smallest_eigvecs if eigvecs == "smallest" else largest_eigvecs
    U_hat, null_eigs = pick(C, r)  # [d_in, r], [r]
    W = W0.detach().to(torch.float64)
    trace = torch.linalg.eigvalsh(C).clamp_min(0).sum().item()
    null_energy = null_eigs.sum().item() / trace if trace > 0 else math.nan
    if init == "lora_null_v1":
        # official singular_aware_2: V = U_min_K, S = 1, U = 0 -> B = 0, A = U_min_K^T, W_res = W0
        return KoreFactors(
            W_res=W.clone(),
            A=U_hat.T.contiguous(),
            B=torch.zeros(d_out, r, dtype=torch.float64),
            null_energy=null_energy,
            null_eigvals=null_eigs,
        )
    B, A = _factor_projection(W, U_hat, r, sigma_fuse)
    W_res = W - B @ A
    if eigvecs == "smallest" and null_energy > NULL_ENERGY_WARN:
        logger.warning(
            "null_energy %.3g > %.0e: the r=%d smallest directions of C carry noticeable energy; "
            "retention will be weak",
            null_energy,
            NULL_ENERGY_WARN,
            r,
        )
    return KoreFactors(W_res=W_res, A=A, B=B, null_energy=null_energy, null_eigvals=null_eigs)


def retention_bound(delta_B: torch.Tensor, A: torch.Tensor, null_eigvals: torch.Tensor) -> float:
    """Upper bound on the output drift ``||delta_B A X||_F`` on the calibration inputs (App. C).

    With ``A = S V^T U_hat^T``-style rows in span(U_hat) and ``C = X X^T``,
    ``||delta_B A X||_F <= ||delta_B||_2 ||A||_2 ||U_hat^T X||_F`` and
    ``||U_hat^T X||_F^2 = sum of the r smallest eigenvalues of C``.

    Args:
        delta_B: ``[d_out, r]`` change of B during training.
        A: ``[r, d_in]`` the frozen down-projection.
        null_eigvals: ``[r]`` the r smallest eigenvalues of the (unnormalised) covariance.
    """
    nb = torch.linalg.matrix_norm(delta_B.double(), ord=2).item()
    na = torch.linalg.matrix_norm(A.double(), ord=2).item()
    return nb * na * math.sqrt(float(null_eigvals.double().clamp_min(0).sum()))
