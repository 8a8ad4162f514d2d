"""The paper stages: ``icml26 experiment=webworld_paper method.stage=<stage> [overrides]``.

Stages (settings under ``method.paper``; SFT recipes in the ``*_trainer`` nodes; the checkpoint is
``model``, the evaluation suite ``benchmark``):

* ``stage1``: full SFT of a Qwen3 base model on WebWorldData chats (every assistant turn, Table 9);
* ``stage2``: continue from a Stage-1 checkpoint (``model.path``) on ~1K CoT chats, last turn only;
* ``synth``: roll an agent out inside the served world model on seed tasks, keep value-approved
  rollouts (:func:`methods.webworld.synthesis.synthesize`) and write them as JSONL;
* ``agent``: SFT of ``model`` as an agent on the synthesised trajectories (one step per sample);
* ``bench``: WebWorld-Bench (:func:`methods.webworld.bench.evaluate`) of ``model`` on ``benchmark``.

Launch training under ``accelerate launch --config_file configs/accelerate/deepspeed_zero3.yaml -m
common.cli experiment=webworld_paper method.stage=stage1``. Every stage also runs on a tiny local
model (tests/test_paper_presets.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from datasets import Dataset

logger = logging.getLogger(__name__)

__all__ = [
    "agent_stage",
    "bench_stage",
    "iter_chats",
    "load_chats",
    "stage1_stage",
    "stage2_stage",
    "synth_stage",
]


def iter_chats(
    source: str, max_samples: int | None = None, max_leading_bad: int = 20
) -> Iterator[dict]:
    """Yields ``{"messages": [...]}`` chats from ``hf:<repo>`` (streamed) or a local JSONL path.

    Rows may be in either layout of :data:`methods.webworld.data.CHAT_LAYOUTS` (chat
    ``messages``, or the ShareGPT ``conversations`` of ``Qwen/WebWorldData``). Once a chat has been
    read, corrupt lines and malformed rows are skipped and counted in one warning at the end.

    Raises:
        ValueError: when the first ``max_leading_bad`` rows are all unusable, naming the first bad
            row and the expected layouts (before streaming the rest of a ~52 GB file).
    """
    from methods.webworld.data import CHAT_LAYOUTS, chat_messages

    n = bad = 0
    first_error = ""
    for i, row in enumerate(_rows(source)):
        try:
            if isinstance(row, json.JSONDecodeError):
                raise ValueError(f"not JSON ({row.msg})")
            msgs = chat_messages(row)
        except ValueError as err:
            bad += 1
            first_error = first_error or f"row {i}: {err}"
            if n == 0 and bad >= max_leading_bad:
                raise ValueError(
                    f"{source}: the first {bad} rows are all unusable (first: {first_error}); "
                    f"each row must be {CHAT_LAYOUTS}"
                ) from err
            continue
        yield {"messages": msgs}
        n += 1
        if max_samples is not None and n >= max_samples:
            break
    if bad:
        logger.warning(
            "%s: skipped %d corrupt or malformed rows (first: %s)", source, bad, first_error
        )


def _rows(source: str) -> Iterator[Any]:
    """Rows of ``hf:<repo>`` (streamed train split) or a JSONL file; a corrupt line is yielded as
    its :class:`json.JSONDecodeError` so that the caller counts it."""
    if source.startswith("hf:"):
        from datasets import load_dataset

        yield from load_dataset(source[3:], split="train", streaming=True)
        return
    with open(source, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as err:
                yield err


def load_chats(
    source: str, tokenizer: Any = None, max_length: int | None = None, max_samples=None
) -> tuple[Dataset, dict[str, int]]:
    """Materialises chats; with ``tokenizer`` and ``max_length``, drops over-length chats (counted).

    Returns:
        ``(dataset, counts)`` with ``kept`` and ``too_long``.
    """
    kept, too_long = [], 0
    for c in iter_chats(source, max_samples):
        if tokenizer is not None and max_length is not None:
            text = tokenizer.apply_chat_template(c["messages"], tokenize=False)
            n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
            if n > max_length:
                too_long += 1
                continue
        kept.append(c)
    if not kept:
        raise ValueError(f"no usable chats in {source}")
    return Dataset.from_list(kept), {"kept": len(kept), "too_long": too_long}


def _model(run: Any, padding_side: str = "right"):
    from common.config import model_id
    from common.models import load_model, load_tokenizer

    if run.model is None:
        raise ValueError("this stage needs a `model` (experiment=webworld_paper selects one)")
    spec = model_id(run.model)
    return load_model(spec, dtype=run.model.dtype), load_tokenizer(spec, padding_side=padding_side)


def _source(spec: Any) -> str:
    """``iter_chats`` source of a DatasetSpec: its local path, else ``hf:<hub_id>`` (streamed)."""
    if spec.path:
        return spec.path
    if not spec.hub_id:
        raise ValueError("method.paper.data needs a hub_id or a path")
    return f"hf:{spec.hub_id}"


def _train(run: Any, stage: int) -> dict[str, float]:
    from common.tracking import write_results
    from methods.webworld.train import (
        last_turn_dataset,
        stage1_config,
        stage2_config,
        train_world_model,
    )

    p = run.method.paper
    model, tok = _model(run)
    mk = stage1_config if stage == 1 else stage2_config
    out = str(Path(p.output_dir) / f"stage{stage}")
    node = dict(getattr(run.method, f"stage{stage}_trainer") or {})
    cfg = mk(p.size, output_dir=out, **node)
    source = _source(p.data) if stage == 1 else p.stage2_data
    ds, counts = load_chats(source, tok, cfg.max_length, p.max_samples if stage == 1 else None)
    if stage == 2:
        ds = last_turn_dataset(ds)
    model, loss = train_world_model(model, tok, ds, cfg)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    logger.info("stage %d done: loss %.4f, %s -> %s", stage, loss, counts, out)
    metrics = {
        f"stage{stage}": {"train_loss": float(loss), **{k: float(v) for k, v in counts.items()}}
    }
    return write_results(run.run_dir, "webworld", metrics, cfg=run.cfg, extra={"output_dir": out})


def stage1_stage(run: Any) -> dict[str, float]:
    """``stage1``: Stage-1 SFT (paper §3.5, Table 9) of ``model``; saves ``<output_dir>/stage1``."""
    return _train(run, 1)


def stage2_stage(run: Any) -> dict[str, float]:
    """``stage2``: Stage-2 CoT SFT (Table 9) from ``model`` (``model.path`` = the Stage-1 output)."""
    return _train(run, 2)


def _chat(name: str, url: str | None, **kw: Any):
    from common.llm import OpenAIChat

    return OpenAIChat(name, base_url=url, **kw)


def synth_stage(run: Any) -> dict[str, float]:
    """``synth``: agent rollouts inside the served world model, kept when the value model says
    the goal is reached (paper §5); writes ``<output_dir>/synth.jsonl``."""
    from common.tracking import write_results
    from methods.webworld.actions import extract_action
    from methods.webworld.search import llm_value_fn
    from methods.webworld.simulator import WebWorldSimulator
    from methods.webworld.synthesis import AGENT_PROMPT, synthesize

    p = run.method.paper
    s = p.synth
    wm = _chat(s.world_model, s.world_model_url, max_tokens=s.wm_max_tokens, temperature=0.7)
    sim = WebWorldSimulator(wm, window=s.window)
    agent_llm = _chat(s.agent, s.agent_url, max_tokens=256, temperature=0.5)
    value_llm = _chat(s.value_model, s.value_url, max_tokens=256, temperature=0.0)

    def agent(goal: str, state: str) -> str:
        reply = agent_llm.chat(
            [{"role": "user", "content": AGENT_PROMPT.format(goal=goal, state=state)}]
        )
        return extract_action(reply)  # <action> span (demo format) or the last line

    rows = [json.loads(x) for x in Path(s.seeds).read_text().splitlines() if x.strip()]
    tasks = [(r["goal"], r["s0"]) for r in rows]
    trajs, counts = synthesize(
        agent,
        sim,
        tasks[: s.n_target],
        lambda g, st: llm_value_fn(value_llm, g)(st) >= 1.0,
        max_steps=s.max_steps,
    )
    out = Path(p.output_dir) / "synth.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as fh:
        for t in trajs:
            fh.write(json.dumps({"goal": t.instruction, "states": t.states, "actions": t.actions}))
            fh.write("\n")
    logger.info("synthesis: %s -> %s", counts, out)
    metrics = {"synth": {k: float(v) for k, v in counts.items()}}
    return write_results(run.run_dir, "webworld", metrics, cfg=run.cfg, extra={"path": str(out)})


def agent_stage(run: Any) -> dict[str, float]:
    """``agent``: SFT of ``model`` on the synthesised trajectories (one step per sample, loss on
    the action); the recipe is the ``agent_trainer`` node (lr and epochs inferred)."""
    import torch
    from trl import SFTConfig

    from common.config import trainer_config
    from common.tracking import write_results
    from methods.webworld.data import Trajectory
    from methods.webworld.synthesis import agent_sft_dataset
    from methods.webworld.train import train_world_model

    p = run.method.paper
    rows = [json.loads(x) for x in Path(p.agent_data).read_text().splitlines() if x.strip()]
    trajs = [Trajectory(r["goal"], r["states"], r["actions"]) for r in rows]
    ds = agent_sft_dataset(trajs)
    model, tok = _model(run)
    out = str(Path(p.output_dir) / "agent")
    gpu = torch.cuda.is_available()
    cfg = trainer_config(
        SFTConfig,
        run.method.agent_trainer,
        output_dir=out,
        report_to="none",
        save_strategy="no",
        completion_only_loss=True,
        warmup_steps=0.1,  # a ratio (float < 1); inferred, as the recipe
        bf16=gpu and torch.cuda.is_bf16_supported(),
        use_cpu=not gpu,
    )
    model, loss = train_world_model(model, tok, ds, cfg)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    metrics = {"agent": {"train_loss": float(loss), "n_samples": float(len(ds))}}
    return write_results(run.run_dir, "webworld", metrics, cfg=run.cfg, extra={"output_dir": out})


def bench_stage(run: Any) -> dict[str, float]:
    """``bench``: WebWorld-Bench of ``model`` (served at ``bench.wm_url``, or loaded) on every set of
    ``benchmark`` (one file per dimension, chat or upstream layout), judged by ``bench.judge``."""
    from common.config import dataset_source
    from common.tracking import write_results
    from methods.webworld.bench import evaluate
    from methods.webworld.bench_data import load_bench_file

    b = run.method.paper.bench
    if run.benchmark is None:
        raise ValueError("the bench stage needs a `benchmark` (benchmark=webworld_bench)")
    samples, skipped, missing = [], 0, []
    for dim, spec in run.benchmark.sets.items():
        limit = spec.limit if spec.limit is not None else b.n_samples
        path = Path(dataset_source(spec))
        if not path.is_file():
            missing.append(dim)
            continue
        got, k = load_bench_file(path, dim, limit)
        samples += got
        skipped += k
    if missing:
        logger.warning("bench: no file for dimensions %s; they are left out", missing)
    if not samples:
        raise ValueError(
            f"no bench samples in the sets of benchmark {run.benchmark.name} (missing: {missing}); "
            "set WEBWORLD_BENCH or benchmark.sets.<dim>.path"
        )
    if b.wm_url:
        wm: Any = _chat(run.model.name, b.wm_url, max_tokens=b.max_new_tokens,
                        temperature=b.temperature, top_p=b.top_p)  # fmt: skip
    else:
        from common.generation import HFGenerator

        model, tok = _model(run, padding_side="left")
        wm = HFGenerator(model, tok, batch_size=b.batch_size)
    judge = _chat(
        b.judge, b.judge_url, max_tokens=b.judge_max_tokens, temperature=b.judge_temperature
    )
    res = evaluate(
        wm, samples, judge, seed=run.seed, batch_size=b.batch_size,
        temperature=b.temperature, top_p=b.top_p, max_new_tokens=b.max_new_tokens,
    )  # fmt: skip
    extra = {"skipped_lines": skipped, "missing_dims": missing, "judge": b.judge}
    return write_results(run.run_dir, "webworld", res, cfg=run.cfg, extra=extra)
