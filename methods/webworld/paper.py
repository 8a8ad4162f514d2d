"""Paper-scale drivers (spec §7): ``python -m methods.webworld.paper <command> [hydra overrides]``.

Commands (settings under ``method.paper`` of ``configs/experiment/webworld_paper.yaml``):

* ``stage1``: full SFT of a Qwen3 base model on WebWorldData-style chats (every assistant turn);
* ``stage2``: continue from a Stage-1 checkpoint on ~1K CoT chats, last assistant turn only;
* ``synth``: roll an agent out inside the world model on seed tasks, keep value-approved rollouts
  (:func:`methods.webworld.synthesis.synthesize`) and write them as JSONL;
* ``agent``: SFT an agent on synthesised trajectories (one step per sample);
* ``bench``: WebWorld-Bench (:func:`methods.webworld.bench.main`).

Launch training under ``accelerate launch --config_file configs/accelerate/deepspeed_zero3.yaml``;
models and data load by hub id or local path. Every command also runs on a tiny local model (tests).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from datasets import Dataset

logger = logging.getLogger(__name__)

__all__ = ["iter_chats", "load_chats", "main"]


def iter_chats(source: str, max_samples: int | None = None) -> Iterator[dict]:
    """Yields ``{"messages": [...]}`` chats from ``hf:<repo>`` (streamed) or a local JSONL path.

    Corrupt JSONL lines and chats that do not end with an assistant turn are skipped (and
    logged with a count at the end).
    """
    n = bad = 0
    if source.startswith("hf:"):
        from datasets import load_dataset

        rows: Any = load_dataset(source[3:], split="train", streaming=True)
    else:

        def _lines():
            nonlocal bad
            with open(source, encoding="utf-8") as fh:
                for line in fh:
                    if not line.strip():
                        continue
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError:
                        bad += 1

        rows = _lines()
    for row in rows:
        msgs = row.get("messages") if isinstance(row, dict) else None
        if not msgs or msgs[-1].get("role") != "assistant":
            bad += 1
            continue
        yield {"messages": [{"role": m["role"], "content": m["content"]} for m in msgs]}
        n += 1
        if max_samples is not None and n >= max_samples:
            break
    if bad:
        logger.warning("%s: skipped %d corrupt or malformed rows", source, bad)


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


def _model(spec: str):
    from common.models import load_model, load_tokenizer

    return load_model(spec, dtype="auto"), load_tokenizer(spec, padding_side="right")


def _train(p: Any, stage: int) -> dict[str, Any]:
    from methods.webworld.train import (
        last_turn_dataset,
        stage1_config,
        stage2_config,
        train_world_model,
    )

    spec = p.model if stage == 1 else p.stage2_init
    model, tok = _model(spec)
    mk = stage1_config if stage == 1 else stage2_config
    out = str(Path(p.output_dir) / f"stage{stage}")
    cfg = mk(p.size, output_dir=out, **dict(p.get(f"stage{stage}_overrides") or {}))
    ds, counts = load_chats(
        p.data if stage == 1 else p.stage2_data, tok, cfg.max_length, p.get("max_samples")
    )
    if stage == 2:
        ds = last_turn_dataset(ds)
    model, loss = train_world_model(model, tok, ds, cfg)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    logger.info("stage %d done: loss %.4f, %s -> %s", stage, loss, counts, out)
    return {"train_loss": loss, **counts, "output_dir": out}


def _synth(p: Any) -> dict[str, Any]:
    from common.llm import HFChat, OpenAIChat
    from methods.webworld.search import llm_value_fn
    from methods.webworld.simulator import WebWorldSimulator
    from methods.webworld.synthesis import AGENT_PROMPT, synthesize

    def chat(spec: str, **kw):
        if spec.startswith("openai:"):
            model, _, base = spec[len("openai:") :].partition("@")
            return OpenAIChat(model, base_url=base or None, **kw)
        m, t = _model(spec)
        t.padding_side = "left"
        return HFChat(m, t, max_new_tokens=kw.get("max_tokens", 256))

    s = p.synth
    sim = WebWorldSimulator(
        chat(s.world_model, max_tokens=s.wm_max_tokens, temperature=0.7), window=s.window
    )
    agent_llm = chat(s.agent, max_tokens=256, temperature=0.5)
    value_llm = chat(s.value_model, max_tokens=256, temperature=0.0)

    def agent(goal: str, state: str) -> str:
        reply = agent_llm.chat(
            [{"role": "user", "content": AGENT_PROMPT.format(goal=goal, state=state)}]
        )
        from methods.webworld.actions import extract_action

        return extract_action(reply)  # <action> span (demo format) or the last line

    tasks = [(r["goal"], r["s0"]) for r in map(json.loads, Path(s.seeds).read_text().splitlines())]
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
    return {**counts, "path": str(out)}


def _agent(p: Any) -> dict[str, Any]:
    from trl import SFTConfig

    from methods.webworld.data import Trajectory
    from methods.webworld.synthesis import agent_sft_dataset
    from methods.webworld.train import train_world_model

    a = p.agent
    rows = [json.loads(x) for x in Path(a.data).read_text().splitlines() if x.strip()]
    trajs = [Trajectory(r["goal"], r["states"], r["actions"]) for r in rows]
    ds = agent_sft_dataset(trajs)
    model, tok = _model(a.model)
    out = str(Path(p.output_dir) / "agent")
    kw = dict(
        output_dir=out,
        learning_rate=a.lr,
        num_train_epochs=a.epochs,
        report_to="none",
        save_strategy="no",
        completion_only_loss=True,
        max_length=a.max_length,
        per_device_train_batch_size=a.per_device_batch,
        gradient_accumulation_steps=a.grad_accum,
        bf16=a.bf16,
        lr_scheduler_type="cosine",
        warmup_steps=0.1,
    )
    kw.update(dict(a.get("overrides") or {}))
    model, loss = train_world_model(model, tok, ds, SFTConfig(**kw))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return {"train_loss": loss, "n_samples": len(ds), "output_dir": out}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Entry point: ``<command> [hydra overrides...]`` on top of ``experiment=webworld_paper``."""
    from common.registry import compose

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("stage1", "stage2", "synth", "agent", "bench"):
        raise ValueError("command must be one of stage1, stage2, synth, agent, bench")
    cmd, overrides = argv[0], argv[1:]
    cfg = compose(["experiment=webworld_paper", *overrides])
    p = cfg.method.paper
    if cmd == "stage1":
        return _train(p, 1)
    if cmd == "stage2":
        return _train(p, 2)
    if cmd == "synth":
        return _synth(p)
    if cmd == "agent":
        return _agent(p)
    from methods.webworld.bench import main as bench_main

    b = p.bench
    args = ["--model", b.model, "--judge", b.judge, "--data", b.data, "--out", b.out]
    args += ["--dims", *b.dims, "--max-new-tokens", str(b.max_new_tokens)]
    if b.get("n_samples"):
        args += ["--n-samples", str(b.n_samples)]
    return bench_main(args)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main()
