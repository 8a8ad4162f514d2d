"""``stage=paper``: the KMKC pipeline on ``model`` (profile → regions → CGKE SFT → CDKC, per round),
then accuracy, ECE and self-knowledge on every set of ``benchmark`` (FlashRAG layout)."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from common.config import DatasetSpec, Run, model_id
from common.tracking import write_results

__all__ = ["local_qa_file", "paper_stage"]


def local_qa_file(name: str, spec: DatasetSpec) -> str:
    """The local FlashRAG ``.jsonl`` of a set; hub sets must be exported beforehand.

    Raises:
        ValueError: when the set has no ``path`` (naming the set and the hub id to export).
    """
    if not spec.path:
        raise ValueError(
            f"set {name!r} has no local path: export {spec.hub_id} ({spec.config}, {spec.split}) "
            f"to a .jsonl and set its path (scripts/reproduce/kmkc.sh does this)"
        )
    return spec.path


def _paper_config(run: Run):
    from .pipeline import PaperConfig

    mc = run.method
    if run.model is None:
        raise ValueError(
            f"method.stage={mc.stage} needs a checkpoint: model=<name> (configs/model/)"
        )
    if run.benchmark is None or not run.benchmark.sets:
        raise ValueError(f"method.stage={mc.stage} needs benchmark=<suite> (configs/benchmark/)")
    settings = asdict(mc.paper)
    settings["k"] = settings.pop("samples")
    return PaperConfig(
        model=model_id(run.model),
        dtype=run.model.dtype,
        train_sets={n: (local_qa_file(n, s), s.limit) for n, s in mc.train_sets.items()},
        eval_sets={n: (local_qa_file(n, s), s.limit) for n, s in run.benchmark.sets.items()},
        output_dir=str(Path(run.run_dir) / "paper"),
        sft=dict(mc.sft),
        cdkc=dict(mc.cdkc),
        seed=run.seed,
        **settings,
    )


def paper_stage(run: Run) -> dict[str, float]:
    """``stage=paper``: :func:`methods.kmkc.pipeline.run_paper` (every round, then every set)."""
    from .pipeline import run_paper

    pc = _paper_config(run)
    t0 = time.time()
    results = run_paper(pc)
    return write_results(
        run.run_dir,
        "kmkc",
        results,
        cfg=run.cfg,
        wall_time_s=time.time() - t0,
        notes=f"paper pipeline: {pc.model}, {pc.rounds} round(s), engine {pc.engine}",
    )


def profile_stage(run: Run) -> dict[str, float]:
    """``stage=profile``: K samples per seed question, behavioural profiles and regions (paper §2,
    Fig. 2) of ``model``; writes ``<run_dir>/paper/profile.jsonl`` and the region counts."""
    import json

    from common.llm import HFChat
    from common.models import load_model, load_tokenizer

    from .pipeline import load_qa_jsonl, make_generator, profile_items
    from .regions import RegionConfig, assign_regions

    pc, t0 = _paper_config(run), time.time()
    out = Path(pc.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    model, tok = load_model(pc.model, dtype=pc.dtype), load_tokenizer(pc.model)
    model.eval()
    items = [it for path, n in pc.train_sets.values() for it in load_qa_jsonl(path, n, pc.seed)]
    profiles = profile_items(make_generator(pc, model, tok, out), pc, items)
    llm = HFChat(model, tok, max_new_tokens=256) if pc.self_evaluate else None
    counts = assign_regions(profiles, RegionConfig(**pc.regions), llm=llm)
    with open(out / "profile.jsonl", "w") as f:
        for p in profiles:
            f.write(json.dumps(p.to_dict(), default=str) + "\n")
    regions = [p.region for p in profiles]
    metrics = {
        "profile": {
            "n_items": float(len(profiles)),
            **{f"share_{r}": regions.count(r) / max(len(regions), 1) for r in sorted(set(regions))},
        }
    }
    return write_results(
        run.run_dir, "kmkc", metrics, cfg=run.cfg, extra={"regions": counts},
        wall_time_s=time.time() - t0, notes=f"profiles: {out / 'profile.jsonl'}",
    )  # fmt: skip


def eval_stage(run: Run) -> dict[str, float]:
    """``stage=eval``: greedy accuracy, ECE and self-knowledge of ``model`` on every set of
    ``benchmark`` (e.g. ``model.path=<a round's checkpoint>``)."""
    from common.models import load_model, load_tokenizer

    from .pipeline import evaluate, load_qa_jsonl, make_generator

    pc, t0 = _paper_config(run), time.time()
    out = Path(pc.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    model, tok = load_model(pc.model, dtype=pc.dtype), load_tokenizer(pc.model)
    model.eval()
    gen = make_generator(pc, model, tok, out)
    metrics = {
        name: evaluate(gen, pc, load_qa_jsonl(path, n, pc.seed))
        for name, (path, n) in pc.eval_sets.items()
    }
    return write_results(run.run_dir, "kmkc", metrics, cfg=run.cfg, wall_time_s=time.time() - t0)
