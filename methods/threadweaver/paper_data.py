"""The data stages of the paper (§4, §6.1, App. C/E): ``synth`` (stage 1) and ``self_train`` (stage 2).

* ``synth`` - sequential traces (``method.synth.source``: rows ``{problem, response, answer}``, the
  model's own correct traces) are rewritten into parallel ones by an OpenAI-compatible LLM (paper:
  GPT-5) through :func:`methods.threadweaver.data_pipeline.convert_trace` (annotate -> markup ->
  thread rewrites -> outlines -> filter). Writes ``<run_dir>/synth/stage1.jsonl`` (``{problem,
  response, answer}``, the input of ``stage=sft``) and the kept / dropped counts per failure.
* ``self_train`` - the stage-1 model (``model.path=<sft checkpoint>``) samples
  ``method.synth.samples`` fork/join rollouts per ``method.rl_data`` problem; format-valid and
  correct ones are kept (paper §4: 17,491 kept) in ``<run_dir>/self_train/self_train.jsonl``, the
  input of the second SFT (``method.sft_trainer.num_train_epochs=1``).

Both report the trajectory statistics of the paper's Table 8 (blocks per trajectory, threads per
block) over what they keep.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common.config import DatasetSpec, Run
from common.tracking import progress, write_results

from .data_pipeline import PipelineReport, convert_trace
from .format import JOIN_SUFFIX, THINK_CLOSE, FormatError, ParallelBlock, parse, validate
from .pgrpo import is_correct

__all__ = [
    "keep_rollouts", "self_train_stage", "split_sequential", "synth_stage", "trajectory_stats",
]  # fmt: skip


def split_sequential(response: str) -> tuple[str, str] | None:
    """``(trace, final)`` of a sequential response ``<think> trace </think> final``; None when the
    response has no ``</think>`` (such rows are counted as dropped)."""
    close = THINK_CLOSE.strip()
    if close not in response:
        return None
    head, final = response.rsplit(close, 1)
    return head.replace("<think>", "", 1).strip("\n"), final.strip()


def trajectory_stats(texts: list[str], join_suffix: str = JOIN_SUFFIX) -> dict[str, float]:
    """Blocks per trajectory and threads per block over parsed responses (paper Table 8)."""
    blocks, threads = [], []
    for t in texts:
        segs = parse(t, join_suffix).segments
        bs = [s for s in segs if isinstance(s, ParallelBlock)]
        blocks.append(len(bs))
        threads += [len(b.threads) for b in bs]
    mean = lambda xs: float(sum(xs) / len(xs)) if xs else float("nan")  # noqa: E731
    return {"blocks_per_trajectory": mean(blocks), "threads_per_block": mean(threads)}


def _read_traces(spec: DatasetSpec) -> list[dict]:
    from datasets import load_dataset

    if spec.path:
        p = Path(spec.path)
        if not p.is_file():
            raise FileNotFoundError(f"method.synth.source.path {str(p)!r} not found")
        ds = load_dataset("json", data_files=str(p), split="train")
    elif spec.hub_id:
        ds = load_dataset(spec.hub_id, spec.config, split=spec.split)
    else:
        raise ValueError(
            "method.stage=synth needs method.synth.source.path (a jsonl of sequential traces "
            "{problem, response, answer}) or method.synth.source.hub_id"
        )
    rows = [dict(r) for r in ds]
    need = {"problem", "response", "answer"}
    if not rows or not need <= set(rows[0]):
        got = sorted(rows[0]) if rows else "no rows"
        raise ValueError(f"method.synth.source rows need {sorted(need)}, got {got}")
    return rows


def _write_jsonl(rows: list[dict], path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def synth_stage(run: Run) -> dict[str, float]:
    """``stage=synth``: stage-1 rewriting of sequential traces by an LLM (§4, App. C/E)."""
    from common.llm import OpenAIChat

    start, m, s = time.perf_counter(), run.method, run.method.synth
    if m.rollout.join_suffix != JOIN_SUFFIX:
        raise ValueError(
            f"method.stage=synth writes the paper layout (join suffix {JOIN_SUFFIX!r}); "
            f"method.rollout.join_suffix is {m.rollout.join_suffix!r}"
        )
    rows = _read_traces(s.source)
    rows = rows[: s.n] if s.n is not None else rows
    llm = OpenAIChat(s.llm_model, base_url=s.llm_base_url, api_key_env=s.llm_api_key_env,
                     max_workers=s.workers, **s.llm_kwargs)  # fmt: skip

    def one(row: dict) -> tuple[str | None, PipelineReport]:
        rep = PipelineReport()
        parts = split_sequential(str(row["response"]))
        if parts is None:
            rep.dropped += 1
            rep.failures["source response has no </think>"] += 1
            return None, rep
        return convert_trace(parts[0], parts[1], str(row["answer"]), llm, rep), rep

    report, kept = PipelineReport(), []
    with ThreadPoolExecutor(max_workers=s.workers) as pool:
        done = progress(pool.map(one, rows), total=len(rows), desc="threadweaver synth")
        for row, (text, rep) in zip(rows, done, strict=True):
            report.kept += rep.kept
            report.dropped += rep.dropped
            report.failures.update(rep.failures)
            if text is not None:
                kept.append({"problem": row["problem"], "response": text, "answer": row["answer"]})
    path = _write_jsonl(kept, Path(run.run_dir) / "synth" / "stage1.jsonl")
    metrics = {"synth": {"n_source": float(len(rows)), "kept": float(report.kept),
                         "dropped": float(report.dropped), "llm_requests": float(llm.n_requests),
                         **trajectory_stats([r["response"] for r in kept])}}  # fmt: skip
    return write_results(run.run_dir, "threadweaver", metrics, cfg=run.cfg,
                         extra={"failures": dict(report.failures), "output": path},
                         wall_time_s=time.perf_counter() - start,
                         notes=f"stage-1 traces: {path} (method.sft_data.path of stage=sft)")  # fmt: skip


def keep_rollouts(
    texts: list[tuple[str, bool]], probs: list[dict], samples: int, join_suffix: str = JOIN_SUFFIX
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The stage-2 filter (§4): a rollout is kept when it finished, passes the strict format check
    and its boxed answer is correct.

    Args:
        texts: ``(response text, finished)`` per rollout, ``samples`` consecutive ones per problem.
        probs: ``[{"problem", "answer"}]``.

    Returns:
        ``(kept rows {problem, response, answer}, {"invalid": n, "incorrect": n})``.
    """
    if len(texts) != len(probs) * samples:
        raise ValueError(f"{len(texts)} rollouts for {len(probs)} problems x {samples} samples")
    kept: list[dict[str, Any]] = []
    counts = {"invalid": 0, "incorrect": 0}
    for i, (text, finished) in enumerate(texts):
        p = probs[i // samples]
        try:
            ok = finished and validate(text, strict=True, join_suffix=join_suffix).ok
        except FormatError:
            ok = False
        if not ok:
            counts["invalid"] += 1
        elif not is_correct(text, p["answer"]):
            counts["incorrect"] += 1
        else:
            kept.append({"problem": p["problem"], "response": text, "answer": p["answer"]})
    return kept, counts


def self_train_stage(run: Run) -> dict[str, float]:
    """``stage=self_train``: stage-2 data, the model's own valid and correct rollouts (§4)."""
    from .engines import HFGenerateEngine, VLLMEngine
    from .orchestrator import ParallelOrchestrator
    from .paper import _load, _model_spec, _orch_cfg, load_set, prompt_ids

    start, m, s = time.perf_counter(), run.method, run.method.synth
    probs = load_set(m.rl_data)
    if m.eval.engine == "vllm":
        from common.config import model_id
        from common.models import load_tokenizer

        path = model_id(_model_spec(run))
        tok, engine = load_tokenizer(path), VLLMEngine(path, seed=run.seed)
    else:
        model, tok = _load(run, training=False, conclusion=m.rollout.conclusion)
        engine = HFGenerateEngine(model.eval(), tok.pad_token_id, seed=run.seed)
    orch = ParallelOrchestrator(engine, tok, _orch_cfg(m, s.temperature, s.top_p, parallel=True))
    prompts = [prompt_ids(tok, p["problem"]) for p in probs for _ in range(s.samples)]
    rolls = orch.run_many(prompts)
    texts = []
    for r in rolls:
        ids = list(r.response_ids)
        while ids and ids[-1] in (tok.eos_token_id, tok.pad_token_id):
            ids.pop()  # the tags are added tokens: decode them, drop only the end-of-sequence
        texts.append((tok.decode(ids, skip_special_tokens=False), r.finish_reason == "stop"))
    kept, counts = keep_rollouts(texts, probs, s.samples, m.rollout.join_suffix)
    path = _write_jsonl(kept, Path(run.run_dir) / "self_train" / "self_train.jsonl")
    stats = trajectory_stats([r["response"] for r in kept], m.rollout.join_suffix)
    metrics = {"self_train": {"n_rollouts": float(len(rolls)), "kept": float(len(kept)),
                              **{k: float(v) for k, v in counts.items()}, **stats}}  # fmt: skip
    return write_results(run.run_dir, "threadweaver", metrics, cfg=run.cfg,
                         extra={"output": path}, wall_time_s=time.perf_counter() - start,
                         notes=f"self-training traces: {path} (method.sft_data.path of the "
                               "second stage=sft, num_train_epochs=1)")  # fmt: skip
