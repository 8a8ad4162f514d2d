"""``stage=paper``: APO and its baselines with :class:`APOTrainer` on ``model``, then Pass@k.

Each arm of ``method.arms`` (``apo``, ``grpo``, ``grpo_kl``, ``kl_on_wrong``) trains a fresh copy of
``model`` on ``method.train_data`` with the same trainer node (``method.trainer``, fields of
:class:`methods.apo.trainer.APOConfig`) and seed, then samples ``method.eval.n`` completions per
problem of every set of ``benchmark`` and reports unbiased Pass@k and their average over the sets
(the paper's Avg Pass@k). The base model is evaluated first. One arm per launch on GPUs:
``scripts/reproduce/apo.sh``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from common.config import Run, model_id, trainer_config
from common.metrics import mean_pass_at_k
from common.tracking import write_results

logger = logging.getLogger(__name__)

__all__ = ["arm_overrides", "eval_stage", "paper_stage", "train_stage"]


def arm_overrides(arm: str, trainer: dict[str, Any], kl_coef: float) -> dict[str, Any]:
    """The trainer-node values that turn the APO node into ``arm``.

    ``apo`` keeps the node; ``grpo`` sets λ = 1, β = 0 (APO's loss is then GRPO's clipped
    surrogate); ``grpo_kl`` adds a k3 KL of ``kl_coef`` on every token, ``kl_on_wrong`` only on
    negative-advantage tokens.
    """
    grpo = {"apo_lambda": 1.0, "apo_beta": 0.0, "apo_kl_coef": 0.0, "apo_kl_on_wrong": 0.0}
    table = {
        "apo": {},
        "grpo": grpo,
        "grpo_kl": {**grpo, "apo_kl_coef": kl_coef},
        "kl_on_wrong": {**grpo, "apo_kl_on_wrong": kl_coef},
    }
    if arm not in table:
        raise ValueError(f"arm must be one of {list(table)}, got {arm!r}")
    return {**trainer, **table[arm]}


def _prompts(ds, suffix: str):
    return ds.map(
        lambda r: {"prompt": [{"role": "user", "content": r["problem"] + suffix}]},
        remove_columns=["problem"],
    )


def _evaluate(model, tokenizer, evals, ecfg, seed: int) -> dict[str, float]:
    from common.generation import HFGenerator, SamplingParams
    from common.tasks import verify_boxed

    gen = HFGenerator(model, tokenizer)
    params = SamplingParams(
        max_new_tokens=ecfg.max_new_tokens, temperature=ecfg.temperature, seed=seed
    )
    out: dict[str, float] = {}
    for name, ds in evals.items():
        comps = gen.generate(list(ds["prompt"]), n=ecfg.n, params=params)
        counts = [
            sum(int(verify_boxed(c.text, ans) > 0) for c in row)
            for row, ans in zip(comps, ds["answer"], strict=True)
        ]
        for k in ecfg.ks:
            out[f"{name}/pass@{k}"] = mean_pass_at_k(counts, ecfg.n, k)
    for k in ecfg.ks:
        out[f"avg/pass@{k}"] = sum(out[f"{n}/pass@{k}"] for n in evals) / len(evals)
    return out


def _checked(run: Run, need_benchmark: bool = True):
    if run.model is None:
        raise ValueError(
            f"method.stage={run.method.stage} needs a checkpoint: model=<name> (configs/model/)"
        )
    if need_benchmark and (run.benchmark is None or not run.benchmark.sets):
        raise ValueError(
            f"method.stage={run.method.stage} needs benchmark=<suite> (configs/benchmark/)"
        )
    spec = run.model
    extra = {"attn_implementation": spec.attn_implementation} if spec.attn_implementation else {}
    return spec, model_id(spec), extra


def _train_arm(run: Run, arm: str, path: str, extra: dict, train, tokenizer):
    from common.models import load_model
    from common.tasks import boxed_reward

    from .trainer import APOConfig, APOTrainer

    mc = run.method
    args = trainer_config(
        APOConfig,
        arm_overrides(arm, dict(mc.trainer), mc.kl_coef),
        output_dir=str(run.run_dir / "trl" / arm),
        use_cpu=not torch.cuda.is_available(),
        report_to="wandb" if str(run.cfg.logger) == "wandb" else "none",
        save_strategy="no",
        seed=run.seed,
    )
    trainer = APOTrainer(
        model=load_model(path, dtype=run.model.dtype, **extra),
        reward_funcs=boxed_reward,
        args=args,
        train_dataset=train,
        processing_class=tokenizer,
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "apo/safe_manifold_mass" in h]
    stats = {}
    if logs:
        stats["safe_manifold_mass_last"] = float(logs[-1]["apo/safe_manifold_mass"])
        stats["entropy_last"] = float(logs[-1]["apo/entropy"])
    return trainer, stats


def _data(run: Run, train: bool = True, evals: bool = True):
    from common.tasks import load_math_set

    mc = run.method
    train_ds = _prompts(load_math_set(mc.train_data), mc.prompt_suffix) if train else None
    eval_ds = None
    if evals:
        eval_ds = {
            name: _prompts(load_math_set(s), mc.prompt_suffix)
            for name, s in run.benchmark.sets.items()
        }
    return train_ds, eval_ds


def train_stage(run: Run) -> dict[str, float]:
    """``stage=train``: each arm of ``method.arms`` trains a fresh copy of ``model``; the final
    weights go to ``<run_dir>/<arm>/final`` (evaluate them with ``stage=eval model.path=...``)."""
    from common.models import load_tokenizer

    start = time.perf_counter()
    _, path, extra = _checked(run, need_benchmark=False)
    train, _ = _data(run, evals=False)
    tokenizer = load_tokenizer(path)
    metrics: dict[str, dict[str, float]] = {}
    for arm in run.method.arms:
        trainer, stats = _train_arm(run, arm, path, extra, train, tokenizer)
        final = run.run_dir / arm / "final"
        trainer.save_model(str(final))
        metrics[arm] = {"steps": float(trainer.state.global_step), **stats}
        del trainer
    return write_results(
        run.run_dir,
        "apo",
        metrics,
        cfg=run.cfg,
        wall_time_s=time.perf_counter() - start,
        notes="stage=train: checkpoints in <run_dir>/<arm>/final.",
    )


def eval_stage(run: Run) -> dict[str, float]:
    """``stage=eval``: Pass@k (k = 1, 2, 4, ..., n) of ``model`` on every set of ``benchmark``.

    The paper reports Avg Pass@1 and Pass@K over five math benchmarks (abstract); the unbiased
    estimator 1 − C(n−c, k)/C(n, k) (Chen et al. 2021, :func:`common.metrics.mean_pass_at_k`) and
    the benchmark list are our inference (docs/methods/apo.md, Deviations)."""
    from common.models import load_model, load_tokenizer

    start = time.perf_counter()
    spec, path, extra = _checked(run)
    _, evals = _data(run, train=False)
    model = load_model(path, dtype=spec.dtype, **extra)
    metrics = {"model": _evaluate(model, load_tokenizer(path), evals, run.method.eval, run.seed)}
    return write_results(
        run.run_dir, "apo", metrics, cfg=run.cfg, wall_time_s=time.perf_counter() - start
    )


def paper_stage(run: Run) -> dict[str, float]:
    """``stage=paper``: the base model's Pass@k, then train + evaluate each arm of ``method.arms``."""
    from common.models import load_model, load_tokenizer

    start = time.perf_counter()
    spec, path, extra = _checked(run)
    train, evals = _data(run)
    tokenizer = load_tokenizer(path)
    mc = run.method
    metrics: dict[str, dict[str, float]] = {}
    base = load_model(path, dtype=spec.dtype, **extra)
    metrics["base"] = _evaluate(base, tokenizer, evals, mc.eval, run.seed)
    del base
    for arm in mc.arms:
        trainer, stats = _train_arm(run, arm, path, extra, train, tokenizer)
        metrics[arm] = {**_evaluate(trainer.model, tokenizer, evals, mc.eval, run.seed), **stats}
        del trainer
    return write_results(
        run.run_dir,
        "apo",
        metrics,
        cfg=run.cfg,
        wall_time_s=time.perf_counter() - start,
        notes="stage=paper: each arm trains a fresh copy of the model with one trainer node.",
    )
