"""Per-position uncertainty of a masked-diffusion LM's predictions.

The paper drives its block partition with the predictive entropy ``H_j = -Σ_v p_j(v) log p_j(v)`` of every
position; the official code also offers other uncertainty signals, reproduced here. All are computed in
float32 from logits ``z`` of shape ``[B, L, V]`` (B sequences, L positions, V vocabulary).
"""

from __future__ import annotations

import torch

from methods.swordsman.config import METRICS


def _check_finite(logits: torch.Tensor) -> None:
    bad = ~torch.isfinite(logits)
    if bad.any():
        where = bad.any(-1).nonzero()[:5].tolist()
        raise ValueError(f"logits contain NaN/Inf at (batch, position) {where}")


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of ``softmax(logits)`` at each position: the paper's partition signal
    (abstract and §1: blocks end at jumps of the predictive entropy, ``ΔH_i = H_{i+1} − H_i``), also
    the ``H̄`` of the dynamic threshold (official ``get_dynamic_threshold_by_entropy``). Float32 is our
    choice (deviations table: "entropies for partition / H̄").

    Source: the paper's abstract (entropy signal); fp32 is our choice.

    Args:
        logits: ``[B, L, V]`` (or ``[L, V]``) unnormalised scores.

    Returns:
        ``[B, L]`` (or ``[L]``) float32 entropies; ``log V`` for uniform, 0 for one-hot.

    Raises:
        TypeError: if ``logits`` is not a floating-point tensor.
        ValueError: if ``logits`` contain NaN/Inf.
    """
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise TypeError(f"logits must be a floating-point tensor, got {type(logits).__name__}")
    z = logits.float()
    logp = torch.log_softmax(z, dim=-1)  # [B, L, V]
    h = -(logp.exp() * logp).sum(-1)  # [B, L]
    # A NaN/Inf logit makes its row's entropy NaN (inf - inf, or 0 * -inf), so checking the [B, L]
    # result replaces a pass over the [B, L, V] logits; the error still names the positions.
    if not bool(torch.isfinite(h).all()):
        _check_finite(z)
        raise ValueError("entropy is not finite although the logits are")  # pragma: no cover
    return h


def uncertainty(logits: torch.Tensor, metric: str = "entropy", topk: int = 10) -> torch.Tensor:
    """Uncertainty signal used to place block boundaries (paper: entropy; the alternatives are the
    ``metric`` options of official ``llada/generate.py``).

    ``entropy``: ``H``; ``confidence``: ``1 - max p``; ``varentropy``: ``Var_p[-log p]``;
    ``gap``: ``1 - (p_1 - p_2)``; ``gini``: ``1 - Σ p²``; ``topk_entropy``: entropy of the top-``topk``
    probabilities renormalised.

    Args:
        logits: ``[B, L, V]`` (or ``[L, V]``).
        metric: one of the names above.
        topk: number of candidates for ``topk_entropy``.

    Returns:
        ``[B, L]`` (or ``[L]``) float32 uncertainties, larger = more uncertain.
    """
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    if metric == "entropy":
        return token_entropy(logits)
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise TypeError(f"logits must be a floating-point tensor, got {type(logits).__name__}")
    z = logits.float()
    _check_finite(z)
    logp = torch.log_softmax(z, dim=-1)  # [B, L, V]
    p = logp.exp()
    if metric == "confidence":
        return 1.0 - p.max(-1).values
    if metric == "varentropy":
        h = -(p * logp).sum(-1, keepdim=True)  # [B, L, 1]
        return (p * (-logp - h) ** 2).sum(-1)
    if metric == "gap":
        top2 = p.topk(2, dim=-1).values  # [B, L, 2]
        return 1.0 - (top2[..., 0] - top2[..., 1])
    if metric == "gini":
        return 1.0 - (p * p).sum(-1)
    # topk_entropy
    k = min(int(topk), z.shape[-1])
    return token_entropy(z.topk(k, dim=-1).values)
