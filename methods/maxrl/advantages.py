"""Group advantages for binary-reward RL: MaxRL and the baselines it is compared with.

Implements the advantage form used to train LLMs in *Maximum Likelihood Reinforcement Learning*
(Tajwar et al., 2026, arXiv:2602.02710), App. F and Alg. 1: the centred reward of each rollout is
divided by the group's mean reward (its empirical pass rate) instead of the group's standard
deviation, which turns the REINFORCE/GRPO gradient into an unbiased estimate of the truncated
maximum-likelihood gradient (§4, Theorem 2). GRPO, RLOO and REINFORCE-with-baseline advantages are
given in the same form for comparison.

Shapes: B prompts (groups), N rollouts per prompt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from torch import Tensor

logger = logging.getLogger(__name__)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "check_binary_rewards",
    "grouped",
    "grpo_advantages",
    "maxrl_advantages",
    "reinforce_advantages",
    "rloo_advantages",
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
    """Raise ``ValueError`` unless every reward is exactly 0 or 1 (MaxRL is derived for binary rewards, §2)."""
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
    """GRPO advantage ``(r_i − r̄) / (std(r) + ε)`` (verl uses ddof=1 for LLMs, ddof=0 for ImageNet).

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
    mean = rewards.mean(dim=1, keepdim=True)  # [B, 1]
    std = rewards.std(dim=1, keepdim=True, correction=ddof)  # [B, 1]
    return (rewards - mean) / (std + eps)  # [B, N]


def rloo_advantages(rewards: Tensor) -> Tensor:
    """RLOO advantage ``r_i − mean_{j≠i} r_j`` (leave-one-out baseline)."""
    _check_grouped(rewards)
    n = rewards.size(1)
    loo = (rewards.sum(dim=1, keepdim=True) - rewards) / (n - 1)  # [B, N]
    return rewards - loo


def reinforce_advantages(rewards: Tensor) -> Tensor:
    """REINFORCE with the group-mean baseline, ``r_i − r̄`` (the ImageNet experiment, App. D)."""
    _check_grouped(rewards)
    return rewards - rewards.mean(dim=1, keepdim=True)  # [B, N]


ADVANTAGE_ESTIMATORS: dict[str, Callable[..., Tensor]] = {
    "maxrl": maxrl_advantages,
    "grpo": grpo_advantages,
    "rloo": rloo_advantages,
    "reinforce": reinforce_advantages,
}
"""Named estimators: ``ADVANTAGE_ESTIMATORS[name](rewards[B, N]) -> [B, N]``."""


def grouped(rewards_flat: Tensor, num_generations: int, prompt_ids: Tensor | None = None) -> Tensor:
    """Reshape flat rewards ``[B·N]`` into groups ``[B, N]``, checking the layout.

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
