"""APO policy loss: the virtual anchor ratio and the rectified ratio on negative samples.

Implements exclusive anchoring and ratio rectification of "Anchored Policy Optimization" (arXiv
2602.05717), read from a second-hand restatement of the paper (the PDF and the official code, github.com/1BIMU/APO_OFFICAL,
were not readable): for tokens of responses with a negative advantage the PPO ratio
``r_t`` is replaced by the rectified ratio ``r̃_t = λ·r_t − β·r_anchor,t``, where the virtual anchor
ratio ``r_anchor,t = Σ_{k∈S_t} π_θ(k|s_t) / Σ_{k∈S_t} π_ref(k|s_t)`` measures the policy's mass on
the reference model's Top-K set minus the sampled token (the "safe manifold", exclusive anchoring).
Tokens with a non-negative advantage keep the plain clipped GRPO surrogate.

The anchor side (anchor set, anchor ratio, anchor forms) lives in :mod:`methods.apo.anchor`, the
input checks in :mod:`methods.apo.checks`; this module combines them into the clipped loss.

Shape letters: B sequences (prompt × sample), T completion tokens, V vocabulary, K Top-K size.
All functions are pure tensor code and can be tested without a trainer.
"""

from __future__ import annotations

import logging
from typing import Literal

import torch

from common.rl import reduce_token_loss
from methods.apo.anchor import (
    ANCHOR_FORMS,
    ANCHOR_RATIO_TO,
    MAX_LOG_RATIO,
    anchor_set_mask,
    anchor_term,
    virtual_anchor_ratio,
)
from methods.apo.baselines import kl_on_wrong_penalty
from methods.apo.checks import broadcast_advantages, check_tensor, check_topk
from methods.apo.logprobs import gather_policy_logps, policy_entropy, policy_logps_at

logger = logging.getLogger(__name__)

__all__ = [
    "ANCHOR_FORMS",
    "ANCHOR_RATIO_TO",
    "CLIP_MODES",
    "aggregate_tokens",
    "anchor_set_mask",
    "apo_per_token_loss",
    "apo_policy_loss",
    "gather_policy_logps",
    "grpo_clipped_loss",
    "kl_on_wrong_penalty",
    "policy_entropy",
    "policy_logps_at",
    "rectified_surrogate",
    "virtual_anchor_ratio",
]

ClipMode = Literal["rectified", "token_only", "none"]
AnchorForm = Literal["paper_linear", "log", "ref_xent"]
Aggregation = Literal["token_mean", "seq_mean_token_mean"]

CLIP_MODES: tuple[str, ...] = ("rectified", "token_only", "none")
_AGGREGATIONS: dict[str, str] = {"token_mean": "bnpo", "seq_mean_token_mean": "grpo"}
# A pull term larger than this means Z_ref underflowed (the sampled token held almost all the
# reference mass) and the anchor ratio is numerically unbounded (a numerical guard of ours).
_R_ANCHOR_WARN = 1e3
_WARNED: set[tuple[float, float]] = set()


def aggregate_tokens(per_token: torch.Tensor, mask: torch.Tensor, agg: str) -> torch.Tensor:
    """Reduce a per-token loss [B, T] to a scalar: ``token_mean`` or ``seq_mean_token_mean``.

    Both go through :func:`common.rl.reduce_token_loss` (``token_mean`` is TRL's ``bnpo``,
    ``seq_mean_token_mean`` TRL's ``grpo``), without gradient accumulation. The trainer reduces
    with TRL's ``loss_type`` instead (:meth:`common.rl.GroupAdvantageGRPOTrainer.reduce_loss`).
    """
    if agg not in _AGGREGATIONS:
        raise ValueError(f"agg must be one of {list(_AGGREGATIONS)}, got {agg!r}")
    return reduce_token_loss(per_token, mask, _AGGREGATIONS[agg], mode="eval")


def grpo_clipped_loss(
    logp_sampled: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    agg: Aggregation = "token_mean",
) -> torch.Tensor:
    """The plain clipped GRPO/PPO surrogate, −min(A·r, A·clip(r, 1−ε_low, 1+ε_high)) (GRPO, Shao et al. 2024).

    The reference the APO loss must reduce to at λ = 1, β = 0 (no dual clip); the paper's GRPO
    baseline, with TRL's asymmetric ``epsilon`` / ``epsilon_high`` clip.

    Args:
        logp_sampled: policy log-probs of the sampled tokens, [B, T].
        old_logp: behaviour-policy log-probs, [B, T].
        advantages: [B] or [B, T].
        mask: completion mask, [B, T].
        eps_low: lower clip range.
        eps_high: upper clip range.
        agg: ``"token_mean"`` or ``"seq_mean_token_mean"``.

    Returns:
        Scalar loss.
    """
    bt = (logp_sampled.shape[0], logp_sampled.shape[1])
    adv = broadcast_advantages(advantages, bt)
    ratio = torch.exp(logp_sampled - old_logp)  # [B, T]
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    per_token = -torch.min(adv * ratio, adv * clipped)  # [B, T]
    return aggregate_tokens(per_token, mask.to(per_token.dtype), agg)


def _check_options(
    clip_mode: str,
    anchor_form: str,
    anchor_ratio_to: str,
    lam: float,
    beta: float,
    eps_low: float,
    eps_high: float,
    dual_clip: float | None,
) -> None:
    """Reject unknown option names and out-of-range coefficients of :func:`apo_per_token_loss`;
    warn once per setting when β > λ."""
    if clip_mode not in CLIP_MODES:
        raise ValueError(f"clip_mode must be one of {list(CLIP_MODES)}, got {clip_mode!r}")
    if anchor_form not in ANCHOR_FORMS:
        raise ValueError(f"anchor_form must be one of {list(ANCHOR_FORMS)}, got {anchor_form!r}")
    if anchor_ratio_to not in ANCHOR_RATIO_TO:
        raise ValueError(
            f"anchor_ratio_to must be one of {list(ANCHOR_RATIO_TO)}, got {anchor_ratio_to!r}"
        )
    if anchor_ratio_to == "old" and anchor_form == "ref_xent":
        raise ValueError(
            "anchor_form='ref_xent' is a reference-ratio form; use anchor_ratio_to='ref' with it"
        )
    if lam < 0:
        raise ValueError(f"lam (push coefficient λ) must be >= 0, got {lam}")
    if beta < 0:
        raise ValueError(f"beta (pull coefficient β) must be >= 0, got {beta}")
    if not (0 <= eps_low < 1 and eps_high >= 0):
        raise ValueError(f"eps_low must be in [0, 1) and eps_high >= 0, got {eps_low}, {eps_high}")
    if dual_clip is not None and dual_clip <= 1:
        raise ValueError(f"dual_clip must be > 1 or None, got {dual_clip}")
    if beta > lam and (lam, beta) not in _WARNED:
        _WARNED.add((lam, beta))  # once per setting, not once per step
        logger.warning(
            "beta=%s > lam=%s: the pull term outweighs the push on wrong tokens",
            beta,
            lam,
        )


def _policy_inputs(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    sampled: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_logp_ref: torch.Tensor,
    gathered: bool,
    logp_sampled: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Check shapes and finiteness and gather the K + 1 policy log-probs per position.

    Returns:
        ``(adv [B, 1] or [B, T], valid bool [B, T], logp_sampled [B, T], logp_topk [B, T, K])``.
    """
    check_tensor("logp", logp, (3,))
    check_tensor("old_logp", old_logp, (2,))
    check_tensor("sampled", sampled, (2,))
    check_tensor("mask", mask, (2,))
    bt = (sampled.shape[0], sampled.shape[1])
    for name, x in (("old_logp", old_logp), ("mask", mask)):
        if tuple(x.shape) != bt:
            raise ValueError(f"{name} must be [B, T]={list(bt)} like sampled, got {tuple(x.shape)}")
    adv = broadcast_advantages(advantages, bt)  # [B, 1] or [B, T]
    maskf = mask.to(torch.float32) if not mask.dtype.is_floating_point else mask
    valid = maskf > 0  # [B, T]
    if gathered:
        if logp_sampled is None:
            raise ValueError("logp_sampled [B, T] is required when gathered=True")
        logp_topk = logp
        check_topk(topk_ids, topk_logp_ref, bt, None)
    else:
        check_topk(topk_ids, topk_logp_ref, bt, logp.shape[-1])
        if tuple(logp.shape[:2]) != bt:
            raise ValueError(
                f"logp must be [B, T, V] with [B, T]={list(bt)}, got {tuple(logp.shape)}"
            )
        if logp.shape[-1] <= topk_ids.shape[-1]:
            raise ValueError(
                f"K={topk_ids.shape[-1]} must be < vocabulary size V={logp.shape[-1]}: "
                "a Top-K covering the whole vocabulary is no constraint"
            )
        logp_sampled, logp_topk = gather_policy_logps(logp, sampled, topk_ids)
    if not torch.isfinite(torch.where(valid, old_logp, 0.0)).all():
        raise ValueError("old_logp must be finite on unmasked tokens")
    if not torch.isfinite(torch.where(valid, logp_sampled.detach(), 0.0)).all():
        raise ValueError("policy log-probs of the sampled tokens must be finite on unmasked tokens")
    return adv, valid, logp_sampled, logp_topk


def rectified_surrogate(
    ratio: torch.Tensor,
    anchor: torch.Tensor,
    adv: torch.Tensor,
    neg: torch.Tensor,
    lam: float,
    beta: float,
    eps_low: float,
    eps_high: float,
    clip_mode: str,
    dual_clip: float | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ratio rectification inside the clipped PPO surrogate, per token (unmasked).

    The paper's rectified ratio (restated second-hand): ρ = λ·r − β·anchor where A < 0, ρ = r
    elsewhere. The clipping around it is our inference from verl's PPO loss (which clip the paper
    uses is not known, docs/methods/apo.md, Deviations): ``"rectified"`` clips ρ,
    ``"token_only"`` clips r inside ρ, ``"none"`` is −A·ρ; the dual clip caps ℓ at −A·c on A < 0.

    Args:
        ratio: r_t = π_θ(y_t)/π_old(y_t), [B, T].
        anchor: the anchor term of :func:`methods.apo.anchor.anchor_term`, [B, T].
        adv: advantages, [B, 1] or [B, T].
        neg: A < 0, bool [B, T].
        lam, beta, eps_low, eps_high, clip_mode, dual_clip: as in :func:`apo_per_token_loss`.

    Returns:
        ``(per_token [B, T], rho [B, T], dual_hit bool [B, T])``.
    """
    rectified = lam * ratio - beta * anchor  # [B, T]
    rho = torch.where(neg, rectified, ratio)  # [B, T]
    if clip_mode == "rectified":
        rho_clip = torch.clamp(rho, 1 - eps_low, 1 + eps_high)
        per_token = -torch.min(adv * rho, adv * rho_clip)  # [B, T]
    elif clip_mode == "token_only":
        r_clip = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
        rho_clip = torch.where(neg, lam * r_clip - beta * anchor, r_clip)
        per_token = -torch.min(adv * rho, adv * rho_clip)
    else:  # "none"
        per_token = -adv * rho
    if dual_clip is not None:
        cap = -adv * dual_clip  # [B, 1] or [B, T]; positive where A < 0
        dual_hit = neg & (per_token > cap)  # [B, T]
        per_token = torch.where(neg, torch.min(per_token, cap), per_token)
    else:
        dual_hit = torch.zeros_like(neg)
    return per_token, rho, dual_hit


@torch.no_grad()
def _loss_stats(
    r_anchor: torch.Tensor,
    rho: torch.Tensor,
    logp_topk: torch.Tensor,
    in_s: torch.Tensor,
    adv: torch.Tensor,
    neg: torch.Tensor,
    valid: torch.Tensor,
    dual_hit: torch.Tensor,
    eps_low: float,
    eps_high: float,
    z_floor: float,
) -> dict[str, float]:
    """The diagnostics of :func:`apo_per_token_loss` (means over unmasked tokens; our choice of
    logged quantities, the safe-manifold mass is the paper's support objective); warns on Z_ref
    underflow (r_anchor > 1e3 on a negative token, a numerical guard of ours)."""
    n_valid = valid.sum().clamp_min(1).float()
    neg_valid = neg & valid
    n_neg = neg_valid.sum()
    underflow = neg_valid & (r_anchor > _R_ANCHOR_WARN)
    n_under = int(underflow.sum())
    if n_under:
        logger.warning(
            "%d negative tokens have r_anchor > %.0e (Z_ref underflow, floored at %g)",
            n_under,
            _R_ANCHOR_WARN,
            z_floor,
        )
    mass = logp_topk.detach().exp().sum(-1)  # [B, T]
    in_topk = (~in_s).any(-1)  # [B, T] sampled token is one of the Top-K
    return {
        "r_anchor_neg": float((r_anchor.detach() * neg_valid).sum() / n_neg.clamp_min(1)),
        "safe_manifold_mass": float((mass * valid).sum() / n_valid),
        "frac_sampled_in_topk": float((in_topk & valid).sum() / n_valid),
        "clip_low_frac": float(((rho.detach() < 1 - eps_low) & (adv < 0) & valid).sum() / n_valid),
        "clip_high_frac": float(
            ((rho.detach() > 1 + eps_high) & (adv > 0) & valid).sum() / n_valid
        ),
        "dual_clip_frac": float((dual_hit & valid).sum() / n_valid),
        "frac_neg_tokens": float(n_neg / n_valid),
        "z_underflow_tokens": float(n_under),
    }


def apo_per_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    sampled: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_logp_ref: torch.Tensor,
    lam: float = 1.05,
    beta: float = 0.1,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = 3.0,
    clip_mode: ClipMode = "rectified",
    anchor_form: AnchorForm = "paper_linear",
    z_floor: float = 1e-8,
    *,
    gathered: bool = False,
    logp_sampled: torch.Tensor | None = None,
    anchor_ratio_to: str = "ref",
    topk_logp_old: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The per-token APO loss ``[B, T]`` (zero on masked tokens); reduce it with
    :func:`common.rl.reduce_token_loss` (:func:`apo_policy_loss` does, for a scalar).

    The paper's ratio rectification (restated second-hand, section numbers unknown): r_t =
    π_θ(y_t)/π_old(y_t) (log-difference clamped to ±20); ρ_t = λ·r_t − β·r_anchor,t if A < 0, else
    r_t; ℓ_t = −min(A·ρ_t, A·clip(ρ_t, 1−ε_low, 1+ε_high)), and for A < 0 the dual clip
    ℓ_t = min(ℓ_t, −A·c) (verl's PPO loss, our inference). The steps: :func:`_policy_inputs`,
    :func:`methods.apo.anchor.anchor_term` (``anchor_ratio_to``, ``anchor_form``),
    :func:`rectified_surrogate` (``clip_mode``), :func:`_loss_stats`. Positive-advantage tokens
    never see λ, β or the anchor term.

    Args:
        logp: policy log-probs, [B, T, V] (full vocabulary), or [B, T, K] at ``topk_ids`` with
            ``gathered=True`` (then ``logp_sampled`` is required).
        old_logp: behaviour-policy log-probs of the sampled tokens, [B, T].
        sampled: sampled token ids, [B, T].
        advantages: sequence-level [B] or token-level [B, T] advantages.
        mask: completion mask, [B, T] (0/1 or bool).
        topk_ids: reference Top-K ids, [B, T, K] (from :func:`methods.apo.reference_topk`).
        topk_logp_ref: reference log-probs at ``topk_ids``, [B, T, K].
        lam: push coefficient λ ≥ 0 (paper default 1.05).
        beta: pull coefficient β ≥ 0 (paper default 0.1).
        eps_low, eps_high: PPO clip range.
        dual_clip: dual-clip constant c > 1 for A < 0, or None to disable.
        clip_mode: one of :data:`CLIP_MODES` (``"rectified"``: clip ρ, the default).
        anchor_form: ``"paper_linear"`` or the diagnostics ``"log"``, ``"ref_xent"`` (ours).
        z_floor: floor on Z_ref.
        gathered: ``logp`` is already gathered at ``topk_ids``.
        logp_sampled: policy log-probs of the sampled tokens [B, T] (required with ``gathered``).
        anchor_ratio_to: one of :data:`ANCHOR_RATIO_TO` (see above).
        topk_logp_old: π_old log-probs at ``topk_ids`` [B, T, K], for ``anchor_ratio_to="old"``.

    Returns:
        ``(per_token_loss [B, T], stats)``; ``stats`` holds floats: ``r_anchor_neg`` (mean r_anchor on negative
        tokens), ``safe_manifold_mass`` (mean Σ_{TopK} π_θ), ``frac_sampled_in_topk``,
        ``clip_low_frac``, ``clip_high_frac``, ``dual_clip_frac``, ``frac_neg_tokens``,
        ``z_underflow_tokens``.

    Raises:
        ValueError: for bad coefficients, unknown option names, misaligned shapes, ids outside the
            vocabulary or non-finite inputs.
    """
    _check_options(clip_mode, anchor_form, anchor_ratio_to, lam, beta, eps_low, eps_high, dual_clip)
    adv, valid, logp_sampled, logp_topk = _policy_inputs(
        logp, old_logp, sampled, advantages, mask, topk_ids, topk_logp_ref, gathered, logp_sampled
    )
    log_ratio = (logp_sampled - old_logp).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)  # [B, T]
    ratio = torch.exp(log_ratio)  # [B, T]
    neg = (adv < 0).expand(valid.shape)  # [B, T]
    anchor, r_anchor, in_s = anchor_term(
        logp_topk, sampled, topk_ids, topk_logp_ref, z_floor, anchor_form, anchor_ratio_to,
        topk_logp_old,
    )  # fmt: skip
    per_token, rho, dual_hit = rectified_surrogate(
        ratio, anchor, adv, neg, lam, beta, eps_low, eps_high, clip_mode, dual_clip
    )
    # padded positions may hold garbage (±inf log-probs); never let NaN leak through the mask
    per_token = torch.where(valid, per_token, 0.0)
    stats = _loss_stats(
        r_anchor, rho, logp_topk, in_s, adv, neg, valid, dual_hit, eps_low, eps_high, z_floor
    )
    return per_token, stats


def apo_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    sampled: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_logp_ref: torch.Tensor,
    lam: float = 1.05,
    beta: float = 0.1,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = 3.0,
    clip_mode: ClipMode = "rectified",
    agg: Aggregation = "token_mean",
    anchor_form: AnchorForm = "paper_linear",
    z_floor: float = 1e-8,
    *,
    gathered: bool = False,
    logp_sampled: torch.Tensor | None = None,
    anchor_ratio_to: str = "ref",
    topk_logp_old: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The scalar APO loss: :func:`apo_per_token_loss` reduced by ``agg``.

    ``agg="token_mean"`` (verl's default, TRL ``bnpo`` on one batch) or ``"seq_mean_token_mean"``
    (TRL ``grpo``), both through :func:`common.rl.reduce_token_loss`; every other argument is that
    of :func:`apo_per_token_loss`.

    Returns:
        ``(loss, stats)`` with the stats of :func:`apo_per_token_loss`.
    """
    if agg not in _AGGREGATIONS:
        raise ValueError(f"agg must be one of {list(_AGGREGATIONS)}, got {agg!r}")
    per_token, stats = apo_per_token_loss(
        logp, old_logp, sampled, advantages, mask, topk_ids, topk_logp_ref, lam=lam, beta=beta,
        eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip, clip_mode=clip_mode,
        anchor_form=anchor_form, z_floor=z_floor, gathered=gathered, logp_sampled=logp_sampled,
        anchor_ratio_to=anchor_ratio_to, topk_logp_old=topk_logp_old,
    )  # fmt: skip
    maskf = mask.to(per_token.dtype) if mask.shape == per_token.shape else mask
    return aggregate_tokens(per_token, maskf, agg), stats
