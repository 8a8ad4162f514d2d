"""MaxRL as a TRL trainer: GRPO with the MaxRL advantage (App. F of arXiv:2602.02710).

What changes compared with GRPO: only the advantage. The rewards of a prompt's N rollouts, gathered
across processes, are normalised by their mean instead of their standard deviation
(:func:`methods.maxrl.advantages.maxrl_advantages`); the PPO surrogate, generation and everything
else are TRL's. Training is on-policy (one update per batch) with no KL term, as in the paper
(Tables 5-6); the global token-mean loss (``loss_type="dapo"``) is the closest TRL match to verl's
``token-mean`` used by the official code.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch
import trl
from torch import Tensor

from common.rl import GroupAdvantageGRPOTrainer

from .advantages import ADVANTAGE_ESTIMATORS, check_binary_rewards

logger = logging.getLogger(__name__)

__all__ = ["MaxRLConfig", "MaxRLTrainer"]


@dataclass
class MaxRLConfig(trl.GRPOConfig):
    """``GRPOConfig`` plus the MaxRL fields; defaults follow the paper (App. E-F, Tables 5-6).

    Parameters:
        advantage_estimator: ``"maxrl"`` (paper), or the baselines ``"grpo"``, ``"rloo"``,
            ``"reinforce"`` through the same trainer.
        adv_eps: ε in ``(r − r̄)/(r̄ + ε)`` (1e-6, App. F / official code).
        require_binary_rewards: Reject summed rewards outside {0, 1} (MaxRL is binary-only, §2).
        zero_reward_on_truncation: Give reward 0 to completions that hit ``max_completion_length``
            without EOS (the SmolLM/GSM8K runs do this).
    """

    advantage_estimator: str = field(
        default="maxrl", metadata={"help": "One of 'maxrl', 'grpo', 'rloo', 'reinforce'."}
    )
    adv_eps: float = field(default=1e-6, metadata={"help": "ε of the advantage denominator."})
    require_binary_rewards: bool = field(
        default=True, metadata={"help": "Raise if summed rewards are not in {0, 1}."}
    )
    zero_reward_on_truncation: bool = field(
        default=False, metadata={"help": "Reward 0 for completions truncated at max length."}
    )
    beta: float = field(default=0.0, metadata={"help": "KL coefficient; 0 in the paper."})
    loss_type: str = field(default="dapo", metadata={"help": "Global token mean, as verl."})

    def __post_init__(self):
        if self.advantage_estimator not in ADVANTAGE_ESTIMATORS:
            raise ValueError(
                f"advantage_estimator must be one of {sorted(ADVANTAGE_ESTIMATORS)}, "
                f"got {self.advantage_estimator!r}"
            )
        if not self.adv_eps > 0:
            raise ValueError(f"adv_eps must be > 0, got {self.adv_eps}")
        if self.adv_eps > 1e-2:
            logger.warning("adv_eps=%g > 0.01 biases the 1/pass-rate weight", self.adv_eps)
        super().__post_init__()
        if self.num_iterations > 1:
            logger.warning(
                "num_iterations=%d > 1: MaxRL's unbiasedness (Theorem 2) is derived on-policy; "
                "importance ratios change the estimator",
                self.num_iterations,
            )


class MaxRLTrainer(GroupAdvantageGRPOTrainer):
    """GRPO with the MaxRL advantage (or a baseline estimator), grouped after the gather.

    Only :meth:`compute_advantages` is overridden. The estimator is chosen by
    ``args.advantage_estimator``; ``args`` must be a :class:`MaxRLConfig`.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, MaxRLConfig):
            raise TypeError(f"args must be a MaxRLConfig, got {type(self.args).__name__}")

    def compute_advantages(self, rewards: Tensor, inputs: dict) -> Tensor:
        """``[B, N]`` gathered rewards -> ``[B, N]`` advantages of the selected estimator."""
        cfg = self.args
        if cfg.zero_reward_on_truncation:
            eos = self.processing_class.eos_token_id
            truncated = ~(inputs["completion_ids"] == eos).any(dim=1)  # [b·N], local
            truncated = self.accelerator.gather(truncated).view_as(rewards)  # [B, N]
            rewards = rewards.masked_fill(truncated, 0.0)
        if torch.isnan(rewards).any():
            raise ValueError(
                "some completions could not be scored (reward None for every function)"
            )
        if cfg.advantage_estimator == "maxrl":
            if cfg.require_binary_rewards:
                check_binary_rewards(rewards)
            return ADVANTAGE_ESTIMATORS["maxrl"](rewards, eps=cfg.adv_eps, require_binary=False)
        if cfg.advantage_estimator == "grpo":
            return ADVANTAGE_ESTIMATORS["grpo"](rewards, eps=cfg.adv_eps)
        return ADVANTAGE_ESTIMATORS[cfg.advantage_estimator](rewards)
