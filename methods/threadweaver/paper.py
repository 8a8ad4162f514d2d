"""Paper-scale drivers (spec §7): trie SFT -> P-GRPO -> six-benchmark evaluation with token latency.

Stages (``python -m methods.threadweaver.paper <stage> [--flags] [hydra overrides]``; the overrides,
e.g. ``experiment=threadweaver_paper``, select the method settings and ``model.name``):

* ``sft``  - Qwen3-8B (or ``--init`` checkpoint) + tags as single tokens, trained with
  :class:`~methods.threadweaver.sft.TrieSFTTrainer` on rewritten parallel traces (jsonl rows with
  ``problem`` and ``response``; App. B: 8 epochs for the 959 stage-1 traces, 1 for self-training).
* ``rl``   - :class:`~methods.threadweaver.pgrpo_trainer.PGRPOTrainer` from the SFT checkpoint on a
  prompt set (``problem``/``answer``), fork/join rollouts on HF ``generate`` or, with
  ``--engine vllm``, on TRL's colocated vLLM (weights synced every step). ``--sequential`` gives
  the sequential-GRPO baseline (no orchestrator, same advantages and loss).
* ``eval`` - orchestrated sampling on AIME24/25, AMC23, MATH500, Minerva, OlympiadBench with
  Avg@k (k = 32, 32, 8, 1, 4, 8; §6.1), writing accuracy, token latency (critical path, §3.3),
  total tokens, η and activation ratio per benchmark plus per-problem records; ``--baseline`` reads
  the sequential model's records and adds the speedups of Table 1.

Benchmarks are read from local files (json/jsonl/parquet or ``save_to_disk`` folders) in their hub
layouts (:func:`load_problems`); nothing is downloaded at run time.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .config import ThreadWeaverConfig
from .format import FormatError, parse
from .metrics import speedup_report
from .orchestrator import HFGenerateEngine, OrchestratorConfig, ParallelOrchestrator, VLLMEngine
from .pgrpo import extract_last_boxed, is_correct
from .trie import Packed, build_packed, extract_units

logger = logging.getLogger(__name__)

__all__ = [
    "BENCHMARKS",
    "PROMPT_SUFFIX",
    "evaluate",
    "load_problems",
    "main",
    "prompt_ids",
    "run_rl",
    "run_sft",
    "sft_packs",
]

#: name -> (hub id the files come from, k of Avg@k) [paper §6.1; hub ids: spec §5, inferred].
BENCHMARKS: dict[str, tuple[str, int]] = {
    "aime24": ("math-ai/aime24", 32),
    "aime25": ("math-ai/aime25", 32),
    "amc23": ("math-ai/amc23", 8),
    "math500": ("HuggingFaceH4/MATH-500", 1),
    "minerva": ("math-ai/minervamath", 4),
    "olympiadbench": ("math-ai/olympiadbench", 8),
}

#: Appended to every problem (official data-generation prompt; spec §3.1).
PROMPT_SUFFIX = " Let's think step by step and output the final answer within \\boxed{}."


def _answer_of(row: dict) -> str:
    for key in ("answer", "final_answer", "expected_answer"):
        val = row.get(key)
        if isinstance(val, (list, tuple)):
            val = val[0] if val else None
        if val not in (None, ""):
            return str(val).strip().strip("$").strip()
    boxed = extract_last_boxed(str(row.get("solution") or ""))
    if boxed:
        return boxed
    raise ValueError(f"row has no answer/final_answer or boxed solution (columns {sorted(row)})")


def load_problems(path: str | Path, split: str = "test", limit: int | None = None) -> list[dict]:
    """Read a math set in its hub layout into ``[{"problem", "answer"}]``.

    Accepts ``problem``/``question``/``Problem`` for the statement and ``answer`` (str or number),
    ``final_answer`` (OlympiadBench: a list of ``$...$`` strings) or a ``solution`` holding
    ``\\boxed{...}`` (MATH layout) for the gold answer.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: unknown file type or a row without statement/answer.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"benchmark file {str(p)!r} not found (download it beforehand)")
    from datasets import load_dataset, load_from_disk

    if p.is_dir():
        ds = load_from_disk(str(p))
        ds = ds[split] if hasattr(ds, "keys") else ds
    else:
        kinds = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
        if p.suffix not in kinds:
            raise ValueError(f"path must end in {sorted(kinds)}, got {p.name!r}")
        ds = load_dataset(kinds[p.suffix], data_files=str(p), split="train")
    rows = []
    for row in ds:
        stmt = next((row[k] for k in ("problem", "question", "Problem") if row.get(k)), None)
        if stmt is None:
            raise ValueError(f"row has no problem/question column (columns {sorted(row)})")
        rows.append({"problem": str(stmt), "answer": _answer_of(row)})
        if limit is not None and len(rows) >= limit:
            break
    return rows


def prompt_ids(tokenizer, problem: str) -> list[int]:
    """Chat-templated prompt ids (user turn = problem + :data:`PROMPT_SUFFIX`, generation prompt)."""
    msgs = [{"role": "user", "content": problem + PROMPT_SUFFIX}]
    ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


def sft_packs(tokenizer, rows: Sequence[dict], cfg: ThreadWeaverConfig) -> tuple[list[Packed], int]:
    """Trie-packed SFT examples from ``{"problem", "response"}`` rows (§3.3).

    Returns:
        ``(packs, n_dropped)``: rows whose response fails :func:`parse` or whose full trajectory is
        longer than ``cfg.sft_max_len`` are dropped and counted (never cut mid-unit).
    """

    def enc(s: str) -> list[int]:
        return tokenizer(s, add_special_tokens=False)["input_ids"]

    packs, dropped = [], 0
    for row in rows:
        try:
            traj = parse(row["response"], cfg.join_suffix)
        except FormatError as e:
            logger.debug("sft_packs: dropped a malformed trace (%s)", e)
            dropped += 1
            continue
        prompt = prompt_ids(tokenizer, row["problem"])
        _, units = extract_units(prompt, traj, enc, tokenizer.eos_token_id, cfg.join_suffix)
        if len(units[0].ids) > cfg.sft_max_len:
            dropped += 1
            continue
        packs.append(build_packed(units, cfg.sft_max_len))
    return packs, dropped


def _load(model_name: str, dtype: str = "auto"):
    from common.models import load_model, load_tokenizer

    from .special_tokens import add_threadweaver_tokens

    model, tok = load_model(model_name, dtype=dtype), load_tokenizer(model_name)
    add_threadweaver_tokens(model, tok)  # no-op for tags that are already single tokens
    return model, tok


def _device_kwargs() -> dict[str, Any]:
    import torch

    if torch.cuda.is_available():
        return {"bf16": True}
    return {"bf16": False, "use_cpu": True, "dataloader_pin_memory": False}


def _read_jsonl(path: str | Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run_sft(
    cfg: ThreadWeaverConfig,
    model_name: str,
    data: str | Path,
    out: str | Path,
    dtype: str = "auto",
    **train_kwargs: Any,
) -> Path:
    """Trie SFT (App. B) on a jsonl of parallel traces; saves model + tokenizer to ``out``."""
    from .sft import TrieSFTTrainer, packed_dataset, trie_sft_config

    model, tok = _load(model_name, dtype)
    packs, dropped = sft_packs(tok, _read_jsonl(data), cfg)
    if not packs:
        raise ValueError(f"no usable traces in {data} ({dropped} dropped)")
    logger.info("threadweaver sft: %d tries (%d traces dropped)", len(packs), dropped)
    kw: dict[str, Any] = {
        "output_dir": str(out),
        "learning_rate": cfg.sft_lr,
        "lr_scheduler_type": "cosine",
        "warmup_steps": cfg.sft_warmup_ratio,  # a float < 1 is a ratio (transformers 5)
        "weight_decay": cfg.sft_weight_decay,
        "adam_beta2": 0.95,
        "num_train_epochs": cfg.sft_epochs,
        "per_device_train_batch_size": 1,
        "logging_steps": 1,
        **_device_kwargs(),
    }
    if cfg.sft_steps:
        kw["max_steps"] = cfg.sft_steps
    kw.update(train_kwargs)
    trainer = TrieSFTTrainer(
        model=model,
        args=trie_sft_config(**kw),
        train_dataset=packed_dataset(packs),
        processing_class=tok,
        mask_impl=cfg.mask_impl,
    )
    trainer.train()
    trainer.save_model(str(out))
    tok.save_pretrained(str(out))
    return Path(out)


def _orch_cfg(cfg: ThreadWeaverConfig, parallel: bool = True) -> OrchestratorConfig:
    return OrchestratorConfig(
        budget_total=cfg.budget_total,
        max_model_len=cfg.max_model_len,
        max_iters=cfg.max_iters,
        join_suffix=cfg.join_suffix,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        parallel=parallel,
    )


def run_rl(
    cfg: ThreadWeaverConfig,
    init: str,
    prompts: str | Path,
    out: str | Path,
    sequential: bool = False,
    engine: str = "hf",
    dtype: str = "auto",
    **grpo_kwargs: Any,
) -> Path:
    """P-GRPO (§5, App. B) from ``init`` on a prompt set; ``sequential=True`` = the GRPO baseline."""
    from datasets import Dataset
    from trl import GRPOConfig

    from .pgrpo_trainer import PGRPOTrainer

    model, tok = _load(init, dtype)
    rows = load_problems(prompts)
    ds = Dataset.from_list([{"prompt": r["problem"], "answer": r["answer"]} for r in rows])
    kw: dict[str, Any] = {
        "output_dir": str(out),
        "learning_rate": cfg.rl_lr,
        "weight_decay": 0.0,
        "max_grad_norm": 1.0,
        "beta": 0.0,
        "num_iterations": 1,
        "loss_type": "dapo",
        "scale_rewards": "none",
        "num_generations": cfg.rl_k,
        "per_device_train_batch_size": cfg.rl_k * cfg.rl_prompts_per_step,
        "max_steps": cfg.rl_steps,
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        **_device_kwargs(),
    }
    engine_factory = None
    if engine == "vllm":
        kw.update(use_vllm=True, vllm_mode="colocate", vllm_enable_sleep_mode=False)
        engine_factory = VLLMEngine.from_trainer
    elif engine != "hf":
        raise ValueError(f"engine must be 'hf' or 'vllm', got {engine!r}")
    kw.update(grpo_kwargs)
    trainer = PGRPOTrainer(
        model=model,
        args=GRPOConfig(**kw),
        train_dataset=ds,
        processing_class=tok,
        orchestrator=_orch_cfg(cfg, parallel=not sequential),
        engine_factory=engine_factory,
        encode_prompt=lambda p: prompt_ids(tok, p),
        adv_norm=cfg.adv_norm,
        mask_impl=cfg.mask_impl,
        rho=cfg.rho,
        rho_clip=cfg.rho_clip,
        reward_variant=cfg.reward_variant,
    )
    trainer.train()
    trainer.save_model(str(out))
    tok.save_pretrained(str(out))
    return Path(out)


def evaluate(
    cfg: ThreadWeaverConfig,
    model,
    tok,
    benchmarks: dict[str, str | Path],
    engine=None,
    avg_at_k: dict[str, int] | None = None,
    limit: int | None = None,
    parallel: bool = True,
) -> tuple[dict[str, dict[str, float]], dict[str, list[dict]]]:
    """Avg@k accuracy and token latency on each benchmark through the orchestrator (§6.1, Tab. 1).

    Args:
        benchmarks: name -> local file; ``avg_at_k`` overrides :data:`BENCHMARKS`' k.
        engine: a :class:`CompletionEngine` (default HF ``generate`` on ``model``).

    Returns:
        ``(metrics, records)``: ``metrics[name]`` with ``accuracy``, ``token_latency``,
        ``total_tokens``, ``eta``, ``activation_ratio``, ``self_speedup`` (mean L_total/L_longest)
        and ``n``; ``records[name]`` one dict per problem with per-sample ``longest``/``correct``.
    """
    engine = engine or HFGenerateEngine(model, tok.pad_token_id)
    orch = ParallelOrchestrator(engine, tok, _orch_cfg(cfg, parallel))
    metrics, records = {}, {}
    for name, path in benchmarks.items():
        k = (avg_at_k or {}).get(name, BENCHMARKS.get(name, ("", 1))[1])
        probs = load_problems(path, limit=limit)
        prompts = [prompt_ids(tok, p["problem"]) for p in probs for _ in range(k)]
        rolls = orch.run_many(prompts)
        recs = []
        for i, p in enumerate(probs):
            rs = rolls[i * k : (i + 1) * k]
            texts = [tok.decode(r.response_ids, skip_special_tokens=False) for r in rs]
            recs.append(
                {
                    "problem": p["problem"],
                    "answer": p["answer"],
                    "correct": [bool(is_correct(t, p["answer"])) for t in texts],
                    "longest": [r.stats.longest for r in rs],
                    "total": [r.stats.total for r in rs],
                    "eta": [r.stats.eta for r in rs],
                    "parallel": [r.stats.has_parallel for r in rs],
                }
            )
        flat = lambda key, recs=recs: [x for r in recs for x in r[key]]  # noqa: E731
        mean = lambda xs: sum(xs) / len(xs) if xs else math.nan  # noqa: E731
        metrics[name] = {
            "accuracy": mean([float(c) for c in flat("correct")]),
            "token_latency": mean(flat("longest")),
            "total_tokens": mean(flat("total")),
            "eta": mean(flat("eta")),
            "activation_ratio": mean([float(x) for x in flat("parallel")]),
            "self_speedup": mean([t / max(1, lg) for t, lg in zip(flat("total"), flat("longest"))]),
            "n": float(len(recs)),
        }
        records[name] = recs
    return metrics, records


def compare(seq_records: dict[str, list[dict]], records: dict[str, list[dict]]) -> dict:
    """Table 1 speedups per benchmark (mean over problems of seq latency / our latency, §6.1)."""
    out = {}
    for name, recs in records.items():
        base = seq_records.get(name)
        if base is None or len(base) != len(recs):
            continue
        out[name] = speedup_report(
            [r["longest"] for r in base], [r["longest"] for r in recs],
            [r["correct"] for r in base], [r["correct"] for r in recs],
        )  # fmt: skip
    return out


def _config(overrides: Sequence[str]) -> tuple[ThreadWeaverConfig, str]:
    from common.registry import compose

    from .run import to_config

    hcfg = compose(list(overrides))
    return to_config(hcfg.method), str(hcfg.model.name)


def main(argv: Sequence[str] | None = None) -> dict:
    """Command line: ``sft``, ``rl`` or ``eval`` (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m methods.threadweaver.paper")
    ap.add_argument("stage", choices=["sft", "rl", "eval"])
    ap.add_argument("--data", help="sft: jsonl of {problem, response}; rl: prompt set")
    ap.add_argument("--init", help="checkpoint to start from (default: model.name)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--engine", default="hf", choices=["hf", "vllm"])
    ap.add_argument("--sequential", action="store_true", help="baseline: no orchestrator")
    ap.add_argument("--bench", action="append", default=[], help="eval: name=path (repeat)")
    ap.add_argument("--baseline", help="eval: records.json of the sequential model")
    ap.add_argument("--limit", type=int, default=None, help="eval: first N problems")
    ap.add_argument("--avg-at-k", type=int, default=None, help="eval: one k for all benchmarks")
    ap.add_argument("--max-steps", type=int, default=None, help="override the step count")
    args, overrides = ap.parse_known_args(argv)
    bad = [o for o in overrides if o.startswith("-") or "=" not in o]
    if bad:
        ap.error(f"unrecognized arguments (Hydra overrides look like key=value): {bad}")
    cfg, model_name = _config(overrides)
    init = args.init or model_name
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    steps = {} if args.max_steps is None else {"max_steps": args.max_steps}
    if args.stage == "sft":
        run_sft(cfg, init, args.data, out, **steps)
        return {"out": str(out)}
    if args.stage == "rl":
        run_rl(cfg, init, args.data, out, args.sequential, args.engine, **steps)
        return {"out": str(out)}
    benches = dict(b.split("=", 1) for b in args.bench)
    if args.engine == "vllm":
        from common.models import load_tokenizer

        model, tok, engine = None, load_tokenizer(init), VLLMEngine(init)
    else:
        model, tok = _load(init)
        engine = None
    kk = None if args.avg_at_k is None else dict.fromkeys(benches, args.avg_at_k)
    metrics, records = evaluate(cfg, model, tok, benches, engine, kk, args.limit,
                                parallel=not args.sequential)  # fmt: skip
    result: dict[str, Any] = {"metrics": metrics}
    if args.baseline:
        result["speedup"] = compare(json.loads(Path(args.baseline).read_text()), records)
    (out / "records.json").write_text(json.dumps(records))
    (out / "metrics.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":  # pragma: no cover
    logging.basicConfig(level=logging.INFO)
    main()
