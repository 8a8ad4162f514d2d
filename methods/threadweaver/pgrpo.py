"""P-GRPO: rewards, mean-centred group advantages and the unit-broadcast loss (§5, Alg. 1, App. A).

* Reward (Eq. 5-8): ``r = 1{correct} + 1{correct}·min(ρ·η, ρ_clip)`` with ρ = 0.5, ρ_clip = 0.2.
* Advantage (Eq. 9): ``A_{p,i} = r_{p,i} − mean_j r_{p,j}`` (no division by the group std).
* Loss (Eq. 4): the trajectory advantage is broadcast to every completion token of every unit,
  normalised by the number of completion tokens in the batch. Because
  ``log π(τ) = Σ_m log π(comp_m | cont_m)``, this is REINFORCE-with-baseline on the whole trajectory
  (App. A.2-A.3).

Shape letters: G prompt groups, k rollouts per prompt, R unit rows, T completion tokens.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Literal

import torch

from common.advantages import group_advantages as _grpo_advantages
from common.tasks import extract_boxed

logger = logging.getLogger(__name__)

__all__ = ["extract_last_boxed", "group_advantages", "is_correct", "pgrpo_loss", "pgrpo_reward"]


extract_last_boxed = extract_boxed
"""Content of the last ``\\boxed{...}`` (balanced braces) or None (§6.1 fn. 4): ``common.tasks``'s."""


def is_correct(response: str, gold: str | Sequence[str]) -> bool:
    """Grade the *last* ``\\boxed{}`` of ``response`` against ``gold`` with math-verify.

    Source: paper Section 6.1 (footnote 4: no ``\boxed`` means incorrect); official
    ``threadweaver_rl/deepscaler/rewards/math_rewardv2.py``.

    A response without ``\\boxed`` or that fails to parse is incorrect (never an exception).

    Raises:
        ValueError: if ``gold`` is empty.
    """
    golds = [gold] if isinstance(gold, str) else list(gold)
    if not golds or any(not str(g).strip() for g in golds):
        raise ValueError(f"gold must be a non-empty answer, got {gold!r}")
    pred = extract_last_boxed(response)
    if pred is None:
        return False
    try:
        from math_verify import parse, verify

        p = parse(f"\\boxed{{{pred}}}")
        return any(verify(parse(f"\\boxed{{{g}}}"), p) for g in golds)
    except Exception:  # noqa: BLE001 - grader failures count as incorrect (§6.1 fn. 4)
        norm = lambda s: re.sub(r"\s+", "", str(s))  # noqa: E731
        return any(norm(pred) == norm(g) for g in golds)


def pgrpo_reward(
    correct: bool,
    eta: float,
    rho: float = 0.5,
    rho_clip: float = 0.2,
    variant: Literal["paper", "repo"] = "paper",
    *,
    has_parallel: bool = False,
    parallel_reward: float = 0.0,
    format_ok: bool = True,
    format_error_reward: float | None = None,
) -> float:
    """Correctness plus clipped acceleration reward (Eq. 5-7), with the official code's options.

    ``paper``: ``1{c} + 1{c}·min(ρ·η, ρ_clip)`` (bonus ≤ 0.2, saturating at η = 0.4).
    ``repo`` (official code defaults, ``deepscaler/rewards/math_rewardv2.calculate_reward`` with
    ``acceleration_ratio_reward_factor=ρ``, ``acceleration_ratio_clip_max=ρ_clip``):
    ``+1 + ρ·min(η, ρ_clip)`` if correct, −1 otherwise.
    A NaN ``η`` (empty response) counts as 0.

    Official options (off by default, as in the paper):

    * ``parallel_reward`` (official ``parallel_rewardv2``): added when the answer is correct and the
      trajectory has at least one ``<Parallel>`` block (``has_parallel``).
    * ``format_error_reward`` (official ``format_error_reward`` / ``parallel_format_error_reward``):
      the whole reward of a trajectory whose format check failed (``format_ok=False``).

    Raises:
        ValueError: ``rho <= 0``, ``rho_clip < 0``, ``parallel_reward < 0`` or an unknown variant.
    """
    if rho <= 0:
        raise ValueError(f"rho must be > 0, got {rho}")
    if rho_clip < 0:
        raise ValueError(f"rho_clip must be >= 0, got {rho_clip}")
    if parallel_reward < 0:
        raise ValueError(f"parallel_reward must be >= 0, got {parallel_reward}")
    eta = 0.0 if eta != eta else float(eta)
    variants = {
        "paper": lambda: (1.0 + min(rho * eta, rho_clip)) if correct else 0.0,
        "repo": lambda: (1.0 + rho * min(eta, rho_clip)) if correct else -1.0,
    }
    if variant not in variants:
        raise ValueError(f"variant must be one of {sorted(variants)}, got {variant!r}")
    if format_error_reward is not None and not format_ok:
        return float(format_error_reward)
    bonus = parallel_reward if (correct and has_parallel) else 0.0
    return variants[variant]() + bonus


def group_advantages(
    rewards: torch.Tensor,
    norm: Literal["mean", "std"] = "mean",
    eps: float = 1e-6,
    zero_threshold: float | None = None,
) -> torch.Tensor:
    """Group-relative advantages (Eq. 9; ``norm="std"`` is standard GRPO, Eq. 1, for ablation).

    Args:
        rewards: ``[G, k]`` rewards of k rollouts for each of G prompts.
        norm: ``"mean"`` -> ``r − μ``; ``"std"`` -> ``(r − μ) / (σ + eps)`` with σ the *sample*
            std (Bessel-corrected), as the official ``compute_grpo_outcome_normalized_scores``
            (``threadweaver_rl/verl/trainer/ppo/core_algos.py``, ``torch.std``) and TRL.
        eps: added to σ.
        zero_threshold: the official ``algorithm.grpo_zero_adv_if_all_ge_le``: a group whose
            rewards are all ``>=`` or all ``<=`` this value gets advantage 0 (None = off, the
            paper's setting).

    Raises:
        ValueError: not 2-D, ``k < 2`` (the centred advantage would be identically 0), bad ``norm``.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be 2-D [G, k], got shape {tuple(rewards.shape)}")
    if rewards.shape[1] < 2:
        raise ValueError(
            f"need k >= 2 rollouts per prompt for group advantages, got {rewards.shape[1]}"
        )
    if norm not in ("mean", "std"):
        raise ValueError(f"norm must be 'mean' or 'std', got {norm!r}")
    adv = _grpo_advantages(rewards, eps=eps, scale=norm == "std")  # [G, k], Bessel std
    if zero_threshold is not None:
        thr = float(zero_threshold)
        flat = (rewards >= thr).all(dim=1, keepdim=True) | (rewards <= thr).all(dim=1, keepdim=True)
        adv = adv.masked_fill(flat, 0.0)  # [G, k]
    return adv


def pgrpo_loss(logp: torch.Tensor, adv: torch.Tensor, comp_mask: torch.Tensor) -> torch.Tensor:
    """Eq. 4 with one optimisation step per batch (importance ratio 1, clipping inactive).

    ``L = −(1 / Σ_R T_r) Σ_r A_r Σ_t mask[r, t] · log π[r, t]`` where each row is one unit and
    ``A_r`` its trajectory's advantage.

    Args:
        logp: ``[R, T]`` log-probabilities of the completion tokens of each unit row.
        adv: ``[R]`` broadcast trajectory advantages.
        comp_mask: ``[R, T]`` 1 on completion tokens.
    """
    if logp.shape != comp_mask.shape or logp.dim() != 2:
        raise ValueError(
            f"logp {tuple(logp.shape)} and comp_mask {tuple(comp_mask.shape)} must be equal [R, T]"
        )
    if adv.shape != logp.shape[:1]:
        raise ValueError(f"adv must be [R]={logp.shape[0]}, got shape {tuple(adv.shape)}")
    mask = comp_mask.to(logp.dtype)
    n_tok = mask.sum().clamp(min=1)
    return -(adv.to(logp.dtype).unsqueeze(1) * logp * mask).sum() / n_tok
