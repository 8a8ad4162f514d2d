"""``method.mode=train``: APO and its baselines with :class:`APOTrainer` on a language model (spec §7, P3-P4).

Each arm (``apo``, ``grpo``, ``grpo_kl``, ``kl_on_wrong``) trains a fresh copy of ``cfg.model`` on
the training prompts with the same settings and seed, then is evaluated by sampling ``eval_n``
completions per evaluation prompt and reporting unbiased Pass@k (P4). On CPU this runs with a tiny
model on the arithmetic task (``experiment=apo_toy method.mode=train``); on GPUs the paper preset
(``experiment=apo_paper``) uses Qwen2.5-Math, vLLM rollouts and math-verify rewards.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from common.metrics import mean_pass_at_k
from common.tracking import write_results

logger = logging.getLogger(__name__)

__all__ = ["TrainSettings", "run_training"]

BOXED_INSTRUCTION = "\nPlease reason step by step, and put your final answer within \\boxed{}."
ARMS = ("apo", "grpo", "grpo_kl", "kl_on_wrong")


@dataclass
class TrainSettings:
    """``cfg.method.train`` (all values for the paper are [inferred] in the spec, §3.9 / §7).

    Attributes:
        arms: which of ``apo``, ``grpo``, ``grpo_kl``, ``kl_on_wrong`` to train.
        task: ``arithmetic`` (synthetic, offline) or ``math`` (local files, math-verify).
        train_path: ``math``: a local json/jsonl/parquet (e.g. DAPO-Math-17k exported beforehand).
        eval_paths: ``math``: local evaluation files (AIME24, AMC23, MATH-500, ...).
        n_train: ``arithmetic``: number of training prompts.
        n_eval: number of evaluation prompts (per eval file for ``math``; 0 = all).
        max_steps: optimizer steps per arm.
        per_device_train_batch_size: completions per device per step.
        gradient_accumulation_steps: as in ``transformers``.
        num_generations: group size G.
        learning_rate: AdamW lr.
        weight_decay: AdamW weight decay.
        max_completion_length: generated tokens per completion.
        temperature: rollout temperature.
        kl_coef: KL coefficient of ``grpo_kl`` and ``kl_on_wrong``.
        use_vllm: vLLM rollouts (GPU).
        vllm_mode: ``colocate`` or ``server``.
        bf16: bf16 training (GPU).
        gradient_checkpointing: as in ``transformers``.
        eval_n: samples per evaluation prompt.
        eval_ks: the k of Pass@k.
        eval_temperature: evaluation sampling temperature.
        eval_max_new_tokens: evaluation generation length.
        output_dir: where TRL writes (checkpoints off by default).
        extra: more ``APOConfig`` keyword arguments.
    """

    arms: list[str] = field(default_factory=lambda: list(ARMS))
    task: str = "arithmetic"
    train_path: str | None = None
    eval_paths: list[str] = field(default_factory=list)
    n_train: int = 32
    n_eval: int = 16
    max_steps: int = 4
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    num_generations: int = 4
    learning_rate: float = 1e-2
    weight_decay: float = 0.0
    max_completion_length: int = 8
    temperature: float = 1.0
    kl_coef: float = 0.05
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    bf16: bool = False
    gradient_checkpointing: bool = False
    eval_n: int = 4
    eval_ks: list[int] = field(default_factory=lambda: [1, 4])
    eval_temperature: float = 1.0
    eval_max_new_tokens: int = 8
    output_dir: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.arms) - set(ARMS)
        if unknown:
            raise ValueError(f"train.arms must be among {list(ARMS)}, got {sorted(unknown)}")
        if self.task not in ("arithmetic", "math"):
            raise ValueError(f"train.task must be 'arithmetic' or 'math', got {self.task!r}")
        if self.task == "math" and (not self.train_path or not self.eval_paths):
            raise ValueError("train.task=math needs train.train_path and train.eval_paths")
        if max(self.eval_ks) > self.eval_n:
            raise ValueError(f"eval_ks ({self.eval_ks}) must be <= eval_n ({self.eval_n})")


def _datasets(ts: TrainSettings, seed: int):
    from common.tasks import (
        arithmetic_reward,
        boxed_reward,
        load_math_dataset,
        make_arithmetic_dataset,
        verify_arithmetic,
        verify_boxed,
    )

    if ts.task == "arithmetic":
        train = make_arithmetic_dataset(ts.n_train, seed=seed)
        evals = {"arithmetic": make_arithmetic_dataset(ts.n_eval, seed=seed + 1000)}
        return train, evals, arithmetic_reward, verify_arithmetic

    def to_prompts(ds):
        return ds.map(
            lambda r: {"prompt": [{"role": "user", "content": r["problem"] + BOXED_INSTRUCTION}]}
        )

    train = to_prompts(load_math_dataset(ts.train_path))
    evals = {}
    for path in ts.eval_paths:
        ds = to_prompts(load_math_dataset(path))
        if ts.n_eval:
            ds = ds.select(range(min(ts.n_eval, len(ds))))
        evals[Path(path).stem] = ds
    return train, evals, boxed_reward, verify_boxed


def _arm_overrides(arm: str, mc: Any, ts: TrainSettings) -> dict[str, Any]:
    apo = {"apo_lambda": mc.lam, "apo_beta": mc.beta}
    grpo = {"apo_lambda": 1.0, "apo_beta": 0.0}
    return {
        "apo": {**apo, "beta": 0.0},
        "grpo": {**grpo, "beta": 0.0},
        "grpo_kl": {**grpo, "beta": 0.0, "apo_kl_coef": ts.kl_coef},
        "kl_on_wrong": {**grpo, "beta": 0.0, "apo_kl_on_wrong": ts.kl_coef},
    }[arm]


def _evaluate(model, tokenizer, evals, verify, ts: TrainSettings, seed: int) -> dict[str, float]:
    from common.generation import HFGenerator, SamplingParams

    gen = HFGenerator(model, tokenizer)
    params = SamplingParams(
        max_new_tokens=ts.eval_max_new_tokens, temperature=ts.eval_temperature, seed=seed
    )
    out: dict[str, float] = {}
    for name, ds in evals.items():
        comps = gen.generate(list(ds["prompt"]), n=ts.eval_n, params=params)
        counts = [
            sum(int(verify(c.text, ans) > 0) for c in row)
            for row, ans in zip(comps, ds["answer"], strict=True)
        ]
        for k in ts.eval_ks:
            out[f"{name}/pass@{k}"] = mean_pass_at_k(counts, ts.eval_n, k)
    for k in ts.eval_ks:
        out[f"avg/pass@{k}"] = sum(v for n, v in out.items() if n.endswith(f"/pass@{k}")) / len(
            evals
        )
    return out


def run_training(cfg: DictConfig, mc: Any) -> dict[str, float]:
    """Trains and evaluates each arm; writes results into ``cfg.run_dir``."""
    from common.models import load_model, load_tokenizer
    from methods.apo.trainer import APOConfig, APOTrainer

    ts = TrainSettings(**mc.train)
    seed = int(cfg.seed)
    run_dir = Path(cfg.run_dir)
    model_spec = str(OmegaConf.select(cfg, "model.name"))
    dtype = OmegaConf.select(cfg, "model.dtype", default="auto")
    train, evals, reward, verify = _datasets(ts, seed)
    tokenizer = load_tokenizer(model_spec)
    start = time.time()
    metrics: dict[str, dict[str, float]] = {}
    base = load_model(model_spec, dtype=dtype, seed=seed)
    metrics["base"] = _evaluate(base, tokenizer, evals, verify, ts, seed)
    del base
    for arm in ts.arms:
        model = load_model(model_spec, dtype=dtype, seed=seed)
        args = APOConfig(
            output_dir=ts.output_dir or str(run_dir / "trl" / arm),
            max_steps=ts.max_steps,
            per_device_train_batch_size=ts.per_device_train_batch_size,
            gradient_accumulation_steps=ts.gradient_accumulation_steps,
            num_generations=ts.num_generations,
            learning_rate=ts.learning_rate,
            weight_decay=ts.weight_decay,
            max_completion_length=ts.max_completion_length,
            temperature=ts.temperature,
            use_vllm=ts.use_vllm,
            vllm_mode=ts.vllm_mode,
            bf16=ts.bf16,
            use_cpu=not ts.bf16 and not ts.use_vllm,
            gradient_checkpointing=ts.gradient_checkpointing,
            report_to="wandb" if cfg.get("logger") == "wandb" else "none",
            save_strategy="no",
            logging_steps=1,
            dataloader_pin_memory=False,
            disable_tqdm=True,
            seed=seed,
            apo_k=mc.k,
            apo_clip_mode=mc.clip_mode,
            apo_anchor_form=mc.anchor_form,
            apo_anchor_ratio_to=mc.anchor_ratio_to,
            apo_dual_clip=mc.dual_clip,
            epsilon=mc.eps_low,
            epsilon_high=mc.eps_high,
            **_arm_overrides(arm, mc, ts),
            **ts.extra,
        )
        trainer = APOTrainer(
            model=model,
            reward_funcs=reward,
            args=args,
            train_dataset=train,
            processing_class=tokenizer,
        )
        trainer.train()
        logs = [h for h in trainer.state.log_history if "apo/safe_manifold_mass" in h]
        row = _evaluate(trainer.model, tokenizer, evals, verify, ts, seed)
        if logs:
            row["safe_manifold_mass_last"] = float(logs[-1]["apo/safe_manifold_mass"])
            row["entropy_last"] = float(logs[-1]["apo/entropy"])
        metrics[arm] = row
        del trainer, model
    return write_results(
        run_dir,
        "apo",
        metrics,
        cfg=cfg,
        extra={"train": asdict(ts)},
        wall_time_s=time.time() - start,
        notes="mode=train: each arm trains a fresh copy of the model with one shared setting.",
    )
