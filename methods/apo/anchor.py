"""The anchor side of the APO loss: exclusive anchor set, virtual anchor ratio, anchor forms.

"Anchored Policy Optimization" (arXiv 2602.05717), as restated second-hand (the PDF's equations and
section numbers were not readable here; docs/methods/apo.md, Deviations): the safe manifold is the
reference Top-K, M_safe(s_t) = TopK(π_ref(·|s_t)); exclusive anchoring drops the sampled token,
S_t = M_safe(s_t) \\ {y_t}; the virtual anchor ratio is
``r_anchor,t = Σ_{k∈S_t} π_θ(k|s_t) / Σ_{k∈S_t} π_ref(k|s_t)``.

The restatement leaves open which policy the anchor ratio is taken against. ``anchor_ratio_to``
offers both readings: ``"ref"`` (the formula above, ratio to π_ref) and ``"old"``
(``r_anchor,t = Σ_{k∈S_t} ω̂_k · π_θ(k)/π_old(k)``, ω̂ from π_ref: the PPO convention that a ratio
is to the behaviour policy; our inference). They agree at π_θ = π_old = π_ref and differ
afterwards: on-policy the ``"old"`` ratio is 1 at every step and its gradient is Σ ω̂_k ∇log π_θ(k).

Shape letters: B sequences, T completion tokens, V vocabulary, K Top-K size.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from methods.apo.checks import check_tensor, check_topk

__all__ = [
    "ANCHOR_FORMS",
    "ANCHOR_RATIO_TO",
    "anchor_set_mask",
    "anchor_term",
    "virtual_anchor_ratio",
]

ANCHOR_RATIO_TO: tuple[str, ...] = ("ref", "old")
# log-ratios are clamped to ±20 before exp (numerical guard of ours, as verl's PPO loss does)
MAX_LOG_RATIO = 20.0


def anchor_set_mask(sampled: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
    """Membership mask of the exclusive anchor set S_t = TopK(π_ref) \\ {y_t} (paper: exclusive
    anchoring; section number not verified, the paper is known second-hand).

    Args:
        sampled: sampled token ids, [B, T].
        topk_ids: reference Top-K ids, [B, T, K].

    Returns:
        Bool tensor [B, T, K]; False where the Top-K slot holds the sampled token.
    """
    return topk_ids.long() != sampled.long().unsqueeze(-1)  # [B, T, K]


def virtual_anchor_ratio(
    logp: torch.Tensor,
    sampled: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_logp_ref: torch.Tensor,
    z_floor: float = 1e-8,
    *,
    gathered: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Virtual anchor ratio r_anchor,t and the anchor reference mass Z_ref,t (paper: virtual
    anchor ratio, as restated second-hand).

    r_anchor,t = Σ_{k∈S_t} ω̂_k · π_θ(k)/π_ref(k) = Σ_{k∈S_t} π_θ(k) / Z_ref,t,
    with Z_ref,t = Σ_{k∈S_t} π_ref(k) and S_t = TopK(π_ref(·|s_t)) \\ {y_t}. It equals 1 when π_θ
    matches π_ref on S_t; an empty S_t (K = 1 and y_t is the reference top-1) gives r_anchor = 0.

    Args:
        logp: policy log-probs, [B, T, V] (full vocabulary) or, with ``gathered=True``, the
            policy log-probs already gathered at ``topk_ids``, [B, T, K].
        sampled: sampled token ids y_t, [B, T].
        topk_ids: reference Top-K ids, [B, T, K].
        topk_logp_ref: reference log-probs at ``topk_ids``, [B, T, K].
        z_floor: lower bound on Z_ref,t (guards an underflowing anchor mass).
        gathered: whether ``logp`` is already [B, T, K].

    Returns:
        ``(r_anchor [B, T], z_ref [B, T])``; ``z_ref`` is the unfloored anchor mass.

    Raises:
        ValueError: on misaligned shapes, out-of-range ids or a non-positive ``z_floor``.
    """
    check_tensor("logp", logp, (3,))
    check_tensor("sampled", sampled, (2,))
    bt = (sampled.shape[0], sampled.shape[1])
    check_topk(topk_ids, topk_logp_ref, bt, None if gathered else logp.shape[-1])
    if not z_floor > 0:
        raise ValueError(f"z_floor must be > 0, got {z_floor}")
    if gathered:
        if logp.shape != topk_ids.shape:
            raise ValueError(
                f"with gathered=True logp must be [B, T, K]={list(topk_ids.shape)}, got "
                f"{tuple(logp.shape)}"
            )
        logp_topk = logp
    else:
        if tuple(logp.shape[:2]) != bt:
            raise ValueError(
                f"logp must be [B, T, V] with [B, T]={list(bt)}, got {tuple(logp.shape)}"
            )
        logp_topk = logp.gather(-1, topk_ids.long())  # [B, T, K]
    in_s = anchor_set_mask(sampled, topk_ids)  # [B, T, K]
    ref = topk_logp_ref.to(torch.promote_types(topk_logp_ref.dtype, logp_topk.dtype))
    w_ref = torch.where(in_s, ref.exp(), 0.0)  # [B, T, K]
    z_ref = w_ref.sum(-1)  # [B, T]
    p_anchor = torch.where(in_s, logp_topk.exp(), 0.0).sum(-1)  # [B, T]
    r_anchor = p_anchor / z_ref.clamp_min(z_floor)  # [B, T]
    return r_anchor, z_ref


def _anchor_paper_linear(
    r_anchor: torch.Tensor,
    logp_topk: torch.Tensor,
    w_hat: torch.Tensor,
    topk_logp_ref: torch.Tensor,
) -> torch.Tensor:
    """The paper's linear anchor term: r_anchor itself (ratio rectification, restated second-hand)."""
    return r_anchor


def _anchor_log(
    r_anchor: torch.Tensor,
    logp_topk: torch.Tensor,
    w_hat: torch.Tensor,
    topk_logp_ref: torch.Tensor,
) -> torch.Tensor:
    """Diagnostic form of ours (not in the paper): 1 + log r_anchor."""
    # 1 + log r_anchor equals r_anchor to first order at r_anchor = 1, so the
    # value (and therefore PPO clipping) matches the paper form at init; the gradient is ∝ 1/r_anchor.
    return 1.0 + torch.log(r_anchor.clamp_min(1e-30))


def _anchor_ref_xent(
    r_anchor: torch.Tensor,
    logp_topk: torch.Tensor,
    w_hat: torch.Tensor,
    topk_logp_ref: torch.Tensor,
) -> torch.Tensor:
    """Diagnostic form of ours (not in the paper): 1 + Σ_k ω̂_k (log π_θ(k) − log π_ref(k))."""
    # 1 + Σ_k ω̂_k (log π_θ(k) − log π_ref(k)); on-policy its gradient equals that of
    # the anchor_ratio_to='old' ratio (Σ ω̂_k ∇log π_θ(k)); the gradient is that of the
    # reference-weighted log-likelihood of the anchor tokens (not ∝ π_θ(k)), and the value is 1 at
    # π_θ = π_ref so that clipping behaves as for the paper form.
    diff = torch.where(w_hat > 0, logp_topk - topk_logp_ref, 0.0)  # [B, T, K]
    return 1.0 + (w_hat * diff).sum(-1)  # [B, T]


ANCHOR_FORMS: dict[str, Callable[..., torch.Tensor]] = {
    "paper_linear": _anchor_paper_linear,
    "log": _anchor_log,
    "ref_xent": _anchor_ref_xent,
}


def anchor_term(
    logp_topk: torch.Tensor,
    sampled: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_logp_ref: torch.Tensor,
    z_floor: float,
    anchor_form: str,
    anchor_ratio_to: str,
    topk_logp_old: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The anchor term that ratio rectification subtracts (β times it) on negative tokens.

    ``anchor_ratio_to="ref"``: the paper's virtual anchor ratio Σ_{k∈S} π_θ(k)/Z_ref (restated
    second-hand); ``"old"``: Σ_{k∈S} ω̂_k π_θ(k)/π_old(k), ω̂_k = π_ref(k)/Z_ref (our inference,
    see the module docstring), with π_old = ``logp_topk`` detached when ``topk_logp_old`` is None.
    ``anchor_form`` then maps it through :data:`ANCHOR_FORMS`.

    Args:
        logp_topk: policy log-probs at ``topk_ids``, [B, T, K].
        sampled: sampled token ids, [B, T].
        topk_ids: reference Top-K ids, [B, T, K].
        topk_logp_ref: reference log-probs at ``topk_ids``, [B, T, K].
        z_floor: floor on Z_ref.
        anchor_form: a key of :data:`ANCHOR_FORMS`.
        anchor_ratio_to: one of :data:`ANCHOR_RATIO_TO`.
        topk_logp_old: π_old log-probs at ``topk_ids`` [B, T, K], or None (on-policy).

    Returns:
        ``(anchor [B, T], r_anchor [B, T], in_s [B, T, K])``.
    """
    r_anchor, z_ref = virtual_anchor_ratio(
        logp_topk, sampled, topk_ids, topk_logp_ref, z_floor=z_floor, gathered=True
    )  # [B, T], [B, T]
    in_s = anchor_set_mask(sampled, topk_ids)  # [B, T, K]
    ref_lp = topk_logp_ref.to(logp_topk.dtype)
    w_hat = torch.where(in_s, ref_lp.exp(), 0.0) / z_ref.clamp_min(z_floor)[..., None]  # [B, T, K]
    if anchor_ratio_to == "old":
        if topk_logp_old is None:
            topk_logp_old = logp_topk.detach()  # on-policy: π_old = π_θ before the update
        elif tuple(topk_logp_old.shape) != tuple(topk_ids.shape):
            raise ValueError(
                f"topk_logp_old must be [B, T, K]={list(topk_ids.shape)}, got "
                f"{tuple(topk_logp_old.shape)}"
            )
        log_r = (logp_topk - topk_logp_old.to(logp_topk.dtype)).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
        r_anchor = (w_hat * torch.where(in_s, log_r.exp(), 0.0)).sum(-1)  # [B, T]
    anchor = ANCHOR_FORMS[anchor_form](r_anchor, logp_topk, w_hat, ref_lp)  # [B, T]
    return anchor, r_anchor, in_s
