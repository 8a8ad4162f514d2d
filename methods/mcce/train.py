"""Training rounds of the trainable model (official `training/train_dpo.py`).

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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trl import DPOConfig, GRPOConfig, SFTConfig

from common.config import CheckpointingNames

if TYPE_CHECKING:
    from .config import MCCERunConfig

logger = logging.getLogger(__name__)


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass
class MCCEDPOConfig(CheckpointingNames, DPOConfig):
    """``trl.DPOConfig`` with the official round's defaults (``training/train_dpo.py``).

    The paper's preference round is TRL's DPO with β = 0.1 and conservative label smoothing
    ε = 0.1 (realised with TRL's own losses, see :func:`_conservative_sigmoid`), a constant
    learning rate of 1e-6 without warm-up, one epoch, batch 2. Added field: ``min_pairs``.
    """

    beta: float = field(default=0.1, metadata=_help("DPO β (official train_dpo.py)."))
    label_smoothing: float = field(
        default=0.1, metadata=_help("Conservative-DPO ε (official train_dpo.py).")
    )
    learning_rate: float = field(default=1e-6, metadata=_help("Constant lr (official)."))
    lr_scheduler_type: str = field(default="constant", metadata=_help("Official: constant."))
    warmup_steps: float = field(default=0, metadata=_help("Official: no warm-up."))
    num_train_epochs: float = field(default=1.0, metadata=_help("Epochs per round (official)."))
    per_device_train_batch_size: int = field(default=2, metadata=_help("Official: 2."))
    weight_decay: float = field(default=0.01, metadata=_help("Official: 0.01."))
    adam_epsilon: float = field(default=1e-6, metadata=_help("Official: 1e-6."))
    max_grad_norm: float = field(default=1.0, metadata=_help("Official: 1.0."))
    max_length: int | None = field(default=2048, metadata=_help("Official: 2048 tokens."))
    min_pairs: int = field(
        default=2, metadata=_help("A round with fewer pairs (or fewer than one batch) is skipped.")
    )


@dataclass
class MCCESFTConfig(CheckpointingNames, SFTConfig):
    """``trl.SFTConfig`` of the SFT co-evolution baseline (our baseline; not in the official code): the DPO round's optimiser
    settings, trained on the chosen responses only (prompt masked). Added field: ``min_pairs``."""

    learning_rate: float = field(default=1e-6, metadata=_help("As the DPO round (official)."))
    lr_scheduler_type: str = field(default="constant", metadata=_help("As the DPO round."))
    warmup_steps: float = field(default=0, metadata=_help("As the DPO round."))
    num_train_epochs: float = field(default=1.0, metadata=_help("As the DPO round."))
    per_device_train_batch_size: int = field(default=2, metadata=_help("As the DPO round."))
    weight_decay: float = field(default=0.01, metadata=_help("As the DPO round."))
    adam_epsilon: float = field(default=1e-6, metadata=_help("As the DPO round."))
    max_grad_norm: float = field(default=1.0, metadata=_help("As the DPO round."))
    max_length: int | None = field(default=2048, metadata=_help("As the DPO round."))
    completion_only_loss: bool | None = field(
        default=True, metadata=_help("NLL of the chosen response only.")
    )
    min_pairs: int = field(default=2, metadata=_help("A round with fewer pairs is skipped."))


@dataclass
class MCCEGRPOConfig(CheckpointingNames, GRPOConfig):
    """``trl.GRPOConfig`` of the RL co-evolution baseline (our baseline; not in the official code).

    Each past prompt is sampled ``num_generations`` = 4 times at the local model's sampling
    settings (T = 0.7, top-p 0.95, 128 new tokens, official ``LLM.py``), rewarded by the mean F of
    the completion's valid new molecules, with a KL coefficient β = 0.04 to the original model.
    Added fields: ``invalid_reward`` and ``min_pairs``.
    """

    num_generations: int | None = field(
        default=4, metadata=_help("Samples per prompt (our RL baseline).")
    )
    beta: float = field(
        default=0.04, metadata=_help("KL coefficient to the reference (our RL baseline).")
    )
    max_completion_length: int | None = field(
        default=128, metadata=_help("Official local sampling: 128 new tokens.")
    )
    temperature: float = field(default=0.7, metadata=_help("Official local sampling."))
    top_p: float = field(default=0.95, metadata=_help("Official local sampling."))
    learning_rate: float = field(default=1e-6, metadata=_help("As the DPO round."))
    lr_scheduler_type: str = field(default="constant", metadata=_help("As the DPO round."))
    per_device_train_batch_size: int = field(
        default=4, metadata=_help("A whole number of prompt groups (num_generations).")
    )
    weight_decay: float = field(default=0.01, metadata=_help("As the DPO round."))
    adam_epsilon: float = field(default=1e-6, metadata=_help("As the DPO round."))
    invalid_reward: float = field(
        default=-0.1,
        metadata=_help("Reward of a completion with no valid molecule (our RL baseline)."),
    )
    min_pairs: int = field(default=2, metadata=_help("A round with fewer prompts is skipped."))


ROUND_CONFIGS: dict[str, type] = {
    "coevolve_dpo": MCCEDPOConfig,
    "coevolve_sft": MCCESFTConfig,
    "coevolve_rl": MCCEGRPOConfig,
}


def round_args(cls: type, node: dict[str, Any] | None = None, out_dir: str | None = None):
    """A round's TRL config: the class's official defaults, the YAML trainer node on top.

    The fixed per-round choices (no checkpoints, no reporting, one log line per step, full batches,
    CPU when there is no GPU, bf16 only on a GPU) are defaults the node may override.
    """
    import torch

    from common.config import trainer_config

    cuda = torch.cuda.is_available()
    return trainer_config(
        cls,
        node,
        output_dir=out_dir or tempfile.mkdtemp(prefix="mcce_round_"),
        save_strategy="no",
        report_to="none",
        logging_steps=1,
        dataloader_drop_last=True,
        dataloader_pin_memory=False,
        disable_tqdm=True,
        use_cpu=not cuda,
        bf16=cuda,
        seed=0,
    )


def _conservative_sigmoid(eps: float) -> dict[str, Any]:
    """TRL loss settings whose weighted sum is the official code's cDPO loss (official `training/train_dpo.py`).

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
    args: MCCEDPOConfig | None = None,
    save: bool = False,
) -> dict[str, float]:
    """One MCCE preference round with ``trl.DPOTrainer`` (official `algorithm/MOO.py::run` line 19, official `training/train_dpo.py`).

    Args:
        policy: the trainable model, updated in place (continual across rounds).
        ref: the frozen reference model (the original base model, never updated).
        tokenizer: the policy's tokenizer.
        dataset: ``prompt/chosen/rejected`` pairs from :func:`build_similarity_pairs`.
        args: the round's TRL config (:func:`round_args` of :class:`MCCEDPOConfig`; its official
            defaults when None); its ``output_dir`` is the trainer folder.
        save: write the updated policy to ``output_dir/policy`` (paper scale: reloaded by vLLM).

    Returns:
        ``dpo/steps``, ``dpo/loss_first``, ``dpo/loss_last``, ``dpo/accuracies_*``,
        ``dpo/margins_*``; ``{"dpo/skipped": 1.0}`` when there are fewer than ``args.min_pairs`` pairs.
    """
    import dataclasses

    from trl import DPOTrainer

    args = args or round_args(MCCEDPOConfig)
    if not isinstance(args, MCCEDPOConfig):
        raise TypeError(f"args must be an MCCEDPOConfig, got {type(args).__name__}")
    if ref is None:
        raise ValueError("ref must be the frozen reference model (the original base model)")
    need = max(args.min_pairs, args.per_device_train_batch_size)  # drop_last: one full batch
    if len(dataset) < need:
        logger.warning(
            "DPO round skipped: %d pairs < %d (min_pairs / batch size)", len(dataset), need
        )
        return {"dpo/skipped": 1.0}
    # TRL 1.16 ignores label_smoothing in "sigmoid": the cDPO loss as a mix of TRL's own losses
    args = dataclasses.replace(args, **_conservative_sigmoid(args.label_smoothing))
    out_dir = args.output_dir
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
    args: MCCESFTConfig | None = None,
) -> dict[str, float]:
    """SFT baseline round: ``trl.SFTTrainer`` on (prompt, chosen) of the same pairs (our baseline; not in the official code)."""
    from trl import SFTTrainer

    args = args or round_args(MCCESFTConfig)
    if not isinstance(args, MCCESFTConfig):
        raise TypeError(f"args must be an MCCESFTConfig, got {type(args).__name__}")
    if len(dataset) < max(args.min_pairs, args.per_device_train_batch_size):
        logger.warning("SFT round skipped: %d pairs < min_pairs / batch size", len(dataset))
        return {"sft/skipped": 1.0}
    ds = dataset.select_columns(["prompt", "chosen"]).rename_column("chosen", "completion")
    trainer = SFTTrainer(model=policy, args=args, train_dataset=ds, processing_class=tokenizer)
    trainer.train()
    policy.eval()
    return _summarise(trainer.state.log_history, "sft")


def run_rl_round(
    policy: Any,
    tokenizer: Any,
    prompts: list[Any],
    reward_fn: Callable[..., list[float]],
    args: MCCEGRPOConfig | None = None,
    ref: Any = None,
) -> dict[str, float]:
    """RL baseline round: ``trl.GRPOTrainer`` on past prompts with a fitness reward (our baseline; not in the official code).

    The paper's "co-evolution with RL" baseline trains the local model on scalar rewards instead of
    preference pairs. Here each past prompt of the trajectory memory is sampled
    ``args.num_generations`` times; ``reward_fn(prompts, completions, **kw)`` scores every
    completion (MCCE: the mean F of its valid new molecules, ``args.invalid_reward`` when none is
    valid); TRL's group-normalised GRPO loss with KL coefficient ``args.beta`` to the reference
    (the original base model, as for DPO) updates the policy in place for ``args.num_train_epochs``
    passes.

    Args:
        policy: the trainable model, updated in place.
        tokenizer: its tokenizer (left padding).
        prompts: past prompts (strings, or chat message lists when the tokenizer has a template).
        reward_fn: TRL reward function ``(prompts, completions, **kw) -> list[float]``.
        args: the round's TRL config (:func:`round_args` of :class:`MCCEGRPOConfig`).
        ref: the KL reference: a model (saved to ``out_dir/ref`` for TRL to load), a local path or
            hub id, or None for the policy's own ``config._name_or_path`` (at paper scale the hub
            id of the base model). Unused when ``args.beta == 0``.

    Returns:
        ``rl/steps``, ``rl/loss_first``, ``rl/loss_last``, ``rl/reward_first``, ``rl/reward_last``
        (mean reward of the first and last generation batch); ``{"rl/skipped": 1.0}`` when there are
        fewer than ``args.min_pairs`` prompts.
    """
    import datasets
    from trl import GRPOTrainer

    args = args or round_args(MCCEGRPOConfig)
    if not isinstance(args, MCCEGRPOConfig):
        raise TypeError(f"args must be an MCCEGRPOConfig, got {type(args).__name__}")
    if not callable(reward_fn):
        raise TypeError(f"reward_fn must be callable, got {type(reward_fn).__name__}")
    if len(prompts) < args.min_pairs:
        logger.warning("RL round skipped: %d prompts < min_pairs %d", len(prompts), args.min_pairs)
        return {"rl/skipped": 1.0}
    ds = datasets.Dataset.from_dict({"prompt": list(prompts)})
    # TRL builds the KL reference from the policy's config._name_or_path: point it at the reference
    old_name = getattr(policy.config, "_name_or_path", "")
    ref_path = old_name
    if args.beta > 0 and ref is not None:
        if isinstance(ref, str):
            ref_path = ref
        else:
            ref_path = os.path.join(args.output_dir, "ref")
            ref.save_pretrained(ref_path)
    if args.beta > 0 and not ref_path:
        raise ValueError("ref is required for beta > 0 when the policy has no _name_or_path")
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
    """L = −(1−ε)·log σ(β h) − ε·log σ(−β h) for summed log-probs (official `training/train_dpo.py`); used by the tests."""
    h = (pol_w - ref_w) - (pol_l - ref_l)

    def log_sigmoid(x: float) -> float:
        return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))

    return -(1 - eps) * log_sigmoid(beta * h) - eps * log_sigmoid(-beta * h)


TRAINER_NODE = {"coevolve_dpo": "dpo", "coevolve_sft": "sft", "coevolve_rl": "grpo"}


def trainer_args_for(rc: MCCERunConfig, mode: str, out_dir: str | None = None) -> Any:
    """The training round's TRL config of ``mode`` from its trainer node (None if it trains not)."""
    if mode not in ROUND_CONFIGS:
        return None
    return round_args(ROUND_CONFIGS[mode], getattr(rc, TRAINER_NODE[mode]), out_dir)
