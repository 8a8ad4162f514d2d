"""Paper-scale MaxRL stages: training on POLARIS-53K / GSM8K with vLLM rollouts, pass@k evaluation.

Implements the setups of arXiv:2602.02710 §6.3-6.4 and App. E.2-E.3 with our TRL trainer instead of
verl: Qwen3-{1.7B,4B}-Base on POLARIS-53K (256 prompts × 16 rollouts, lr 1e-6, 1000 steps) and
SmolLM2-360M-Instruct on GSM8K (256 × 128, lr 1e-5, 1500 steps, reward 0 on truncation). Rewards
are binary boxed-answer checks (math-verify via :func:`common.tasks.verify_boxed`). Evaluation
samples n answers per problem (T = 0.6, top-p 0.95) and reports pass@k for k = 1, 2, 4, ..., n;
``compare`` gives the test-time-scaling efficiency of a run against a baseline (Fig. 5).

Stages of ``icml26 experiment=maxrl_paper method.stage=<stage>`` (see ``scripts/reproduce/maxrl.sh``):
``train`` (``model`` × ``method.train_data``, trainer settings in ``method.trainer``), ``eval``
(``model`` on every set of ``benchmark``; point ``model.path`` at a trained checkpoint) and
``compare`` (``method.compare_files=[method_eval.json,baseline_eval.json]``).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import torch

from common.config import DatasetSpec, Run, model_id, trainer_config
from common.tracking import write_results

from .eval import pass_at_k, tts_efficiency

logger = logging.getLogger(__name__)


def prompt_messages(problem: str, suffix: str, system: str | None) -> list[dict[str, str]]:
    """The chat of one problem: ``[system,] user(problem + suffix)``.

    The paper's template (App. E.3) has a system turn holding the instruction; the official data
    scripts (``examples/maxrl_data_preprocess/polaris.py``) have none and append the instruction
    to the problem (``system=None, suffix=QWEN3_SUFFIX``).
    """
    head = [{"role": "system", "content": system}] if system is not None else []
    return [*head, {"role": "user", "content": problem + suffix}]


def load_prompts(spec: DatasetSpec, suffix: str, system: str | None = None):
    """A math set as a ``datasets.Dataset`` with ``prompt`` (a chat, :func:`prompt_messages`) and
    ``answer``.

    ``spec`` names a hub id (read through ``datasets``, from the cache when offline) or a local
    GSM8K/MATH-layout file (:func:`common.tasks.load_math_set`); ``suffix`` is the instruction
    appended to each problem, ``system`` the system turn (None: none).
    """
    from common.tasks import load_math_set

    data = load_math_set(spec)
    return data.map(
        lambda row: {"prompt": prompt_messages(row["problem"], suffix, system)},
        remove_columns=["problem"],
    )


def _needs_model(run: Run):
    if run.model is None:
        raise ValueError(
            f"method.stage={run.method.stage} needs a checkpoint: select one with model=<name> "
            "(configs/model/) or set model.path"
        )
    return run.model


def train_stage(run: Run) -> dict[str, float]:
    """``stage=train``: MaxRLTrainer (or a baseline estimator) on ``model`` (accelerate, vLLM)."""
    from common.models import load_model, load_tokenizer
    from common.tasks.math_sets import boxed_reward

    from .trainer import MaxRLConfig, MaxRLTrainer

    start, spec = time.perf_counter(), _needs_model(run)
    data = load_prompts(run.method.train_data, run.method.prompt_suffix, run.method.system_prompt)
    args = trainer_config(
        MaxRLConfig,
        run.method.trainer,
        output_dir=str(run.run_dir / "train"),
        use_cpu=not torch.cuda.is_available(),
        report_to="wandb" if run.cfg.logger == "wandb" else "none",
        seed=run.seed,
    )
    extra = {"attn_implementation": spec.attn_implementation} if spec.attn_implementation else {}
    model = load_model(model_id(spec), dtype=spec.dtype, **extra)
    trainer = MaxRLTrainer(
        model=model,
        reward_funcs=boxed_reward,
        args=args,
        train_dataset=data,
        processing_class=load_tokenizer(model_id(spec)),
    )
    out = trainer.train()
    final = run.run_dir / "train" / "final"
    trainer.save_model(str(final))
    metrics = {"train": {"steps": float(out.global_step), "loss": float(out.training_loss)}}
    return write_results(
        run.run_dir,
        "maxrl",
        metrics,
        cfg=run.cfg,
        extra={"checkpoint": str(final)},
        wall_time_s=time.perf_counter() - start,
        notes=f"Checkpoint: {final} (evaluate with method.stage=eval model.path={final}).",
    )


def eval_samples(n: int, n_by_set: dict[str, int] | None, sets: list[str]) -> dict[str, int]:
    """Samples per problem of each benchmark set: ``n_by_set[name]`` where given, else ``n``.

    A name of ``n_by_set`` that the benchmark does not have (after ``benchmark=<another>``, or a
    typo) is reported in one warning, so that it is never ignored without a word.
    """
    extra = sorted(set(n_by_set or {}) - set(sets))
    if extra:
        logger.warning(
            "method.eval.n_by_set names sets the benchmark does not have: %s (its sets: %s); "
            "those sets use method.eval.n=%d",
            extra, sets, n,
        )  # fmt: skip
    return {name: int((n_by_set or {}).get(name, n)) for name in sets}


def eval_stage(run: Run) -> dict[str, float]:
    """``stage=eval``: pass@k (k = 1, 2, 4, ..., n) of ``model`` on every set of ``benchmark``."""
    from common.generation import HFGenerator, SamplingParams, VLLMGenerator
    from common.models import load_model, load_tokenizer
    from common.tasks.math_sets import verify_boxed

    start, spec, ecfg = time.perf_counter(), _needs_model(run), run.method.eval
    if run.benchmark is None or not run.benchmark.sets:
        raise ValueError("method.stage=eval needs benchmark=<suite> (configs/benchmark/)")
    path = model_id(spec)
    if ecfg.engine == "vllm":
        gen = VLLMGenerator(path)
    else:
        gen = HFGenerator(load_model(path, dtype=spec.dtype), load_tokenizer(path))
    params = SamplingParams(
        max_new_tokens=ecfg.max_new_tokens, temperature=ecfg.temperature, top_p=ecfg.top_p
    )
    n_by_set = eval_samples(ecfg.n, ecfg.n_by_set, list(run.benchmark.sets))
    curves, metrics = {}, {}
    for name, set_spec in run.benchmark.sets.items():
        n = n_by_set[name]
        ks = [2**i for i in range(n.bit_length())]  # 1, 2, 4, ..., the largest power <= n
        data = load_prompts(set_spec, ecfg.prompt_suffix, ecfg.system_prompt)
        comps = gen.generate(list(data["prompt"]), n=n, params=params)
        c = torch.tensor(
            [sum(verify_boxed(x.text, a) for x in cs) for cs, a in zip(comps, data["answer"])]
        )
        cov = [float(pass_at_k(n, c, k).mean()) for k in ks]
        curves[name] = {"k": ks, "pass@k": cov}
        metrics[name] = {"pass@1": cov[0], f"pass@{ks[-1]}": cov[-1], "n_problems": len(c)}
        logger.info("%s: pass@1 %.4f pass@%d %.4f", name, cov[0], ks[-1], cov[-1])
    (run.run_dir / "eval.json").write_text(json.dumps(curves, indent=2))
    return write_results(
        run.run_dir,
        "maxrl",
        metrics,
        cfg=run.cfg,
        extra={"pass_at_k": curves},
        wall_time_s=time.perf_counter() - start,
        notes=f"pass@k curves: {run.run_dir / 'eval.json'} (input of method.stage=compare).",
    )


def compare(method_eval: str, baseline_eval: str) -> dict[str, float]:
    """Test-time-scaling efficiency per eval set from two ``eval.json`` files (Fig. 5)."""
    a, b = json.loads(Path(method_eval).read_text()), json.loads(Path(baseline_eval).read_text())
    return {s: tts_efficiency(a[s]["k"], a[s]["pass@k"], b[s]["pass@k"]) for s in a if s in b}


def compare_stage(run: Run) -> dict[str, float]:
    """``stage=compare``: ``method.compare_files=[method_eval.json, baseline_eval.json]``."""
    if len(run.method.compare_files) != 2:
        raise ValueError(
            "method.stage=compare needs method.compare_files=[<method eval.json>,<baseline eval.json>], "
            f"got {run.method.compare_files}"
        )
    eff = compare(*run.method.compare_files)
    metrics = {s: {"tts_efficiency": v} for s, v in eff.items()}
    return write_results(run.run_dir, "maxrl", metrics, cfg=run.cfg)
