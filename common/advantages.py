"""Group-relative advantages: how one prompt's ``N`` rewards become ``N`` advantages.

- :func:`group_advantages`: GRPO's plain recipe, ``(r_i − mean r) / (std r + eps)`` within each
  group (Shao et al. 2024, DeepSeekMath §4.1.2, outcome supervision), or the centred rewards only
  (``scale=False``, the Dr. GRPO advantage, Liu et al. 2025). The toys and methods that form advantages by
  hand use it.
- :func:`trl_group_advantages`: TRL 1.16's advantage as a pure function (every ``scale_rewards``
  and ``multi_objective_aggregation`` value, NaN rewards left out), the default hook of
  :class:`common.rl.GroupAdvantageGRPOTrainer`.

Shapes: B prompts (groups), N completions per prompt, F reward functions.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["group_advantages", "trl_group_advantages"]


def group_advantages(
    rewards: Tensor, eps: float = 1e-6, ddof: int = 1, scale: bool = True
) -> Tensor:
    """GRPO's group-relative advantage over the last dimension (DeepSeekMath §4.1.2):
    ``A_i = (r_i − mean_j r_j) / (std_j r_j + eps)``.

    Args:
        rewards: ``[..., N]`` rewards, one group of ``N`` completions per leading index.
        eps: added to the standard deviation.
        ddof: 1 for the unbiased (Bessel) standard deviation (TRL, verl for LLMs), 0 for the
            population one.
        scale: False returns the centred rewards ``r_i − mean_j r_j`` (no division; Dr. GRPO).

    Returns:
        ``[..., N]`` advantages.

    Raises:
        ValueError: ``rewards`` has no dimension, fewer than 2 completions per group, or ``ddof``
            is not 0 or 1.
    """
    if rewards.dim() < 1 or rewards.size(-1) < 2:
        raise ValueError(
            f"rewards must have shape [..., N] with N >= 2, got {tuple(rewards.shape)}"
        )
    if ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 or 1, got {ddof}")
    centred = rewards - rewards.mean(-1, keepdim=True)  # [..., N]
    if not scale:
        return centred
    return centred / (rewards.std(-1, keepdim=True, correction=ddof) + eps)  # [..., N]


def _nanstd(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Unbiased standard deviation ignoring NaNs (``trl.trainer.utils.nanstd``)."""
    if dim is None:
        x, dim = x.reshape(-1), 0
        keepdim = False
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    count = (~torch.isnan(x)).sum(dim=dim, keepdim=True)
    var = torch.nanmean((x - mean) ** 2, dim=dim, keepdim=True) * count / (count - 1)
    std = var.sqrt()
    return std if keepdim else std.squeeze(dim)


def trl_group_advantages(
    rewards: Tensor,
    eps: float = 1e-4,
    scale: bool | str = True,
    rewards_per_func: Tensor | None = None,
    reward_weights: Tensor | None = None,
    aggregation: str = "sum_then_normalize",
) -> Tensor:
    """TRL's advantage, as a pure function (GRPO, Shao et al. 2024; trl 1.16 ``grpo_trainer.py``).

    ``aggregation="sum_then_normalize"`` (TRL's default): ``A_i = (r_i − mean r) / (std + eps)``
    with the group mean, and the std of the group (``scale="group"`` or True), of the whole batch
    (``scale="batch"``) or no division (``scale="none"`` or False). The standard deviation is the
    unbiased (Bessel) one and ``eps = 1e-4``, as in trl 1.16.

    ``aggregation="normalize_then_sum"`` (GDPO): each reward function is first normalised within
    its group, ``(r_k − mean_k) / (std_k + eps)``; the weighted sum is then normalised over the
    whole batch (mean and std of all ``B·N`` values), whatever ``scale`` says, as TRL does.

    NaN rewards (unscorable completions) are left out of the statistics and get advantage 0.

    Args:
        rewards: ``[B, N]`` summed (weighted) rewards, one row per prompt group.
        eps: Added to the standard deviation.
        scale: ``"group"``/True, ``"batch"`` or ``"none"``/False (TRL's ``scale_rewards``).
        rewards_per_func: ``[B, N, F]`` raw rewards per function; needed by ``normalize_then_sum``.
        reward_weights: ``[F]`` weights (default all ones); used by ``normalize_then_sum``.
        aggregation: TRL's ``multi_objective_aggregation``.

    Returns:
        ``[B, N]`` advantages.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must have shape [B, N], got {tuple(rewards.shape)}")
    scale = {True: "group", False: "none"}.get(scale, scale) if isinstance(scale, bool) else scale
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be 'group', 'batch' or 'none' (or a bool), got {scale!r}")
    n = rewards.size(1)
    if aggregation == "sum_then_normalize":
        mean = torch.nanmean(rewards, dim=1, keepdim=True)  # [B, 1]
        adv = rewards - mean  # [B, N]
        if scale == "group":
            std = _nanstd(rewards, dim=1, keepdim=True) if n > 1 else torch.zeros_like(mean)
            adv = adv / (std + eps)
        elif scale == "batch":
            std = _nanstd(rewards) if rewards.numel() > 1 else torch.zeros((), dtype=rewards.dtype)
            adv = adv / (std + eps)
    elif aggregation == "normalize_then_sum":
        if rewards_per_func is None or rewards_per_func.shape[:2] != rewards.shape:
            raise ValueError(
                "aggregation='normalize_then_sum' needs rewards_per_func of shape [B, N, F] "
                f"matching rewards {tuple(rewards.shape)}, got "
                f"{None if rewards_per_func is None else tuple(rewards_per_func.shape)}"
            )
        f = rewards_per_func.size(2)
        w = torch.ones(f) if reward_weights is None else reward_weights
        w = w.to(rewards_per_func.device, rewards_per_func.dtype)
        mean_k = torch.nanmean(rewards_per_func, dim=1, keepdim=True)  # [B, 1, F]
        std_k = (
            _nanstd(rewards_per_func, dim=1, keepdim=True) if n > 1 else torch.zeros_like(mean_k)
        )
        summed = (((rewards_per_func - mean_k) / (std_k + eps)) * w).nansum(dim=2)  # [B, N]
        summed[torch.isnan(rewards_per_func).all(dim=2)] = torch.nan
        std = _nanstd(summed) if summed.numel() > 1 else torch.zeros((), dtype=summed.dtype)
        adv = (summed - torch.nanmean(summed)) / (std + eps)
    else:
        raise ValueError(
            f"aggregation must be 'sum_then_normalize' or 'normalize_then_sum', got {aggregation!r}"
        )
    return torch.nan_to_num(adv, nan=0.0)
