"""``stage=paper``: the KMKC pipeline on ``model`` (profile → regions → CGKE SFT → CDKC, per round),
then accuracy, ECE and self-knowledge on every set of ``benchmark`` (FlashRAG layout)."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from common.config import DatasetSpec, Run, model_id
from common.tracking import write_results

__all__ = [
    "cdkc_stage", "eval_stage", "local_qa_file", "paper_stage", "profile_stage", "sft_stage",
]  # fmt: skip


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
    settings.pop("profiles_path")
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
    from .pipeline import load_qa_jsonl, profile_round

    pc, t0 = _paper_config(run), time.time()
    out = Path(pc.output_dir)
    items = [it for path, n in pc.train_sets.values() for it in load_qa_jsonl(path, n, pc.seed)]
    model, tok = _load(pc)  # after the data: a bad file stops the run before the model loads
    profiles, counts = profile_round(model, tok, pc, items, out)
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


def _load(pc):
    from common.models import load_model, load_tokenizer

    model, tok = load_model(pc.model, dtype=pc.dtype), load_tokenizer(pc.model)
    model.eval()
    return model, tok


def _profiles(run: Run):
    from .pipeline import load_profiles

    path = run.method.paper.profiles_path or str(Path(run.run_dir) / "paper" / "profile.jsonl")
    return load_profiles(path), path


def _save(model, tok, path: Path) -> str:
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def sft_stage(run: Run) -> dict[str, float]:
    """``stage=sft``: CGKE (paper Fig. 2) on the profiles of ``method.paper.profiles_path``: the model
    writes region-specific augmentations (``<run_dir>/paper/cgke/cgke.jsonl``), then ``trl``'s
    SFTTrainer fine-tunes it; the checkpoint goes to ``<run_dir>/paper/cgke/checkpoint``."""
    from .pipeline import cgke_round

    pc, t0 = _paper_config(run), time.time()
    profiles, src = _profiles(run)
    model, tok = _load(pc)
    out = Path(pc.output_dir) / "cgke"
    model, stats = cgke_round(model, tok, pc, profiles, out)
    ckpt = _save(model, tok, out / "checkpoint")
    metrics = {
        "cgke": {"n_profiles": float(len(profiles)), **{k: float(v) for k, v in stats.items()}}
    }
    return write_results(
        run.run_dir, "kmkc", metrics, cfg=run.cfg, extra={"profiles": src, "checkpoint": ckpt},
        wall_time_s=time.time() - t0, notes=f"CGKE SFT checkpoint: {ckpt}",
    )  # fmt: skip


def cdkc_stage(run: Run) -> dict[str, float]:
    """``stage=cdkc``: CDKC calibration (paper Fig. 2; objective our proposal) of ``model`` (e.g. ``model.path=<the sft
    stage's checkpoint>``) on the profiled seed questions and their regions; the checkpoint goes
    to ``<run_dir>/paper/cdkc/checkpoint``."""
    from .pipeline import calibrate_cdkc

    pc, t0 = _paper_config(run), time.time()
    profiles, src = _profiles(run)
    model, tok = _load(pc)
    out = Path(pc.output_dir) / "cdkc"
    model = calibrate_cdkc(model, tok, profiles, pc, out)
    ckpt = _save(model, tok, out / "checkpoint")
    regions = [p.region for p in profiles]
    metrics = {"cdkc": {f"n_{r}": float(regions.count(r)) for r in sorted(set(regions))}}
    return write_results(
        run.run_dir, "kmkc", metrics, cfg=run.cfg, extra={"profiles": src, "checkpoint": ckpt},
        wall_time_s=time.time() - t0, notes=f"CDKC checkpoint: {ckpt}",
    )  # fmt: skip


def eval_stage(run: Run) -> dict[str, float]:
    """``stage=eval``: greedy accuracy, ECE and self-knowledge of ``model`` on every set of
    ``benchmark`` (e.g. ``model.path=<a round's checkpoint>``)."""
    from .pipeline import evaluate, load_qa_jsonl, make_generator

    pc, t0 = _paper_config(run), time.time()
    out = Path(pc.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    sets = {name: load_qa_jsonl(path, n, pc.seed) for name, (path, n) in pc.eval_sets.items()}
    model, tok = _load(pc)  # after every set is read
    gen = make_generator(pc, model, tok, out)
    metrics = {name: evaluate(gen, pc, items) for name, items in sets.items()}
    return write_results(run.run_dir, "kmkc", metrics, cfg=run.cfg, wall_time_s=time.time() - t0)
