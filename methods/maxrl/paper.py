"""Paper-scale MaxRL: training on POLARIS-53K / GSM8K with vLLM rollouts, pass@k evaluation (GPU).

Implements the setups of arXiv:2602.02710 §6.3-6.4 and App. E.2-E.3 with our TRL trainer instead of
verl: Qwen3-{1.7B,4B}-Base on POLARIS-53K (256 prompts × 16 rollouts, lr 1e-6, 1000 steps) and
SmolLM2-360M-Instruct on GSM8K (256 × 128, lr 1e-5, 1500 steps, reward 0 on truncation). Rewards
are binary boxed-answer checks (math-verify via :func:`common.tasks.verify_boxed`). Evaluation
samples n answers per problem with vLLM (T = 0.6, top-p 0.95) and reports pass@k for k = 1, 2, 4,
..., n plus the test-time-scaling efficiency against a baseline run.

Entry points (``python -m methods.maxrl.paper <cmd> [hydra overrides]``, see
``scripts/reproduce/maxrl.sh``): ``train``, ``eval``, ``compare``. Nothing here runs on CPU tests;
hub datasets and checkpoints are downloaded by ``datasets``/``transformers`` when online.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .eval import pass_at_k, tts_efficiency

logger = logging.getLogger(__name__)

QWEN3_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."  # repo
GSM8K_SUFFIX = " Let's think step by step and output the final answer within \\boxed{}."  # App. E.2

# name -> (hub id, split, question column, answer column)
DATASETS = {
    "polaris53k": ("POLARIS-Project/Polaris-Dataset-53K", "train", "problem", "answer"),
    "gsm8k": ("openai/gsm8k", "train", "question", "answer"),
    "gsm8k_platinum": ("madrylab/gsm8k-platinum", "test", "question", "answer"),
    "aime25": ("math-ai/aime25", "test", "problem", "answer"),
    "beyondaime": ("ByteDance-Seed/BeyondAIME", "test", "problem", "answer"),
    "math500": ("HuggingFaceH4/MATH-500", "test", "problem", "answer"),
    "minerva": ("math-ai/minervamath", "test", "question", "answer"),
}


@dataclass
class PaperConfig:
    """Paper-scale settings; defaults: Qwen3-4B-Base on POLARIS (Table 6, repo script)."""

    model: str = "Qwen/Qwen3-4B-Base"
    train_set: str = "polaris53k"
    eval_sets: list[str] = field(
        default_factory=lambda: ["aime25", "beyondaime", "math500", "minerva"]
    )
    prompts_per_step: int = 256  # Table 6
    max_steps: int = 1000  # §6.4
    lr: float = 1e-6  # Table 6
    max_grad_norm: float = 0.3  # repo run_qwen3_training.sh
    max_prompt_length: int = 1024  # Table 6
    max_completion_length: int = 4096  # Table 6
    zero_reward_on_truncation: bool = False  # True for SmolLM/GSM8K (repo smollm.sh)
    vllm_mode: str = "colocate"
    vllm_gpu_memory_utilization: float = 0.5
    per_device_train_batch_size: int = 16
    eval_n: int = 1024
    eval_temperature: float = 0.6  # Table 6
    eval_top_p: float = 0.95  # Table 6
    output_dir: str = "outputs/maxrl_paper"
    # Engines and precision: the paper setting is vLLM + bf16 on GPUs; the CPU test of this code path
    # switches them off (use_vllm=False, bf16=False, eval_engine="hf", report_to="none").
    use_vllm: bool = True
    bf16: bool = True
    report_to: str = "wandb"
    eval_engine: str = "vllm"  # vllm | hf


def load_prompts(name: str, suffix: str):
    """A math set as a ``datasets.Dataset`` with ``prompt`` (chat) and ``answer``.

    ``name`` is a key of :data:`DATASETS` (hub id, downloaded by ``datasets`` when online) or a local
    GSM8K/MATH-layout file or folder (read by :func:`common.tasks.load_math_dataset`).
    """
    import datasets

    from common.tasks.math_sets import _gsm8k_answer, load_math_dataset

    if Path(name).exists():
        local = load_math_dataset(name)
        return local.map(
            lambda row: {"prompt": [{"role": "user", "content": row["problem"] + suffix}]},
            remove_columns=["problem"],
        )
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}")
    hub_id, split, q_col, a_col = DATASETS[name]
    ds = datasets.load_dataset(hub_id, "main" if name == "gsm8k" else None, split=split)
    if len(ds) == 0:
        raise ValueError(f"dataset {name!r} is empty")

    def to_row(row):
        answer = str(row[a_col])
        if name.startswith("gsm8k"):
            answer = _gsm8k_answer(answer)
        return {"prompt": [{"role": "user", "content": row[q_col] + suffix}], "answer": answer}

    return ds.map(to_row, remove_columns=ds.column_names)


def train(mcfg, pcfg: PaperConfig) -> None:
    """Train with MaxRLTrainer (vLLM colocated rollouts) under ``accelerate launch``."""
    from transformers import AutoTokenizer

    from common.tasks.math_sets import boxed_reward

    from .trainer import MaxRLConfig, MaxRLTrainer

    suffix = GSM8K_SUFFIX if Path(pcfg.train_set).name.startswith("gsm8k") else QWEN3_SUFFIX
    data = load_prompts(pcfg.train_set, suffix)
    n = mcfg.num_generations
    args = MaxRLConfig(
        output_dir=f"{pcfg.output_dir}/{mcfg.advantage_estimator}",
        advantage_estimator=mcfg.advantage_estimator,
        adv_eps=mcfg.adv_eps,
        loss_type=mcfg.loss_type,
        zero_reward_on_truncation=pcfg.zero_reward_on_truncation,
        num_generations=n,
        per_device_train_batch_size=pcfg.per_device_train_batch_size,
        generation_batch_size=pcfg.prompts_per_step * n,  # one update per generation batch
        max_steps=pcfg.max_steps,
        learning_rate=pcfg.lr,
        lr_scheduler_type="constant",
        max_grad_norm=pcfg.max_grad_norm,
        max_completion_length=pcfg.max_completion_length,
        temperature=1.0,
        top_p=1.0,
        beta=0.0,
        num_iterations=1,
        bf16=pcfg.bf16,
        use_cpu=not torch.cuda.is_available(),
        use_vllm=pcfg.use_vllm,
        vllm_mode=pcfg.vllm_mode,
        vllm_gpu_memory_utilization=pcfg.vllm_gpu_memory_utilization,
        save_strategy="steps",
        save_steps=100,
        logging_steps=1,
        report_to=pcfg.report_to,
    )
    tok = AutoTokenizer.from_pretrained(pcfg.model, padding_side="left")
    trainer = MaxRLTrainer(
        model=pcfg.model,
        reward_funcs=boxed_reward,
        args=args,
        train_dataset=data,
        processing_class=tok,
    )
    trainer.train()
    trainer.save_model(f"{args.output_dir}/final")


def evaluate(model_path: str, pcfg: PaperConfig) -> dict:
    """pass@k (k = 1, 2, 4, ..., n) per eval set with vLLM sampling; writes ``eval.json``."""
    from common.generation import HFGenerator, SamplingParams, VLLMGenerator
    from common.tasks.math_sets import verify_boxed

    if pcfg.eval_engine == "vllm":
        gen = VLLMGenerator(model_path)
    elif pcfg.eval_engine == "hf":
        from common.models import load_model, load_tokenizer

        gen = HFGenerator(load_model(model_path), load_tokenizer(model_path))
    else:
        raise ValueError(f"eval_engine must be 'vllm' or 'hf', got {pcfg.eval_engine!r}")
    params = SamplingParams(
        max_new_tokens=pcfg.max_completion_length,
        temperature=pcfg.eval_temperature,
        top_p=pcfg.eval_top_p,
    )
    ks = [2**i for i in range(pcfg.eval_n.bit_length()) if 2**i <= pcfg.eval_n]
    out = {}
    for name in pcfg.eval_sets:
        data = load_prompts(name, QWEN3_SUFFIX)
        comps = gen.generate(list(data["prompt"]), n=pcfg.eval_n, params=params)
        c = torch.tensor(
            [sum(verify_boxed(x.text, a) for x in cs) for cs, a in zip(comps, data["answer"])]
        )
        name = Path(name).stem if Path(name).exists() else name
        out[name] = {"k": ks, "pass@k": [float(pass_at_k(pcfg.eval_n, c, k).mean()) for k in ks]}
        logger.info(
            "%s: pass@1 %.4f pass@%d %.4f",
            name,
            out[name]["pass@k"][0],
            ks[-1],
            out[name]["pass@k"][-1],
        )
    path = Path(model_path) / "eval.json"
    path.write_text(json.dumps(out, indent=2))
    return out


def compare(method_eval: str, baseline_eval: str) -> dict[str, float]:
    """Test-time-scaling efficiency per eval set from two ``eval.json`` files (Fig. 5)."""
    a, b = json.loads(Path(method_eval).read_text()), json.loads(Path(baseline_eval).read_text())
    return {s: tts_efficiency(a[s]["k"], a[s]["pass@k"], b[s]["pass@k"]) for s in a if s in b}


def main(argv: list[str] | None = None) -> None:
    """``python -m methods.maxrl.paper {train|eval MODEL|compare A B} [overrides]``."""
    from omegaconf import OmegaConf

    from common.registry import compose

    from .run import _to_config

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("train", "eval", "compare"):
        raise SystemExit(
            "usage: python -m methods.maxrl.paper {train|eval MODEL|compare A B} [overrides]"
        )
    cmd, rest = argv[0], argv[1:]
    logging.basicConfig(level=logging.INFO)
    if cmd == "compare":
        print(json.dumps(compare(rest[0], rest[1]), indent=2))  # noqa: T201 (CLI output)
        return
    positional = [a for a in rest if "=" not in a]
    cfg = compose(["experiment=maxrl_paper", *[a for a in rest if "=" in a]])
    mcfg = _to_config(cfg.method)
    pcfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(PaperConfig), cfg.method.paper))
    if cmd == "train":
        train(mcfg, pcfg)
    else:
        evaluate(positional[0], pcfg)


if __name__ == "__main__":
    main()
