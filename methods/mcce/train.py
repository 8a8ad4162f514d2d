"""Training rounds of the trainable model (spec §3.8, official `training/train_dpo.py`).

MCCE's round is TRL's DPO with the sigmoid loss and conservative label smoothing ε:
L = −(1−ε)·log σ(β h) − ε·log σ(−β h), h = [log πθ(y_w|x) − log π_ref(y_w|x)] − [log πθ(y_l|x) −
log π_ref(y_l|x)]. The policy continues from the previous round; the reference stays the original
model. The SFT round (on the chosen responses) is the paper's forgetting-prone baseline and the GRPO
round (scalar fitness reward) its RL baseline.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)


@dataclass
class DPORoundConfig:
    """Hyper-parameters of one preference round (spec §3.8 table; defaults are the official code's)."""

    beta: float = 0.1  # repo train_dpo.py
    label_smoothing: float = 0.1  # repo
    learning_rate: float = 1e-6  # repo; constant, no warm-up
    num_train_epochs: float = 1.0  # repo
    per_device_train_batch_size: int = 2  # repo
    gradient_accumulation_steps: int = 1  # repo
    weight_decay: float = 0.01  # repo
    adam_epsilon: float = 1e-6  # repo
    max_grad_norm: float = 1.0  # repo
    max_length: int = 2048  # repo
    bf16: bool = False  # repo: True on GPU; the toy runs fp32 on CPU
    gradient_checkpointing: bool = False  # repo: True at 7B scale
    min_pairs: int = 2  # spec §8: fewer pairs -> the round is skipped
    # GRPO baseline round (spec §9.9; not in the official code)
    rl_num_generations: int = 4  # spec §9.9: 4 samples per prompt
    rl_beta: float = 0.04  # spec §9.9: KL coefficient
    rl_max_completion_length: int = 128  # repo local sampling: 128 new tokens
    rl_temperature: float = 0.7  # repo local sampling
    rl_top_p: float = 0.95  # repo local sampling
    rl_invalid_reward: float = -0.1  # spec §9.9: reward of a response with no valid molecule

    def __post_init__(self) -> None:
        if self.beta <= 0:
            raise ValueError(f"beta must be > 0, got {self.beta}")
        if not 0.0 <= self.label_smoothing < 0.5:
            raise ValueError(f"label_smoothing must be in [0, 0.5), got {self.label_smoothing}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.rl_num_generations < 2:
            raise ValueError(f"rl_num_generations must be >= 2, got {self.rl_num_generations}")
        if self.per_device_train_batch_size < 1:
            raise ValueError(
                f"per_device_train_batch_size must be >= 1, got {self.per_device_train_batch_size}"
            )


def _common_args(cfg: DPORoundConfig, out_dir: str) -> dict[str, Any]:
    import torch

    return {
        "output_dir": out_dir,
        "learning_rate": cfg.learning_rate,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "num_train_epochs": cfg.num_train_epochs,
        "per_device_train_batch_size": cfg.per_device_train_batch_size,
        "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
        "weight_decay": cfg.weight_decay,
        "adam_epsilon": cfg.adam_epsilon,
        "max_grad_norm": cfg.max_grad_norm,
        "bf16": cfg.bf16,
        "gradient_checkpointing": cfg.gradient_checkpointing,
        "dataloader_drop_last": True,
        "save_strategy": "no",
        "report_to": "none",
        "logging_steps": 1,
        "use_cpu": not torch.cuda.is_available(),
        "dataloader_pin_memory": False,
        "disable_tqdm": True,
        "seed": 0,
    }


def _conservative_sigmoid(eps: float) -> dict[str, Any]:
    """TRL loss settings whose weighted sum is the official code's cDPO loss (spec §3.8).

    TRL 1.16's ``"sigmoid"`` loss ignores ``label_smoothing`` (older TRL, used by the official code,
    applied it). With S = −log σ(βh), the identity −log σ(−x) = −log σ(x) + x gives
    cDPO = −(1−ε) log σ(βh) − ε log σ(−βh) = S + εβh, while TRL's ``"robust"`` loss is
    R = S − εβh/(1−2ε). Hence cDPO = (2−2ε)·S − (1−2ε)·R, built from TRL's own losses without
    overriding the trainer; the unit test checks it against the closed form.
    """
    if eps == 0.0:
        return {"loss_type": ["sigmoid"]}
    return {
        "loss_type": ["sigmoid", "robust"],
        "loss_weights": [2.0 - 2.0 * eps, -(1.0 - 2.0 * eps)],
    }


def _summarise(history: list[dict[str, Any]], prefix: str) -> dict[str, float]:
    steps = [h for h in history if "loss" in h]
    out: dict[str, float] = {f"{prefix}/steps": float(len(steps))}
    if not steps:
        return out
    out[f"{prefix}/loss_first"] = float(steps[0]["loss"])
    out[f"{prefix}/loss_last"] = float(steps[-1]["loss"])
    for key in ("rewards/accuracies", "rewards/margins"):
        vals = [h[key] for h in steps if key in h]
        if vals:
            out[f"{prefix}/{key.split('/')[1]}_last"] = float(vals[-1])
            out[f"{prefix}/{key.split('/')[1]}_mean"] = float(sum(vals) / len(vals))
    return out


def run_dpo_round(
    policy: Any,
    ref: Any,
    tokenizer: Any,
    dataset: Any,
    cfg: DPORoundConfig | None = None,
    out_dir: str | None = None,
    save: bool = False,
) -> dict[str, float]:
    """One MCCE preference round with ``trl.DPOTrainer`` (spec §3.5 line 19, §3.8).

    Args:
        policy: the trainable model, updated in place (continual across rounds).
        ref: the frozen reference model (the original base model, never updated).
        tokenizer: the policy's tokenizer.
        dataset: ``prompt/chosen/rejected`` pairs from :func:`build_similarity_pairs`.
        cfg: round hyper-parameters.
        out_dir: trainer folder; a temporary one when None.
        save: write the updated policy to ``out_dir/policy`` (paper scale: reloaded by vLLM).

    Returns:
        ``dpo/steps``, ``dpo/loss_first``, ``dpo/loss_last``, ``dpo/accuracies_*``,
        ``dpo/margins_*``; ``{"dpo/skipped": 1.0}`` when there are fewer than ``cfg.min_pairs`` pairs.
    """
    from trl import DPOConfig, DPOTrainer

    cfg = cfg or DPORoundConfig()
    if ref is None:
        raise ValueError("ref must be the frozen reference model (the original base model)")
    need = max(cfg.min_pairs, cfg.per_device_train_batch_size)  # drop_last needs one full batch
    if len(dataset) < need:
        logger.warning(
            "DPO round skipped: %d pairs < %d (min_pairs / batch size)", len(dataset), need
        )
        return {"dpo/skipped": 1.0}
    out_dir = out_dir or tempfile.mkdtemp(prefix="mcce_dpo_")
    args = DPOConfig(
        beta=cfg.beta,
        label_smoothing=cfg.label_smoothing,
        max_length=cfg.max_length,
        **_conservative_sigmoid(cfg.label_smoothing),
        **_common_args(cfg, out_dir),
    )
    trainer = DPOTrainer(
        model=policy, ref_model=ref, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train()
    if save:
        trainer.save_model(os.path.join(out_dir, "policy"))
    policy.eval()
    out = _summarise(trainer.state.log_history, "dpo")
    out["dpo/pairs"] = float(len(dataset))
    return out


def run_sft_round(
    policy: Any,
    tokenizer: Any,
    dataset: Any,
    cfg: DPORoundConfig | None = None,
    out_dir: str | None = None,
) -> dict[str, float]:
    """SFT baseline round: ``trl.SFTTrainer`` on (prompt, chosen) of the same pairs (spec §9.9)."""
    from trl import SFTConfig, SFTTrainer

    cfg = cfg or DPORoundConfig()
    if len(dataset) < max(cfg.min_pairs, cfg.per_device_train_batch_size):
        logger.warning("SFT round skipped: %d pairs < min_pairs / batch size", len(dataset))
        return {"sft/skipped": 1.0}
    ds = dataset.select_columns(["prompt", "chosen"]).rename_column("chosen", "completion")
    out_dir = out_dir or tempfile.mkdtemp(prefix="mcce_sft_")
    args = SFTConfig(
        max_length=cfg.max_length, completion_only_loss=True, **_common_args(cfg, out_dir)
    )
    trainer = SFTTrainer(model=policy, args=args, train_dataset=ds, processing_class=tokenizer)
    trainer.train()
    policy.eval()
    return _summarise(trainer.state.log_history, "sft")


def run_rl_round(
    policy: Any,
    tokenizer: Any,
    prompts: list[Any],
    reward_fn: Callable[..., list[float]],
    cfg: DPORoundConfig | None = None,
    out_dir: str | None = None,
    ref: Any = None,
) -> dict[str, float]:
    """RL baseline round: ``trl.GRPOTrainer`` on past prompts with a fitness reward (spec §9.9).

    The paper's "co-evolution with RL" baseline trains the local model on scalar rewards instead of
    preference pairs. Here each past prompt of the trajectory memory is sampled
    ``cfg.rl_num_generations`` times; ``reward_fn(prompts, completions, **kw)`` scores every
    completion (MCCE: the mean F of its valid new molecules, ``cfg.rl_invalid_reward`` when none is
    valid); TRL's group-normalised GRPO loss with KL coefficient ``cfg.rl_beta`` to the reference
    (the original base model, as for DPO) updates the policy in place for ``cfg.num_train_epochs``
    passes.

    Args:
        policy: the trainable model, updated in place.
        tokenizer: its tokenizer (left padding).
        prompts: past prompts (strings, or chat message lists when the tokenizer has a template).
        reward_fn: TRL reward function ``(prompts, completions, **kw) -> list[float]``.
        cfg: round hyper-parameters (the ``rl_*`` fields and the shared optimiser settings).
        out_dir: trainer folder; a temporary one when None.
        ref: the KL reference: a model (saved to ``out_dir/ref`` for TRL to load), a local path or
            hub id, or None for the policy's own ``config._name_or_path`` (at paper scale the hub
            id of the base model). Unused when ``cfg.rl_beta == 0``.

    Returns:
        ``rl/steps``, ``rl/loss_first``, ``rl/loss_last``, ``rl/reward_first``, ``rl/reward_last``
        (mean reward of the first and last generation batch); ``{"rl/skipped": 1.0}`` when there are
        fewer than ``cfg.min_pairs`` prompts.
    """
    import datasets
    from trl import GRPOConfig, GRPOTrainer

    cfg = cfg or DPORoundConfig()
    if not callable(reward_fn):
        raise TypeError(f"reward_fn must be callable, got {type(reward_fn).__name__}")
    if len(prompts) < cfg.min_pairs:
        logger.warning("RL round skipped: %d prompts < min_pairs %d", len(prompts), cfg.min_pairs)
        return {"rl/skipped": 1.0}
    g = cfg.rl_num_generations
    # the generation batch must hold whole groups: round the per-device batch up to a multiple of g
    batch = max(g, -(-cfg.per_device_train_batch_size // g) * g)
    common = _common_args(cfg, out_dir or tempfile.mkdtemp(prefix="mcce_rl_"))
    common["per_device_train_batch_size"] = batch
    args = GRPOConfig(
        num_generations=g,
        beta=cfg.rl_beta,
        max_completion_length=cfg.rl_max_completion_length,
        temperature=cfg.rl_temperature,
        top_p=cfg.rl_top_p,
        **common,
    )
    ds = datasets.Dataset.from_dict({"prompt": list(prompts)})
    # TRL builds the KL reference from the policy's config._name_or_path: point it at the reference
    old_name = getattr(policy.config, "_name_or_path", "")
    ref_path = old_name
    if cfg.rl_beta > 0 and ref is not None:
        if isinstance(ref, str):
            ref_path = ref
        else:
            ref_path = os.path.join(common["output_dir"], "ref")
            ref.save_pretrained(ref_path)
    if cfg.rl_beta > 0 and not ref_path:
        raise ValueError("ref is required for rl_beta > 0 when the policy has no _name_or_path")
    policy.config._name_or_path = ref_path
    try:
        trainer = GRPOTrainer(
            model=policy,
            reward_funcs=reward_fn,
            args=args,
            train_dataset=ds,
            processing_class=tokenizer,
        )
    finally:
        policy.config._name_or_path = old_name
    trainer.train()
    policy.eval()
    out = _summarise(trainer.state.log_history, "rl")
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    if rewards:
        out["rl/reward_first"] = float(rewards[0])
        out["rl/reward_last"] = float(rewards[-1])
    out["rl/prompts"] = float(len(prompts))
    return out


def dpo_loss_closed_form(
    pol_w: float, pol_l: float, ref_w: float, ref_l: float, beta: float, eps: float
) -> float:
    """L = −(1−ε)·log σ(β h) − ε·log σ(−β h) for summed log-probs (spec §3.8); used by the tests."""
    h = (pol_w - ref_w) - (pol_l - ref_l)

    def log_sigmoid(x: float) -> float:
        return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))

    return -(1 - eps) * log_sigmoid(beta * h) - eps * log_sigmoid(-beta * h)
