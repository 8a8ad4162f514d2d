"""The paper stages: ``select`` (representations + selection -> subset files) and ``finetune``
(full fine-tuning on one subset, then the query loss); the shared pipeline is in pipeline.py.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import torch

from common.config import Run, dataset_source, model_id, trainer_config

from .pipeline import selector_fns, similarities

__all__ = ["finetune_stage", "select_stage"]

logger = logging.getLogger(__name__)


def _training_args(node: dict, run: Run, out_dir: Path, **defaults: Any) -> Any:
    """``TrainingArguments`` from a preset's trainer node over the stage's CPU-safe defaults."""
    from .training import TuluTrainingArguments

    base = {
        "output_dir": str(out_dir),
        "lr_scheduler_type": "linear",  # repo
        "weight_decay": 0.0,  # repo
        "logging_steps": 1,
        "report_to": "none",
        "seed": run.seed,
        "use_cpu": not torch.cuda.is_available(),
        "dataloader_pin_memory": False,
        "remove_unused_columns": False,
        "disable_tqdm": True,
        **defaults,
    }
    return trainer_config(TuluTrainingArguments, node, **base)


def _load(run: Run):
    from common.models import load_model, load_tokenizer

    if run.model is None:
        raise ValueError("the paper stages need a model (override /model: <checkpoint>)")
    spec = model_id(run.model)
    model = load_model(spec, dtype=run.model.dtype)
    tok = load_tokenizer(spec, padding_side="right")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model, tok


def select_stage(run: Run) -> dict[str, float]:
    """``stage=select``: representations + selection on the pool; writes
    ``<run_dir>/subsets/<arm>_B<B>.json`` (pool ids), one file per arm and budget."""
    from common.tracking import write_results

    from .distance import wasserstein1
    from .paper_data import load_pool, load_queries

    cfg, run_dir = run.method, Path(run.run_dir)
    t0 = time.time()
    pool = load_pool(dataset_source(cfg.pool), cfg.pool.split, limit=cfg.pool.limit)
    q = cfg.queries
    queries = load_queries(dataset_source(q), q.config, q.split, limit=q.limit)
    warm = None
    if "less" in cfg.representations:
        w = cfg.warmup_data
        warm = load_pool(dataset_source(w), w.split, limit=w.limit)
    model, tok = _load(run)
    warm_args = _training_args(cfg.warmup, run, run_dir / "warmup", save_strategy="epoch")
    sims = similarities(
        cfg, model, tok, pool, queries, run.seed, warm_rows=warm, out_dir=run_dir,
        warmup_args=warm_args,
    )  # fmt: skip
    fns = selector_fns(cfg)
    out_dir = run_dir / "subsets"
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics: dict[str, dict[str, float]] = {}
    arms = [(f"{rep}_rr", rep, "rr") for rep in sims]
    arms += [
        (f"{cfg.selector_representation}_{s}", cfg.selector_representation, s)
        for s in cfg.selectors
        if s != "rr" and cfg.selector_representation in sims
    ]
    N = len(pool)
    if max(cfg.budgets) > N:  # official: ordered_indices[:k] keeps the whole pool when k > N
        logger.warning("budgets %s exceed the pool (%d rows): clipped to %d", cfg.budgets, N, N)
    for arm, rep, sel in arms:
        order = fns[sel](sims[rep], min(max(cfg.budgets), N))
        for B in cfg.budgets:
            ids = [pool[j]["id"] for j in order[:B]]
            (out_dir / f"{arm}_B{B}.json").write_text(json.dumps(ids))
            metrics.setdefault(arm, {})[f"w1@{B}"] = wasserstein1(sims[rep], order[:B], reg=0.05)
    return write_results(
        run_dir,
        "instruction_selection",
        metrics,
        cfg=run.cfg,
        extra={"subsets": str(out_dir)},
        wall_time_s=time.time() - t0,
    )


def finetune_stage(run: Run) -> dict[str, float]:
    """``stage=finetune``: full fine-tuning of ``model`` on ``method.subset_file`` (pool ids from
    ``select``) with the ``finetune`` trainer node, then the query loss on ``method.queries``.

    Raises:
        ValueError: if ``method.subset_file`` is unset.
    """
    from common.tracking import write_results

    from .paper_data import load_pool, load_queries
    from .training import query_loss, train_tulu

    cfg, run_dir = run.method, Path(run.run_dir)
    if not cfg.subset_file:
        raise ValueError("method.subset_file must name a subset JSON written by stage=select")
    t0 = time.time()
    ids = json.loads(Path(cfg.subset_file).read_text())
    wanted = set(ids)
    if len(wanted) != len(ids):
        raise ValueError(f"{cfg.subset_file} lists duplicate ids")
    rows = [r for r in load_pool(dataset_source(cfg.pool), cfg.pool.split) if r["id"] in wanted]
    if len(rows) != len(wanted):
        raise ValueError(f"{len(wanted) - len(rows)} subset ids are not in the pool")
    q = cfg.queries
    queries = load_queries(dataset_source(q), q.config, q.split, limit=q.limit)  # before the model
    model, tok = _load(run)
    out_dir = run_dir / "model"
    args = _training_args(cfg.finetune, run, out_dir, save_strategy="no")
    train_tulu(model, tok, rows, str(out_dir), max_length=cfg.max_length, args=args)
    model.save_pretrained(str(out_dir))
    tok.save_pretrained(str(out_dir))
    metrics = {
        "finetune": {
            "n_train": float(len(rows)),
            "query_loss": query_loss(model, tok, queries, cfg.max_length),
        }
    }
    return write_results(
        run_dir, "instruction_selection", metrics, cfg=run.cfg, wall_time_s=time.time() - t0
    )
