"""Group advantages for binary-reward RL: MaxRL and the baselines it is compared with.

Implements the advantage form used to train LLMs in *Maximum Likelihood Reinforcement Learning*
(Tajwar et al., 2026, arXiv:2602.02710), App. F and Alg. 1: the centred reward of each rollout is
divided by the group's mean reward (its empirical pass rate) instead of the group's standard
deviation, which turns the REINFORCE/GRPO gradient into an unbiased estimate of the truncated
maximum-likelihood gradient (§4, Theorem 2). The baselines of the paper's Tables 3-4 are given in the
same form: GRPO, RLOO, REINFORCE-with-baseline, PKPO (pass@k policy optimisation), GRPO with
differential smoothing and SELF (GRPO restricted to prompts the greedy answer fails), each as the
official code computes it (``verl/trainer/ppo/core_algos.py`` in tajwarfahim/maxrl). The entropy-bonus
GRPO baseline changes the loss, not the advantage (TRL's ``entropy_coef``).

Shapes: B prompts (groups), N rollouts per prompt.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import torch
from torch import Tensor

from common.advantages import group_advantages as _group_advantages

logger = logging.getLogger(__name__)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "check_binary_rewards",
    "differential_smoothing_advantages",
    "grouped",
    "grpo_advantages",
    "maxrl_advantages",
    "pkpo_advantages",
    "reinforce_advantages",
    "rloo_advantages",
    "self_advantages",
]


def _check_grouped(rewards: Tensor, min_n: int = 2) -> None:
    if not isinstance(rewards, Tensor):
        raise TypeError(f"rewards must be a torch.Tensor, got {type(rewards).__name__}")
    if rewards.dim() != 2:
        raise ValueError(f"rewards must have shape [B, N], got {tuple(rewards.shape)}")
    if rewards.size(1) < min_n:
        raise ValueError(
            f"rewards must have N >= {min_n} rollouts per prompt, got N={rewards.size(1)} "
            "(with one rollout the group baseline equals the reward and the gradient is zero)"
        )
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards contain NaN or inf")


def check_binary_rewards(rewards: Tensor) -> None:
    """Raise ``ValueError`` unless every reward is exactly 0 or 1 (MaxRL is derived for binary rewards, §2).

    Source: paper Section 2 (binary verifier reward r ∈ {0, 1}); raising on other values is our
    choice.
    """
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards contain NaN or inf; MaxRL needs binary rewards in {0, 1}")
    bad = rewards[(rewards != 0) & (rewards != 1)]
    if bad.numel():
        raise ValueError(
            f"MaxRL needs binary rewards in {{0, 1}}, got e.g. {bad[0].item():g}; the 1/mean(r) "
            "weight is only meaningful for a pass rate (threshold or binarise the reward first)"
        )


def _check_eps(eps: float) -> None:
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    if eps > 1e-2:
        logger.warning("eps=%g > 0.01 biases the 1/pass-rate weight for small pass rates", eps)


def maxrl_advantages(rewards: Tensor, eps: float = 1e-6, require_binary: bool = True) -> Tensor:
    """MaxRL advantage (App. F; Alg. 1 up to the constant 1/N).

    ``A_i = (r_i − r̄) / (r̄ + ε)`` with ``r̄`` the group mean; all-fail groups (r̄ = 0) get 0
    (Alg. 1 drops them), all-success groups get 0 because the numerator vanishes. For any group
    with ``r̄ > 0`` the advantages sum to zero. With N rollouts this is unbiased for the gradient of
    the order-(N−1) truncated likelihood (see :func:`methods.maxrl.theory.effective_order`).

    Args:
        rewards: ``[B, N]`` rewards in {0, 1}.
        eps: Denominator guard, 1e-6 as in the official code.
        require_binary: Reject rewards outside {0, 1}.

    Returns:
        ``[B, N]`` advantages.

    Raises:
        ValueError: non-binary rewards (if required), N < 2, non-finite rewards, eps <= 0.
    """
    _check_grouped(rewards)
    _check_eps(eps)
    if require_binary:
        check_binary_rewards(rewards)
    mean = rewards.mean(dim=1, keepdim=True)  # [B, 1]
    adv = (rewards - mean) / (mean + eps)  # [B, N]
    return torch.where(mean > 0, adv, torch.zeros_like(adv))  # all-fail groups: 0


def grpo_advantages(rewards: Tensor, eps: float = 1e-6, ddof: int = 1) -> Tensor:
    """GRPO advantage ``(r_i − r̄) / (std(r) + ε)`` (verl uses ddof=1 for LLMs, ddof=0 for ImageNet);
    :func:`common.advantages.group_advantages` after this module's input checks.

    Source: paper App. F; official ``verl/trainer/ppo/core_algos.py``
    (``compute_grpo_outcome_advantage``, ``torch.std``).

    Args:
        rewards: ``[B, N]`` rewards.
        eps: Added to the standard deviation.
        ddof: 1 for the unbiased, 0 for the population standard deviation.

    Returns:
        ``[B, N]`` advantages.
    """
    _check_grouped(rewards)
    if ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 or 1, got {ddof}")
    return _group_advantages(rewards, eps=eps, ddof=ddof)  # [B, N]


def rloo_advantages(rewards: Tensor) -> Tensor:
    """RLOO advantage ``r_i − mean_{j≠i} r_j`` (leave-one-out baseline).

    Source: official ``verl/trainer/ppo/core_algos.py`` (``compute_rloo_outcome_advantage``), the
    RLOO baseline of the paper's tables.
    """
    _check_grouped(rewards)
    n = rewards.size(1)
    loo = (rewards.sum(dim=1, keepdim=True) - rewards) / (n - 1)  # [B, N]
    return rewards - loo


def reinforce_advantages(rewards: Tensor) -> Tensor:
    """REINFORCE with the group-mean baseline, ``r_i − r̄`` (the ImageNet experiment, App. D)."""
    _check_grouped(rewards)
    return rewards - rewards.mean(dim=1, keepdim=True)  # [B, N]


def pkpo_advantages(rewards: Tensor, k: int) -> Tensor:
    """PKPO advantage for binary rewards with a leave-one-out baseline (Walder & Karkhanis, 2025).

    The unbiased pass@k gradient estimator of *Pass@k Policy Optimization* as the MaxRL authors run
    it (``compute_pkpo_outcome_advantage`` in the official ``core_algos.py``): with c correct out of N,
    each correct rollout gets the weight ``s = C(N−c, k−1) / C(N−1, k−1)`` (0 when N−c < k−1) and
    each wrong one 0; then the leave-one-out baseline ``A_i = s_i − mean_{j≠i} s_j``
    ``= (N·s_i − Σ_j s_j) / (N − 1)``. With k = 1 this is RLOO.

    Args:
        rewards: ``[B, N]`` rewards in {0, 1} (the official code rounds them).
        k: The pass@k order, 1 <= k <= N (the paper's tables use k = 16, App. E.2.2).

    Returns:
        ``[B, N]`` advantages.

    Raises:
        ValueError: non-binary rewards, N < 2, or k outside [1, N].
    """
    _check_grouped(rewards)
    check_binary_rewards(rewards)
    n = rewards.size(1)
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    if not 1 <= k <= n:
        raise ValueError(f"k must lie in [1, N={n}], got {k}")
    c = rewards.sum(dim=1, keepdim=True)  # [B, 1]
    m = n - c  # [B, 1] number of failures
    # log C(m, k−1) − log C(N−1, k−1), in lgamma form; C(m, k−1) = 0 when m < k−1.
    log_num = torch.lgamma(m + 1) - math.lgamma(k) - torch.lgamma((m - k + 2).clamp(min=1))
    log_den = math.lgamma(n) - math.lgamma(k) - math.lgamma(n - k + 1)
    weight = torch.where(m >= k - 1, torch.exp(log_num - log_den), torch.zeros_like(m))  # [B, 1]
    score = weight * rewards  # [B, N]
    return (n * score - score.sum(dim=1, keepdim=True)) / (n - 1)  # [B, N]


def differential_smoothing_advantages(
    rewards: Tensor,
    seq_logps: Tensor,
    correct_coef: float = 0.05,
    incorrect_coef: float = 0.05,
    eps: float = 1e-6,
) -> Tensor:
    """GRPO with differential smoothing (the paper's "Differential Smoothing" baseline, App. E.2.2).

    As the official ``compute_dsgrpo_outcome_advantage``: the GRPO advantage with the *population*
    standard deviation, ``(r_i − r̄) / (std₀(r) + ε)``, minus ``γ_c · ℓ_i`` on correct rollouts
    (r_i > 0) and plus ``γ_w · ℓ_i`` on wrong ones, where ``ℓ_i`` is the mean per-token log-probability
    of rollout i under the sampling (old) policy. Since ℓ_i < 0, correct rollouts that the policy
    already finds likely gain less, and unlikely wrong ones are pushed down less.

    Args:
        rewards: ``[B, N]`` rewards (correct means > 0).
        seq_logps: ``[B, N]`` mean per-token log-probability of each rollout (old policy, detached).
        correct_coef: γ_c (0.05 in the paper's runs, App. E.2.2).
        incorrect_coef: γ_w (0.05).
        eps: Added to the standard deviation.

    Returns:
        ``[B, N]`` advantages.

    Raises:
        ValueError: shapes differ, N < 2, or non-finite inputs.
    """
    _check_grouped(rewards)
    if not isinstance(seq_logps, Tensor) or seq_logps.shape != rewards.shape:
        raise ValueError(
            f"seq_logps must be a tensor of shape {tuple(rewards.shape)} (as rewards), got "
            f"{getattr(seq_logps, 'shape', type(seq_logps))}"
        )
    if not torch.isfinite(seq_logps).all():
        raise ValueError("seq_logps contain NaN or inf")
    mean = rewards.mean(dim=1, keepdim=True)  # [B, 1]
    std = rewards.std(dim=1, keepdim=True, correction=0)  # [B, 1]
    adv = (rewards - mean) / (std + eps)  # [B, N]
    correct = (rewards > 0).to(adv.dtype)  # [B, N]
    return adv - correct_coef * correct * seq_logps + incorrect_coef * (1 - correct) * seq_logps


def self_advantages(rewards: Tensor, greedy_rewards: Tensor, eps: float = 1e-6) -> Tensor:
    """SELF baseline (arXiv:2510.02230) as the official ``compute_self_paper_outcome_advantage``.

    Source: official ``verl/trainer/ppo/core_algos.py`` (``compute_self_paper_outcome_advantage``),
    the paper's SELF maze baseline.

    The GRPO advantage ``(r_i − r̄) / (std(r) + ε)`` (unbiased std), set to 0 for every rollout whose
    prompt the greedy (temperature-0) answer already solves (greedy reward == 1), so that training
    concentrates on the prompts the policy does not yet solve.

    Args:
        rewards: ``[B, N]`` rewards of the sampled rollouts.
        greedy_rewards: ``[B]`` reward of each prompt's greedy answer, or ``[B, N]`` (one per
            rollout row, as the official code stores it).
        eps: Added to the standard deviation.

    Returns:
        ``[B, N]`` advantages.

    Raises:
        ValueError: shapes that do not match ``rewards``.
    """
    adv = grpo_advantages(rewards, eps=eps, ddof=1)  # [B, N]
    if not isinstance(greedy_rewards, Tensor):
        raise TypeError(
            f"greedy_rewards must be a torch.Tensor, got {type(greedy_rewards).__name__}"
        )
    if greedy_rewards.shape == rewards.shape[:1]:
        greedy_rewards = greedy_rewards[:, None].expand_as(rewards)  # [B, N]
    if greedy_rewards.shape != rewards.shape:
        raise ValueError(
            f"greedy_rewards must have shape [B]={tuple(rewards.shape[:1])} or [B, N]="
            f"{tuple(rewards.shape)}, got {tuple(greedy_rewards.shape)}"
        )
    return adv.masked_fill(greedy_rewards == 1, 0.0)


ADVANTAGE_ESTIMATORS: dict[str, Callable[..., Tensor]] = {
    "maxrl": maxrl_advantages,
    "grpo": grpo_advantages,
    "rloo": rloo_advantages,
    "reinforce": reinforce_advantages,
    "pkpo": pkpo_advantages,
    "differential_smoothing": differential_smoothing_advantages,
    "self": self_advantages,
}
"""Named estimators: ``ADVANTAGE_ESTIMATORS[name](rewards[B, N], **extra) -> [B, N]``; ``pkpo``
needs ``k``, ``differential_smoothing`` the rollouts' ``seq_logps`` and ``self`` the
``greedy_rewards`` (the trainer supplies them)."""


def grouped(rewards_flat: Tensor, num_generations: int, prompt_ids: Tensor | None = None) -> Tensor:
    """Reshape flat rewards ``[B·N]`` into groups ``[B, N]``, checking the layout.

    Source: engineering (TRL's flat layout), not in the paper.

    TRL lays out the N generations of a prompt contiguously after the cross-process gather; if
    ``prompt_ids`` (``[B·N]``, one id per completion) are given, they must be constant within each
    block of N.

    Raises:
        ValueError: length not divisible by ``num_generations`` or non-contiguous prompt ids.
    """
    if num_generations < 1:
        raise ValueError(f"num_generations must be >= 1, got {num_generations}")
    if rewards_flat.dim() != 1 or rewards_flat.numel() % num_generations:
        raise ValueError(
            f"rewards_flat must be 1-D with length divisible by num_generations={num_generations}, "
            f"got shape {tuple(rewards_flat.shape)}"
        )
    if prompt_ids is not None:
        ids = torch.as_tensor(prompt_ids).view(-1, num_generations)  # [B, N]
        if ids.size(0) * num_generations != rewards_flat.numel():
            raise ValueError("prompt_ids must have one id per reward")
        if (ids != ids[:, :1]).any():
            raise ValueError(
                "generations of a prompt are not contiguous in blocks of num_generations; "
                "group after the gather, in TRL's order"
            )
    return rewards_flat.view(-1, num_generations)  # [B, N]
