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


def paper_stage(run: Run) -> dict[str, float]:
    """Runs :func:`methods.kmkc.pipeline.run_paper` and writes ``results.json``."""
    from .pipeline import PaperConfig, run_paper

    mc = run.method
    if run.model is None:
        raise ValueError("method.stage=paper needs a checkpoint: model=<name> (configs/model/)")
    if run.benchmark is None or not run.benchmark.sets:
        raise ValueError("method.stage=paper needs benchmark=<suite> (configs/benchmark/)")
    out = Path(run.run_dir) / "paper"
    settings = asdict(mc.paper)
    settings["k"] = settings.pop("samples")
    pc = PaperConfig(
        model=model_id(run.model),
        dtype=run.model.dtype,
        train_sets={n: (local_qa_file(n, s), s.limit) for n, s in mc.train_sets.items()},
        eval_sets={n: (local_qa_file(n, s), s.limit) for n, s in run.benchmark.sets.items()},
        output_dir=str(out),
        sft=dict(mc.sft),
        cdkc=dict(mc.cdkc),
        seed=run.seed,
        **settings,
    )
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
