"""Paper-scale stages (§6, App. B): trie SFT -> P-GRPO -> six-benchmark evaluation with token latency.

Each stage is ``icml26 experiment=threadweaver_paper method.stage=<stage>`` (or the same after
``accelerate launch --config_file configs/accelerate/<x>.yaml -m common.cli``):

* ``sft``  - ``model`` (Qwen3-8B) + the tags as single tokens, trained with
  :class:`~methods.threadweaver.sft.TrieSFTTrainer` on ``method.sft_data`` (rows with ``problem`` and
  ``response``; App. B: 8 epochs for the 959 stage-1 traces, 1 for self-training). The knobs are
  :class:`~methods.threadweaver.sft.TrieSFTConfig` fields (``method.sft_trainer``);
  ``sft_mode=ar`` is the plain autoregressive baseline. Saves model + tokenizer to
  ``<run_dir>/model``.
* ``rl``   - :class:`~methods.threadweaver.pgrpo_trainer.PGRPOTrainer` from ``model`` (the SFT
  checkpoint through ``model.path``) on ``method.rl_data`` (``problem``/``answer``), fork/join
  rollouts on HF ``generate`` or, with ``rl_trainer.use_vllm``, on TRL's colocated vLLM.
  ``rl_trainer.parallel_rollouts=false`` is the sequential-GRPO baseline.
* ``eval`` - orchestrated sampling on every set of ``benchmark`` (AIME24/25, AMC23, MATH500,
  Minerva, OlympiadBench) with Avg@k (k = 32, 32, 8, 1, 4, 8; §6.1), writing accuracy, token
  latency (critical path, §3.3), total tokens, η and activation ratio per set plus per-problem
  records; ``method.eval.baseline_records`` adds the speedups of Table 1.

The model is loaded with the attention implementation that serves ``method.mask_impl``
(``dense`` -> SDPA, ``flex`` -> FlexAttention). Sets are read from local files (json/jsonl/parquet or
``save_to_disk`` folders, ``benchmark.sets.<set>.path``) in their hub layouts (:func:`load_problems`)
or from the hub cache; nothing is downloaded at run time.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common.config import DatasetSpec, ModelConfig, Run, model_id, trainer_config
from common.tracking import write_results

from .config import ThreadWeaverRunConfig
from .engines import HFGenerateEngine, VLLMEngine
from .format import FormatError, parse
from .metrics import speedup_report
from .orchestrator import OrchestratorConfig, ParallelOrchestrator
from .pgrpo import extract_last_boxed, is_correct
from .trie import Packed, build_packed, extract_units

logger = logging.getLogger(__name__)

__all__ = [
    "BENCHMARKS",
    "PROMPT_SUFFIX",
    "compare",
    "eval_stage",
    "evaluate",
    "load_problems",
    "prompt_ids",
    "rl_stage",
    "sft_packs",
    "sft_stage",
]

#: name -> (hub id the files come from, k of Avg@k) [paper §6.1; hub ids inferred].
BENCHMARKS: dict[str, tuple[str, int]] = {
    "aime24": ("math-ai/aime24", 32),
    "aime25": ("math-ai/aime25", 32),
    "amc23": ("math-ai/amc23", 8),
    "math500": ("HuggingFaceH4/MATH-500", 1),
    "minerva": ("math-ai/minervamath", 4),
    "olympiadbench": ("math-ai/olympiadbench", 8),
}

#: Appended to every problem (official ``generated_data_to_training_data_polaris.py`` prompt).
PROMPT_SUFFIX = " Let's think step by step and output the final answer within \\boxed{}."


def _answer_of(row: dict) -> str:
    from common.tasks.math_sets import answer_text

    for key in ("answer", "final_answer", "expected_answer"):
        # answer_text: AMC23's float 27.0 -> "27"; OlympiadBench's ["$-2$", "$2$"] -> "-2, 2"
        val = answer_text(row[key]) if row.get(key) not in (None, "", []) else ""
        if val:
            return val.strip("$").strip()
    boxed = extract_last_boxed(str(row.get("solution") or ""))
    if boxed:
        return boxed
    raise ValueError(f"row has no answer/final_answer or boxed solution (columns {sorted(row)})")


def _problem_rows(ds, limit: int | None) -> list[dict]:
    rows = []
    for row in ds:
        stmt = next((row[k] for k in ("problem", "question", "Problem") if row.get(k)), None)
        if stmt is None:
            raise ValueError(f"row has no problem/question column (columns {sorted(row)})")
        rows.append({"problem": str(stmt), "answer": _answer_of(row)})
        if limit is not None and len(rows) >= limit:
            break
    return rows


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
    return _problem_rows(ds, limit)


def load_set(spec: DatasetSpec) -> list[dict]:
    """A benchmark/RL set by :class:`~common.config.DatasetSpec`: the local ``path`` (read by
    :func:`load_problems`) or the hub id from the local cache (``spec.columns`` renames first)."""
    if spec.path:
        return load_problems(spec.path, split=spec.split, limit=spec.limit)
    if not spec.hub_id:
        raise ValueError("a set needs `path` (local file) or `hub_id`")
    from datasets import load_dataset

    ds = load_dataset(spec.hub_id, spec.config, split=spec.split)
    renames = {col: name for name, col in spec.columns.items() if col != name}
    if renames:
        ds = ds.rename_columns(renames)
    return _problem_rows(ds, spec.limit)


def prompt_ids(tokenizer, problem: str) -> list[int]:
    """Chat-templated prompt ids (user turn = problem + :data:`PROMPT_SUFFIX`, generation prompt)."""
    msgs = [{"role": "user", "content": problem + PROMPT_SUFFIX}]
    ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


def sft_packs(
    tokenizer,
    rows: Sequence[dict],
    max_length: int | None,
    join_suffix: str = "\n</Parallel>",
    mode: str = "trie",
) -> tuple[list[Packed], int]:
    """Trie-packed SFT examples from ``{"problem", "response"}`` rows (§3.3).

    Args:
        max_length: packed length limit; rows whose full trajectory is longer are dropped.
        join_suffix: the orchestrator's join suffix the traces were written with.
        mode: ``"trie"`` (every orchestrator request, §3.3) or ``"ar"`` (the full trajectory only:
            a plain causal sequence, the official autoregressive baseline).

    Returns:
        ``(packs, n_dropped)``: rows whose response fails :func:`parse` or whose full trajectory is
        longer than ``max_length`` are dropped and counted (never cut mid-unit).
    """
    if mode not in ("trie", "ar"):
        raise ValueError(f"mode must be 'trie' or 'ar', got {mode!r}")

    def enc(s: str) -> list[int]:
        return tokenizer(s, add_special_tokens=False)["input_ids"]

    packs, dropped = [], 0
    for row in rows:
        try:
            traj = parse(row["response"], join_suffix)
        except FormatError as e:
            logger.debug("sft_packs: dropped a malformed trace (%s)", e)
            dropped += 1
            continue
        prompt = prompt_ids(tokenizer, row["problem"])
        _, units = extract_units(prompt, traj, enc, tokenizer.eos_token_id, join_suffix)
        if max_length is not None and len(units[0].ids) > max_length:
            dropped += 1
            continue
        packs.append(build_packed(units if mode == "trie" else units[:1], max_length))
    return packs, dropped


def _model_spec(run: Run) -> ModelConfig:
    if run.model is None:
        raise ValueError(
            f"method.stage={run.method.stage} needs a model (model=<name>, configs/model/)"
        )
    return run.model


def _load(run: Run, training: bool, conclusion: bool = False):
    """Model + tokenizer of ``run.model`` with the tags registered (and the attention
    implementation serving ``method.mask_impl`` when ``training``)."""
    from common.models import load_model, load_tokenizer

    from .format import CONCLUSION_TAGS, TAGS
    from .special_tokens import add_threadweaver_tokens

    spec = _model_spec(run)
    attn = run.method.attn_implementation(spec.attn_implementation) if training else (
        spec.attn_implementation)  # fmt: skip
    path = model_id(spec)
    tiny = path.startswith("tiny-")
    kw = {"attn_implementation": attn} if attn and not tiny else {}
    model, tok = load_model(path, dtype=spec.dtype, **kw), load_tokenizer(path)
    if attn and tiny:
        model.set_attn_implementation(attn)
    tags = TAGS + CONCLUSION_TAGS if conclusion else TAGS
    add_threadweaver_tokens(model, tok, tags)  # no-op for tags that are already single tokens
    return model, tok


def _device_kwargs() -> dict[str, Any]:
    import torch

    if torch.cuda.is_available():
        return {}
    return {"use_cpu": True, "bf16": False, "dataloader_pin_memory": False}


def _read_rows(spec: DatasetSpec) -> list[dict]:
    """``{problem, response}`` rows of the SFT traces (jsonl/json/parquet or a hub id)."""
    from datasets import load_dataset

    if spec.path:
        p = Path(spec.path)
        if not p.exists():
            raise FileNotFoundError(f"method.sft_data.path {str(p)!r} not found")
        kinds = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
        if p.suffix not in kinds:
            raise ValueError(f"method.sft_data.path must end in {sorted(kinds)}, got {p.name!r}")
        ds = load_dataset(kinds[p.suffix], data_files=str(p), split="train")
    elif spec.hub_id:
        ds = load_dataset(spec.hub_id, spec.config, split=spec.split)
    else:
        raise ValueError(
            "method.stage=sft needs method.sft_data.path (a jsonl of {problem, response} parallel "
            "traces, e.g. from methods.threadweaver.data_pipeline) or method.sft_data.hub_id"
        )
    rows = [dict(r) for r in ds]
    if rows and not {"problem", "response"} <= set(rows[0]):
        raise ValueError(f"SFT rows need problem and response columns, got {sorted(rows[0])}")
    return rows[: spec.limit] if spec.limit is not None else rows


def _save(trainer, tok, out: Path) -> None:
    trainer.save_model(str(out))
    tok.save_pretrained(str(out))


def sft_stage(run: Run) -> dict[str, float]:
    """``stage=sft``: trie SFT (App. B) of ``model`` on ``method.sft_data``; saves ``run_dir/model``."""
    from .sft import TrieSFTConfig, TrieSFTTrainer, packed_dataset

    start, m = time.perf_counter(), run.method
    out = Path(run.run_dir) / "model"
    args = trainer_config(
        TrieSFTConfig, m.sft_trainer, output_dir=str(out), mask_impl=m.mask_impl,
        logging_steps=1, save_strategy="no", **_device_kwargs(),
    )  # fmt: skip
    model, tok = _load(run, training=True, conclusion=m.rollout.conclusion)
    packs, dropped = sft_packs(tok, _read_rows(m.sft_data), args.max_length,
                               m.rollout.join_suffix, args.sft_mode)  # fmt: skip
    if not packs:
        raise ValueError(f"no usable traces in method.sft_data ({dropped} dropped)")
    logger.info("threadweaver sft: %d tries (%d traces dropped)", len(packs), dropped)
    trainer = TrieSFTTrainer(model=model, args=args, train_dataset=packed_dataset(packs),
                             processing_class=tok)  # fmt: skip
    res = trainer.train()
    _save(trainer, tok, out)
    metrics = {"sft": {"train_loss": float(res.training_loss), "n_traces": float(len(packs)),
                       "n_dropped": float(dropped), "steps": float(res.global_step)}}  # fmt: skip
    return write_results(run.run_dir, "threadweaver", metrics, cfg=run.cfg,
                         wall_time_s=time.perf_counter() - start,
                         notes=f"{args.sft_mode} SFT checkpoint: {out}")  # fmt: skip


def _orch_cfg(m: ThreadWeaverRunConfig, temperature: float, top_p: float,
              parallel: bool) -> OrchestratorConfig:  # fmt: skip
    r = m.rollout
    return OrchestratorConfig(
        budget_total=r.budget_tokens, max_model_len=r.max_model_len, max_iters=r.max_iters,
        join_suffix=r.join_suffix, temperature=temperature, top_p=top_p, parallel=parallel,
        conclusion=r.conclusion,
    )  # fmt: skip


def rl_stage(run: Run) -> dict[str, float]:
    """``stage=rl``: P-GRPO (§5, App. B) from ``model`` on ``method.rl_data``; saves ``run_dir/model``."""
    from datasets import Dataset

    from .pgrpo_trainer import PGRPOConfig, PGRPOTrainer

    start, m = time.perf_counter(), run.method
    out = Path(run.run_dir) / "model"
    r = m.rollout
    args = trainer_config(
        PGRPOConfig, m.rl_trainer, output_dir=str(out), mask_impl=m.mask_impl,
        rollout_budget_tokens=r.budget_tokens, rollout_max_model_len=r.max_model_len,
        rollout_max_iters=r.max_iters, join_suffix=r.join_suffix, conclusion=r.conclusion,
        logging_steps=1, report_to="none", save_strategy="no", **_device_kwargs(),
    )  # fmt: skip
    model, tok = _load(run, training=True, conclusion=r.conclusion)
    rows = load_set(m.rl_data)
    ds = Dataset.from_list([{"prompt": x["problem"], "answer": x["answer"]} for x in rows])
    trainer = PGRPOTrainer(
        model=model, args=args, train_dataset=ds, processing_class=tok,
        engine_factory=VLLMEngine.from_trainer if args.use_vllm else None,
        encode_prompt=lambda p: prompt_ids(tok, p),
    )  # fmt: skip
    res = trainer.train()
    _save(trainer, tok, out)
    rew = trainer.last_rewards
    metrics = {"rl": {"train_loss": float(res.training_loss), "steps": float(res.global_step),
                      "last_mean_reward": float(rew.mean()) if rew is not None else math.nan}}  # fmt: skip
    return write_results(run.run_dir, "threadweaver", metrics, cfg=run.cfg,
                         wall_time_s=time.perf_counter() - start,
                         notes=f"P-GRPO checkpoint: {out}")  # fmt: skip


def evaluate(
    orch_cfg: OrchestratorConfig,
    tok,
    sets: dict[str, list[dict]],
    engine,
    avg_at_k: dict[str, int] | None = None,
) -> tuple[dict[str, dict[str, float]], dict[str, list[dict]]]:
    """Avg@k accuracy and token latency on each set through the orchestrator (§6.1, Tab. 1).

    Args:
        orch_cfg: orchestrator settings (``parallel=False``: hybrid AR mode).
        sets: name -> ``[{"problem", "answer"}]``; ``avg_at_k`` overrides :data:`BENCHMARKS`' k.
        engine: a :class:`CompletionEngine` (HF ``generate`` or vLLM).

    Returns:
        ``(metrics, records)``: ``metrics[name]`` with ``accuracy``, ``token_latency``,
        ``total_tokens``, ``eta``, ``activation_ratio``, ``self_speedup`` (mean L_total/L_longest)
        and ``n``; ``records[name]`` one dict per problem with per-sample ``longest``/``correct``.
    """
    orch = ParallelOrchestrator(engine, tok, orch_cfg)
    metrics, records = {}, {}
    for name, probs in sets.items():
        k = (avg_at_k or {}).get(name, BENCHMARKS.get(name, ("", 1))[1])
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


def eval_stage(run: Run) -> dict[str, float]:
    """``stage=eval``: Avg@k accuracy and token latency of ``model`` on every set of ``benchmark``."""
    start, m, e = time.perf_counter(), run.method, run.method.eval
    if run.benchmark is None or not run.benchmark.sets:
        raise ValueError("method.stage=eval needs benchmark=<suite> (configs/benchmark/)")
    sets = {name: load_set(spec) for name, spec in run.benchmark.sets.items()}
    if e.engine == "vllm":
        from common.models import load_tokenizer

        path = model_id(_model_spec(run))
        tok, engine = load_tokenizer(path), VLLMEngine(path, seed=run.seed)
    else:
        model, tok = _load(run, training=False, conclusion=m.rollout.conclusion)
        engine = HFGenerateEngine(model.eval(), tok.pad_token_id, seed=run.seed)
    kk = None if e.samples is None else dict.fromkeys(sets, e.samples)
    metrics, records = evaluate(_orch_cfg(m, e.temperature, e.top_p, e.parallel), tok, sets,
                                engine, kk)  # fmt: skip
    extra: dict[str, Any] = {}
    if e.baseline_records:
        extra["speedup"] = compare(json.loads(Path(e.baseline_records).read_text()), records)
        for name, rep in extra["speedup"].items():
            metrics[name].update({f"speedup/{k}": float(v) for k, v in rep.items()
                                  if isinstance(v, (int, float))})  # fmt: skip
    out = Path(run.run_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "records.json").write_text(json.dumps(records))
    return write_results(run.run_dir, "threadweaver", metrics, cfg=run.cfg, extra=extra,
                         wall_time_s=time.perf_counter() - start,
                         notes=f"per-problem records: {out / 'records.json'} (input of "
                               "method.eval.baseline_records)")  # fmt: skip
