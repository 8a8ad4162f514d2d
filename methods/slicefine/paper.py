"""SliceFine's paper stages: GLUE (RoBERTa) and VTAB-1K (ViT-B/16) with the HF Trainer.

``icml26 experiment=slicefine_paper`` (``method.stage=glue``) fine-tunes ``model`` with SliceFine on
every GLUE task of ``benchmark`` (``glue``: RTE, MRPC, SST-2, CoLA, QNLI), each from the pretrained
checkpoint, and reports validation accuracy and the accounting (trainable parameters, steps/s, slice
switches, peak memory); ``experiment=slicefine_paper_vtab`` (``method.stage=vision``) does the same
on the seven VTAB-1K tasks of ``benchmark=vtab1k``. ``method.tasks`` runs a subset; the optimiser
settings are the preset's ``trainer`` node (``transformers.TrainingArguments``).
"""

from __future__ import annotations

import time
from pathlib import Path

from common.config import DatasetSpec, Run, model_id
from common.tracking import write_results


def _selected(run: Run, stage: str, kind: str) -> dict[str, DatasetSpec]:
    if run.model is None:
        raise ValueError(f"method.stage={stage} needs a checkpoint: model=<name> or model.path")
    if run.model.kind != kind:
        raise ValueError(
            f"method.stage={stage} trains a {kind} model; model={run.model.name} is "
            f"{run.model.kind!r}"
        )
    if run.benchmark is None or not run.benchmark.sets:
        raise ValueError(f"method.stage={stage} needs benchmark=<suite> (configs/benchmark/)")
    sets = dict(run.benchmark.sets)
    unknown = [t for t in run.method.tasks if t not in sets]
    if unknown:
        raise ValueError(
            f"method.tasks {unknown} are not sets of benchmark={run.benchmark.name} ({sorted(sets)})"
        )
    return {t: sets[t] for t in (run.method.tasks or sets)}


def _load_dict(spec: DatasetSpec, hub_config: str | None = None):
    """A ``DatasetDict``: a local ``save_to_disk`` folder, else the hub id (with its config)."""
    from datasets import load_dataset, load_from_disk

    if spec.path:
        return load_from_disk(spec.path)
    return load_dataset(spec.hub_id, spec.config or hub_config)


def glue_sets(run: Run) -> dict:
    """Every selected GLUE set of the benchmark, loaded and checked (splits, text columns, labels)
    before any model loads."""
    from methods.slicefine.glue import GLUE_TASKS, check_glue_data

    out = {}
    for task, spec in _selected(run, "glue", "sequence_classification").items():
        if task not in GLUE_TASKS:
            raise ValueError(f"benchmark set {task!r} is not a GLUE task ({sorted(GLUE_TASKS)})")
        out[task] = _load_dict(spec, task)
        check_glue_data(task, out[task])
    return out


def glue_stage(run: Run) -> dict[str, float]:
    """``stage=glue``: SliceFine on each GLUE task of the benchmark (validation accuracy)."""
    from methods.slicefine.glue import train_glue, training_args

    start, mcfg = time.perf_counter(), run.method
    metrics = {}
    for task, data in glue_sets(run).items():
        args = training_args(
            mcfg.trainer, run.run_dir / task, seed=run.seed, warmup_ratio=mcfg.warmup_ratio
        )
        metrics[f"slicefine_{task}"] = train_glue(
            model_id(run.model), task, data, mcfg.slice, args,
            max_length=mcfg.max_length, seed=run.seed,
        )  # fmt: skip
    return write_results(
        run.run_dir, "slicefine", metrics, cfg=run.cfg, wall_time_s=time.perf_counter() - start
    )


def _load_vision(spec: DatasetSpec):
    """A VTAB-1K task: a NOAH/VPT task folder, a ``save_to_disk`` folder, else the hub id."""
    from datasets import load_from_disk

    from methods.slicefine.vision import VTAB_LISTS, load_vtab1k

    if spec.path and (Path(spec.path) / VTAB_LISTS["train"]).is_file():
        return load_vtab1k(Path(spec.path).parent, Path(spec.path).name), spec.path
    if spec.path:
        return load_from_disk(spec.path), spec.path
    from datasets import load_dataset

    return load_dataset(spec.hub_id, spec.config), spec.hub_id


def vision_sets(run: Run) -> dict[str, tuple]:
    """Every selected VTAB-1K task of the benchmark as ``(DatasetDict, class count)``, read and
    checked (list files, every listed image present, labels in range) before any model loads.

    A set's ``path`` is either the task folder of the NOAH/VPT layout (``train800val200.txt``,
    ``test.txt``) or a ``save_to_disk`` folder with ``train``/``test`` splits.
    """
    from methods.slicefine.vision import check_vision_data

    out = {}
    for task, spec in _selected(run, "vision", "image_classification").items():
        data, source = _load_vision(spec)
        out[task] = (data, check_vision_data(task, data, source, spec.split))
    return out


def vision_stage(run: Run) -> dict[str, float]:
    """``stage=vision``: SliceFine on each VTAB-1K task of the benchmark (test accuracy)."""
    from methods.slicefine.glue import training_args
    from methods.slicefine.vision import train_vision

    start, mcfg = time.perf_counter(), run.method
    metrics = {}
    for task, (data, n_classes) in vision_sets(run).items():
        args = training_args(
            mcfg.trainer, run.run_dir / task, seed=run.seed, warmup_ratio=mcfg.warmup_ratio,
            remove_unused_columns=False,
        )  # fmt: skip
        metrics[f"slicefine_{task}"] = train_vision(
            model_id(run.model), data, mcfg.slice, args,
            eval_split=run.benchmark.sets[task].split, seed=run.seed, num_labels=n_classes,
        )  # fmt: skip
    return write_results(
        run.run_dir, "slicefine", metrics, cfg=run.cfg, wall_time_s=time.perf_counter() - start
    )
