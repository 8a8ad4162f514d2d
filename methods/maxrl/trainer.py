"""MaxRL as a TRL trainer: GRPO with the MaxRL advantage (App. F of arXiv:2602.02710).

What changes compared with GRPO: only the advantage. The rewards of a prompt's N rollouts, gathered
across processes, are normalised by their mean instead of their standard deviation
(:func:`methods.maxrl.advantages.maxrl_advantages`); the PPO surrogate, generation and everything
else are TRL's. Training is on-policy (one update per batch) with no KL term, as in the paper
(Tables 5-6). The official code averages the loss over the tokens of each 4-sequence micro-batch
(verl ``token-mean`` with ``ppo_micro_batch_size_per_gpu=4``, ``qwen3_experiments/
run_qwen3_training.sh``); TRL's ``loss_type="bnpo"`` with ``per_device_train_batch_size=4`` is the same
reduction, and the paper preset sets both.

The baselines of the paper's Tables 3-4 run through the same trainer: ``advantage_estimator`` in
``grpo``, ``rloo``, ``pkpo`` (``pkpo_k``), ``differential_smoothing`` (``ds_correct_coef``,
``ds_incorrect_coef``; the trainer scores each rollout's mean log-probability under the sampling
policy) and ``self`` (the trainer decodes each prompt greedily and scores it with the reward
functions); GRPO with an entropy bonus is ``advantage_estimator="grpo"`` with TRL's ``entropy_coef``
(a per-micro-batch token mean of the entropy, as verl's ``entropy_coeff``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch
import trl
from torch import Tensor

from common.config import CheckpointingNames
from common.rl import GroupAdvantageGRPOTrainer

from .advantages import ADVANTAGE_ESTIMATORS, check_binary_rewards

logger = logging.getLogger(__name__)

__all__ = ["MaxRLConfig", "MaxRLTrainer", "truncated_at_max_length"]


def truncated_at_max_length(
    completion_ids: Tensor, eos_token_id: int, max_completion_length: int
) -> Tensor:
    """Which completions the official SmolLM runs give reward 0 (``zero_reward_on_max_response_length``).

    The official reward manager (``verl/workers/reward_manager/multi_thread_naive.py``) zeroes a
    response whose valid length (tokens up to and including the first EOS) reaches the maximum
    response length, so an EOS written exactly at the last allowed position is zeroed too, as is a
    response without EOS.

    Args:
        completion_ids: ``[b, T]`` generated ids (padding after the first EOS).
        eos_token_id: The EOS id.
        max_completion_length: The generation limit.

    Returns:
        ``[b]`` bool, True where the reward is zeroed.
    """
    if completion_ids.dim() != 2:
        raise ValueError(f"completion_ids must be [b, T], got {tuple(completion_ids.shape)}")
    if max_completion_length < 1:
        raise ValueError(f"max_completion_length must be >= 1, got {max_completion_length}")
    is_eos = completion_ids == eos_token_id  # [b, T]
    has_eos = is_eos.any(dim=1)  # [b]
    first_eos = is_eos.int().argmax(dim=1)  # [b], 0 where there is none
    valid_len = torch.where(
        has_eos, first_eos + 1, torch.full_like(first_eos, max_completion_length)
    )
    return valid_len >= max_completion_length  # [b]


@dataclass
class MaxRLConfig(CheckpointingNames, trl.GRPOConfig):
    """``GRPOConfig`` plus the MaxRL fields; defaults follow the paper (App. E-F, Tables 5-6).

    Parameters:
        advantage_estimator: ``"maxrl"`` (paper), or the baselines ``"grpo"``, ``"rloo"``,
            ``"reinforce"``, ``"pkpo"``, ``"differential_smoothing"``, ``"self"`` through the same
            trainer (GRPO + entropy bonus: ``"grpo"`` with TRL's ``entropy_coef``).
        adv_eps: ε in ``(r − r̄)/(r̄ + ε)`` (1e-6, App. F / official code).
        require_binary_rewards: Reject summed rewards outside {0, 1} (MaxRL is binary-only, §2).
        zero_reward_on_truncation: Give reward 0 to completions whose length including EOS reaches
            ``max_completion_length`` (the SmolLM/GSM8K runs, ``smollm/smollm.sh``).
        pkpo_k: PKPO's pass@k order (paper App. E.2.2: k = 16).
        ds_correct_coef, ds_incorrect_coef: differential smoothing's γ on correct / wrong rollouts
            (paper App. E.2.2: 0.05; official ``correct_sample_log_prob_coef`` /
            ``incorrect_sample_log_prob_coef``).
    """

    advantage_estimator: str = field(
        default="maxrl",
        metadata={
            "help": "One of 'maxrl', 'grpo', 'rloo', 'reinforce', 'pkpo', "
            "'differential_smoothing', 'self'."
        },
    )
    adv_eps: float = field(default=1e-6, metadata={"help": "ε of the advantage denominator."})
    require_binary_rewards: bool = field(
        default=True, metadata={"help": "Raise if summed rewards are not in {0, 1}."}
    )
    zero_reward_on_truncation: bool = field(
        default=False,
        metadata={"help": "Reward 0 when the length including EOS reaches max_completion_length."},
    )
    pkpo_k: int = field(
        default=16, metadata={"help": "PKPO pass@k order k <= num_generations (App. E.2.2: 16)."}
    )
    ds_correct_coef: float = field(
        default=0.05,
        metadata={"help": "Differential smoothing: γ times mean log-prob subtracted on correct."},
    )
    ds_incorrect_coef: float = field(
        default=0.05,
        metadata={"help": "Differential smoothing: γ times mean log-prob added on wrong rollouts."},
    )
    beta: float = field(default=0.0, metadata={"help": "KL coefficient; 0 in the paper."})
    loss_type: str = field(
        default="dapo",
        metadata={
            "help": "TRL loss reduction. 'dapo': one token mean over the generation batch; the "
            "official code (verl token-mean per micro-batch) is 'bnpo' with the same "
            "per_device_train_batch_size (4 for Qwen3, 64 for SmolLM), as the paper presets set."
        },
    )

    def __post_init__(self):
        if self.advantage_estimator not in ADVANTAGE_ESTIMATORS:
            raise ValueError(
                f"advantage_estimator must be one of {sorted(ADVANTAGE_ESTIMATORS)}, "
                f"got {self.advantage_estimator!r}"
            )
        if self.advantage_estimator == "pkpo" and not 1 <= self.pkpo_k <= self.num_generations:
            raise ValueError(
                f"pkpo_k must lie in [1, num_generations={self.num_generations}], got {self.pkpo_k}"
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

    Source: paper App. F (the MaxRL advantage in GRPO); wraps TRL's ``GRPOTrainer``.

    Only :meth:`compute_advantages` is overridden. The estimator is chosen by
    ``args.advantage_estimator``; ``args`` must be a :class:`MaxRLConfig`.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, MaxRLConfig):
            raise TypeError(f"args must be a MaxRLConfig, got {type(self.args).__name__}")

    def compute_advantages(self, rewards: Tensor, inputs: dict) -> Tensor:
        """``[B, N]`` gathered rewards -> ``[B, N]`` advantages of the selected estimator.

        Source: paper App. F and Algorithm 1; official ``verl/trainer/ppo/core_algos.py``.
        """
        cfg = self.args
        if cfg.zero_reward_on_truncation:
            truncated = truncated_at_max_length(
                inputs["completion_ids"],
                self.processing_class.eos_token_id,
                self.max_completion_length,
            )  # [b·N], local
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
        extra = self._ESTIMATOR_INPUTS.get(cfg.advantage_estimator, lambda s, r, i: {})(
            self, rewards, inputs
        )
        return ADVANTAGE_ESTIMATORS[cfg.advantage_estimator](rewards, **extra)

    # ----- what each baseline needs besides the rewards ----------------------------------------
    def _gathered(self, local: Tensor, rewards: Tensor) -> Tensor:
        return self.accelerator.gather(local.to(rewards.device)).view_as(rewards)  # [B, N]

    @torch.no_grad()
    def _seq_logps(self, rewards: Tensor, inputs: dict) -> Tensor:
        """``[B, N]`` mean per-token log-prob of each rollout under the current (sampling) policy."""
        mask = inputs["completion_mask"]
        chunk = self.args.per_device_train_batch_size
        parts = []
        for i in range(0, mask.size(0), chunk):
            rows = {
                key: inputs[key][i : i + chunk]
                for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
            }
            parts.append(self.per_token_logps(self.model, rows))  # [chunk, T]
        logps = torch.cat(parts)  # [b·N, T]
        seq = (logps * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)  # [b·N]
        return self._gathered(seq, rewards)

    @torch.no_grad()
    def _greedy_rewards(self, rewards: Tensor, inputs: dict) -> Tensor:
        """``[B, N]`` reward of the greedy completion of each rollout's prompt (SELF's baseline)."""
        from trl.models import unwrap_model_for_generation

        rows = inputs["trainer_inputs"]  # one dataset row per local completion
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        # one greedy decode per distinct consecutive prompt (TRL repeats each prompt N times)
        firsts = [
            i
            for i in range(len(rows))
            if i == 0 or not torch.equal(prompt_ids[i], prompt_ids[i - 1])
        ]
        with unwrap_model_for_generation(
            self.model_wrapped,
            self.accelerator,
            gather_deepspeed3_params=self.args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
        ) as model:
            out = model.generate(
                input_ids=prompt_ids[firsts],
                attention_mask=prompt_mask[firsts],
                do_sample=False,
                max_new_tokens=self.max_completion_length,
                pad_token_id=self.processing_class.pad_token_id,
            )
        completions = self.processing_class.batch_decode(
            out[:, prompt_ids.size(1) :], skip_special_tokens=True
        )
        first_rows = [rows[i] for i in firsts]
        if isinstance(first_rows[0].get("prompt"), list):  # conversational
            completions = [[{"role": "assistant", "content": c}] for c in completions]
        kwargs = {
            key: [row[key] for row in first_rows]
            for key in first_rows[0]
            if key not in ("prompt", "completion", "completion_ids")
        }
        total = torch.zeros(len(firsts), device=rewards.device)
        for func, weight in zip(self.reward_funcs, self.reward_weights.tolist(), strict=True):
            if not callable(func) or isinstance(func, torch.nn.Module):
                raise ValueError(
                    "advantage_estimator='self' needs callable reward functions (the greedy "
                    f"answer is scored in the trainer), got {type(func).__name__}"
                )
            values = func(
                prompts=[row["prompt"] for row in first_rows], completions=completions, **kwargs
            )
            values = [float("nan") if v is None else float(v) for v in values]
            total += weight * torch.tensor(values, device=rewards.device)
        # broadcast each prompt's greedy reward to its rollout rows
        is_first = torch.zeros(len(rows), dtype=torch.long, device=rewards.device)
        is_first[firsts] = 1
        owner = is_first.cumsum(0) - 1  # [b·N] index into firsts
        return self._gathered(total[owner], rewards)

    _ESTIMATOR_INPUTS = {
        "grpo": lambda self, rewards, inputs: {"eps": self.args.adv_eps},
        "pkpo": lambda self, rewards, inputs: {"k": self.args.pkpo_k},
        "differential_smoothing": lambda self, rewards, inputs: {
            "seq_logps": self._seq_logps(rewards, inputs),
            "correct_coef": self.args.ds_correct_coef,
            "incorrect_coef": self.args.ds_incorrect_coef,
            "eps": self.args.adv_eps,
        },
        "self": lambda self, rewards, inputs: {
            "greedy_rewards": self._greedy_rewards(rewards, inputs),
            "eps": self.args.adv_eps,
        },
    }
