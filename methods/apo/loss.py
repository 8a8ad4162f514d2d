"""APO policy loss: the virtual anchor ratio and the rectified ratio on negative samples.

Implements exclusive anchoring and ratio rectification of "Anchored Policy Optimization" (arXiv
2602.05717), read from a second-hand restatement of the paper (the PDF and the official code, github.com/1BIMU/APO_OFFICAL,
were not readable): for tokens of responses with a negative advantage the PPO ratio
``r_t`` is replaced by the rectified ratio ``r̃_t = λ·r_t − β·r_anchor,t``, where the virtual anchor
ratio ``r_anchor,t = Σ_{k∈S_t} π_θ(k|s_t) / Σ_{k∈S_t} π_ref(k|s_t)`` measures the policy's mass on
the reference model's Top-K set minus the sampled token (the "safe manifold", exclusive anchoring).
Tokens with a non-negative advantage keep the plain clipped GRPO surrogate.

The restatement leaves open which policy the anchor ratio is taken against. ``anchor_ratio_to``
offers both readings: ``"ref"`` (the formula above, ratio to π_ref) and ``"old"``
(``r_anchor,t = Σ_{k∈S_t} ω̂_k · π_θ(k)/π_old(k)``, ω̂ from π_ref: the PPO convention that a ratio
is to the behaviour policy). They agree at π_θ = π_old = π_ref and differ afterwards: on-policy the
``"old"`` ratio is 1 at every step and its gradient is Σ ω̂_k ∇log π_θ(k).

Shape letters: B sequences (prompt × sample), T completion tokens, V vocabulary, K Top-K size.
All functions are pure tensor code and can be tested without a trainer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

import torch

from common.rl import reduce_token_loss

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
    "virtual_anchor_ratio",
]

ClipMode = Literal["rectified", "token_only", "none"]
AnchorForm = Literal["paper_linear", "log", "ref_xent"]
Aggregation = Literal["token_mean", "seq_mean_token_mean"]

CLIP_MODES: tuple[str, ...] = ("rectified", "token_only", "none")
ANCHOR_RATIO_TO: tuple[str, ...] = ("ref", "old")
_AGGREGATIONS: dict[str, str] = {"token_mean": "bnpo", "seq_mean_token_mean": "grpo"}
# A pull term larger than this means Z_ref underflowed (the sampled token held almost all the
# reference mass) and the anchor ratio is numerically unbounded (a numerical guard of ours).
_R_ANCHOR_WARN = 1e3
_MAX_LOG_RATIO = 20.0
_WARNED: set[tuple[float, float]] = set()


# --------------------------------------------------------------------------------------------
# validation helpers (public boundary)
# --------------------------------------------------------------------------------------------
def _check_tensor(name: str, x: object, ndim: tuple[int, ...]) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() not in ndim:
        raise ValueError(
            f"{name} must have {' or '.join(map(str, ndim))} dims, got {tuple(x.shape)}"
        )
    return x


def _check_topk(
    topk_ids: torch.Tensor, topk_logp_ref: torch.Tensor, bt: tuple[int, int], vocab: int | None
) -> None:
    _check_tensor("topk_ids", topk_ids, (3,))
    _check_tensor("topk_logp_ref", topk_logp_ref, (3,))
    if topk_ids.dtype.is_floating_point:
        raise TypeError(f"topk_ids must be an integer tensor, got {topk_ids.dtype}")
    if tuple(topk_ids.shape[:2]) != bt or topk_ids.shape != topk_logp_ref.shape:
        raise ValueError(
            "topk_ids and topk_logp_ref must be [B, T, K] aligned with the completion mask "
            f"[B, T] = {list(bt)}; got {tuple(topk_ids.shape)} and {tuple(topk_logp_ref.shape)} "
            "(check the padding side and logits_to_keep used for the reference Top-K)"
        )
    if topk_logp_ref.dtype.is_floating_point and (
        torch.isnan(topk_logp_ref).any() or (topk_logp_ref == float("inf")).any()
    ):
        raise ValueError(
            "topk_logp_ref (reference Top-K log-probs) contains NaN or +inf: the reference pass "
            "is broken (check the reference model's weights/dtype); padded slots must be -inf"
        )
    if vocab is not None and topk_ids.numel() and (topk_ids.min() < 0 or topk_ids.max() >= vocab):
        raise ValueError(
            f"topk_ids must index the policy vocabulary [0, {vocab}), got range "
            f"[{int(topk_ids.min())}, {int(topk_ids.max())}]: policy and reference tokenizers differ?"
        )


def _broadcast_advantages(advantages: torch.Tensor, bt: tuple[int, int]) -> torch.Tensor:
    _check_tensor("advantages", advantages, (1, 2))
    if advantages.dim() == 1:
        if advantages.shape[0] != bt[0]:
            raise ValueError(
                f"advantages must be [B]={bt[0]} or [B, T], got {tuple(advantages.shape)}"
            )
        advantages = advantages[:, None]  # [B, 1]
    elif tuple(advantages.shape) != bt:
        raise ValueError(
            f"advantages must be [B] or [B, T]={list(bt)}, got {tuple(advantages.shape)}"
        )
    if not torch.isfinite(advantages).all():
        raise ValueError("advantages must be finite (got NaN or inf)")
    return advantages


# --------------------------------------------------------------------------------------------
# building blocks
# --------------------------------------------------------------------------------------------
def gather_policy_logps(
    logp: torch.Tensor, sampled: torch.Tensor, topk_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather the policy log-probs of the sampled token and of the reference Top-K tokens.

    Only K + 1 values per position are needed by the APO loss, so callers that hold full-vocab
    log-probs can reduce them here once (memory: [B, T, V] -> [B, T, K + 1]).

    Args:
        logp: policy log-softmax over the vocabulary, [B, T, V].
        sampled: sampled token ids y_t, [B, T].
        topk_ids: reference Top-K ids, [B, T, K].

    Returns:
        ``(logp_sampled [B, T], logp_topk [B, T, K])``.
    """
    logp_sampled = logp.gather(-1, sampled.long().unsqueeze(-1)).squeeze(-1)  # [B, T]
    logp_topk = logp.gather(-1, topk_ids.long())  # [B, T, K]
    return logp_sampled, logp_topk


def policy_logps_at(
    logits: torch.Tensor,
    sampled: torch.Tensor,
    topk_ids: torch.Tensor,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Policy log-probs at the sampled token and the reference Top-K, from logits [B, T, V].

    Never materialises the full-vocabulary log-softmax of all positions: it gathers the K + 1
    logits and subtracts a per-row logsumexp (TRL's :func:`trl.trainer.utils.selective_log_softmax`,
    the function TRL's ``GRPOTrainer`` uses for its own log-probs, so APO's loss memory is GRPO's;
    a fused Triton kernel on CUDA when available). The logits' dtype is kept, as TRL does (bf16
    logits use TRL's per-row bf16 log-softmax).

    Args:
        logits: policy logits for the T completion positions, [B, T, V].
        sampled: sampled token ids, [B, T].
        topk_ids: reference Top-K ids, [B, T, K].
        temperature: sampling temperature (> 0) the logits are divided by.

    Returns:
        ``(logp_sampled [B, T], logp_topk [B, T, K])``, differentiable w.r.t. ``logits``.
    """
    from trl.trainer.utils import selective_log_softmax

    _check_tensor("logits", logits, (3,))
    _check_tensor("sampled", sampled, (2,))
    bt = (sampled.shape[0], sampled.shape[1])
    if tuple(logits.shape[:2]) != bt:
        raise ValueError(
            f"logits must be [B, T, V] with [B, T]={list(bt)}, got {tuple(logits.shape)}"
        )
    vocab = logits.shape[-1]
    _check_topk(topk_ids, topk_ids.float(), bt, vocab)
    if vocab <= topk_ids.shape[-1]:
        raise ValueError(f"K={topk_ids.shape[-1]} must be < vocabulary size V={vocab}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if sampled.numel() and (sampled.min() < 0 or sampled.max() >= vocab):
        raise ValueError(f"sampled ids must index the vocabulary [0, {vocab})")
    index = torch.cat([sampled.long()[..., None], topk_ids.long()], dim=-1)  # [B, T, 1 + K]
    lp = selective_log_softmax(logits, index, temperature=temperature)  # [B, T, 1 + K]
    return lp[..., 0], lp[..., 1:]


@torch.no_grad()
def policy_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy [B, T] of ``softmax(logits / temperature)``, one sequence at a time (no [B, T, V]
    fp32 copy; a diagnostic, no gradient)."""
    _check_tensor("logits", logits, (3,))
    out = []
    for row in logits:  # [T, V]
        lp = torch.log_softmax(row.float() / temperature, dim=-1)
        out.append(-(lp.exp() * lp).sum(-1))
    return torch.stack(out) if out else logits.new_zeros(logits.shape[:2]).float()


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
    _check_tensor("logp", logp, (3,))
    _check_tensor("sampled", sampled, (2,))
    bt = (sampled.shape[0], sampled.shape[1])
    _check_topk(topk_ids, topk_logp_ref, bt, None if gathered else logp.shape[-1])
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


# --------------------------------------------------------------------------------------------
# anchor forms (one paper form, two clearly labelled diagnostic variants of ours)
# --------------------------------------------------------------------------------------------
def _anchor_paper_linear(
    r_anchor: torch.Tensor,
    logp_topk: torch.Tensor,
    w_hat: torch.Tensor,
    topk_logp_ref: torch.Tensor,
) -> torch.Tensor:
    return r_anchor


def _anchor_log(
    r_anchor: torch.Tensor,
    logp_topk: torch.Tensor,
    w_hat: torch.Tensor,
    topk_logp_ref: torch.Tensor,
) -> torch.Tensor:
    # Diagnostic form (not in the restatement). 1 + log r_anchor equals r_anchor to first order at r_anchor = 1, so the
    # value (and therefore PPO clipping) matches the paper form at init; the gradient is ∝ 1/r_anchor.
    return 1.0 + torch.log(r_anchor.clamp_min(1e-30))


def _anchor_ref_xent(
    r_anchor: torch.Tensor,
    logp_topk: torch.Tensor,
    w_hat: torch.Tensor,
    topk_logp_ref: torch.Tensor,
) -> torch.Tensor:
    # Diagnostic form: 1 + Σ_k ω̂_k (log π_θ(k) − log π_ref(k)); on-policy its gradient equals that of
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

    The reference the APO loss must reduce to at λ = 1, β = 0 (no dual clip).

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
    adv = _broadcast_advantages(advantages, bt)
    ratio = torch.exp(logp_sampled - old_logp)  # [B, T]
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    per_token = -torch.min(adv * ratio, adv * clipped)  # [B, T]
    return aggregate_tokens(per_token, mask.to(per_token.dtype), agg)


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

    Implements the paper's ratio rectification (as restated second-hand; the clipping and dual
    clip follow verl's PPO loss, our inference):

    * r_t = π_θ(y_t)/π_old(y_t) (log-difference clamped to ±20);
    * ρ_t = λ·r_t − β·r_anchor,t if A < 0, else ρ_t = r_t;
    * ℓ_t = −min(A·ρ_t, A·clip(ρ_t, 1−ε_low, 1+ε_high)); for A < 0 also the dual clip
      ℓ_t = min(ℓ_t, −A·c).

    ``anchor_ratio_to`` chooses the denominator of the anchor ratio (the restatement is
    ambiguous): ``"ref"`` gives Σ_{k∈S} π_θ(k)/Z_ref; ``"old"`` gives Σ_{k∈S} ω̂_k π_θ(k)/π_old(k)
    with ``topk_logp_old`` = log π_old at ``topk_ids`` (default: ``logp`` detached, i.e. on-policy).

    ``clip_mode="rectified"`` clips ρ as a whole (default; the paper does not say which); ``"token_only"`` clips only
    r_t inside ρ (λ·clip(r) − β·r_anchor); ``"none"`` uses −A·ρ unclipped. Positive-advantage
    tokens never see λ, β or the anchor term.

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
        eps_low: PPO lower clip ε_low.
        eps_high: PPO upper clip ε_high.
        dual_clip: dual-clip constant c > 1 for A < 0, or None to disable.
        clip_mode: one of :data:`CLIP_MODES`.
        anchor_form: ``"paper_linear"`` (the paper's linear ratio) or the diagnostics ``"log"``
            (1 + log r_anchor) and ``"ref_xent"`` (1 + Σ ω̂ (log π_θ − log π_ref); with
            ``anchor_ratio_to="ref"`` only).
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
    _check_tensor("logp", logp, (3,))
    _check_tensor("old_logp", old_logp, (2,))
    _check_tensor("sampled", sampled, (2,))
    _check_tensor("mask", mask, (2,))
    bt = (sampled.shape[0], sampled.shape[1])
    for name, x in (("old_logp", old_logp), ("mask", mask)):
        if tuple(x.shape) != bt:
            raise ValueError(f"{name} must be [B, T]={list(bt)} like sampled, got {tuple(x.shape)}")
    adv = _broadcast_advantages(advantages, bt)  # [B, 1] or [B, T]
    maskf = mask.to(torch.float32) if not mask.dtype.is_floating_point else mask
    valid = maskf > 0  # [B, T]

    if gathered:
        if logp_sampled is None:
            raise ValueError("logp_sampled [B, T] is required when gathered=True")
        logp_topk = logp
        _check_topk(topk_ids, topk_logp_ref, bt, None)
    else:
        _check_topk(topk_ids, topk_logp_ref, bt, logp.shape[-1])
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
    if beta > lam and (lam, beta) not in _WARNED:
        _WARNED.add((lam, beta))  # once per setting, not once per step
        logger.warning(
            "beta=%s > lam=%s: the pull term outweighs the push on wrong tokens",
            beta,
            lam,
        )

    log_ratio = (logp_sampled - old_logp).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)  # [B, T]
    ratio = torch.exp(log_ratio)  # [B, T]
    neg = (adv < 0).expand(bt)  # [B, T]

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
        log_r = (logp_topk - topk_logp_old.to(logp_topk.dtype)).clamp(
            -_MAX_LOG_RATIO, _MAX_LOG_RATIO
        )
        r_anchor = (w_hat * torch.where(in_s, log_r.exp(), 0.0)).sum(-1)  # [B, T]
    anchor = ANCHOR_FORMS[anchor_form](r_anchor, logp_topk, w_hat, ref_lp)  # [B, T]

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
        rho_clip = rho
        per_token = -adv * rho
    if dual_clip is not None:
        cap = -adv * dual_clip  # [B, 1] or [B, T]; positive where A < 0
        dual_hit = neg & (per_token > cap)  # [B, T]
        per_token = torch.where(neg, torch.min(per_token, cap), per_token)
    else:
        dual_hit = torch.zeros_like(neg)
    # padded positions may hold garbage (±inf log-probs); never let NaN leak through the mask
    per_token = torch.where(valid, per_token, 0.0)

    with torch.no_grad():
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
        stats = {
            "r_anchor_neg": float((r_anchor.detach() * neg_valid).sum() / n_neg.clamp_min(1)),
            "safe_manifold_mass": float((mass * valid).sum() / n_valid),
            "frac_sampled_in_topk": float((in_topk & valid).sum() / n_valid),
            "clip_low_frac": float(
                ((rho.detach() < 1 - eps_low) & (adv < 0) & valid).sum() / n_valid
            ),
            "clip_high_frac": float(
                ((rho.detach() > 1 + eps_high) & (adv > 0) & valid).sum() / n_valid
            ),
            "dual_clip_frac": float((dual_hit & valid).sum() / n_valid),
            "frac_neg_tokens": float(n_neg / n_valid),
            "z_underflow_tokens": float(n_under),
        }
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


def kl_on_wrong_penalty(
    logp_sampled: torch.Tensor,
    ref_logp_sampled: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    coef: float,
) -> torch.Tensor:
    """Per-token "KL-on-Wrong" penalty: the k3 KL estimator on negative-advantage tokens only.

    Baseline of the paper's experiments (form not given; k3 as TRL, our inference): coef · (exp(q − p) − (q − p) − 1) with p = log π_θ(y_t),
    q = log π_ref(y_t), applied where A < 0 and the mask is on, zero elsewhere. Add it to the
    per-token policy loss before aggregation (as TRL does for its β·KL term).

    Args:
        logp_sampled: policy log-probs of the sampled tokens, [B, T].
        ref_logp_sampled: reference log-probs of the sampled tokens, [B, T].
        advantages: [B] or [B, T].
        mask: completion mask, [B, T].
        coef: KL coefficient ≥ 0.

    Returns:
        Per-token penalty [B, T].
    """
    if coef < 0:
        raise ValueError(f"coef must be >= 0, got {coef}")
    _check_tensor("logp_sampled", logp_sampled, (2,))
    if ref_logp_sampled.shape != logp_sampled.shape or mask.shape != logp_sampled.shape:
        raise ValueError(
            "logp_sampled, ref_logp_sampled and mask must share shape [B, T], got "
            f"{tuple(logp_sampled.shape)}, {tuple(ref_logp_sampled.shape)}, {tuple(mask.shape)}"
        )
    adv = _broadcast_advantages(advantages, (logp_sampled.shape[0], logp_sampled.shape[1]))
    d = ref_logp_sampled - logp_sampled  # [B, T]
    k3 = torch.exp(d) - d - 1.0  # [B, T], >= 0
    on = (adv < 0) & (mask > 0)  # [B, T]
    return torch.where(on, coef * k3, 0.0)
