"""Paper-scale sequence classification (GLUE) with the HF Trainer + SliceFine.

``train_glue`` loads a checkpoint by hub id or path, takes one GLUE task's ``DatasetDict`` (from the
hub's ``nyu-mll/glue`` or a local ``save_to_disk`` folder with the same columns), applies SliceFine to
the target linears (the classifier head stays trainable), trains with ``transformers.Trainer`` and
the :class:`SliceSwitchCallback`, evaluates, and returns accuracy plus the accounting the paper
reports (trainable parameters, step throughput, peak GPU memory). The ``glue`` stage
(:mod:`methods.slicefine.paper`) runs it for every task of the benchmark; run it under
``accelerate launch -m common.cli`` for several GPUs (DDP; see the method doc for FSDP / ZeRO-3).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch

from methods.slicefine.callback import SliceSwitchCallback
from methods.slicefine.config import SliceSettings
from methods.slicefine.model import apply_slicefine

logger = logging.getLogger(__name__)

# GLUE task -> (text columns, number of labels); the validation split name.
GLUE_TASKS = {
    "sst2": (("sentence", None), 2, "validation"),
    "cola": (("sentence", None), 2, "validation"),
    "mrpc": (("sentence1", "sentence2"), 2, "validation"),
    "qnli": (("question", "sentence"), 2, "validation"),
    "rte": (("sentence1", "sentence2"), 2, "validation"),
    "mnli": (("premise", "hypothesis"), 3, "validation_matched"),
    "qqp": (("question1", "question2"), 2, "validation"),
}


def train_glue(
    model_spec: str,
    task: str,
    data,
    slice_cfg: SliceSettings,
    args,
    max_length: int = 256,
    seed: int = 0,
) -> dict[str, float]:
    """Fine-tunes ``model_spec`` on one GLUE task with SliceFine; returns validation metrics.

    Source: the paper's GLUE experiments (tables not recovered); every setting here is
    our inference.

    Args:
        model_spec: hub id or local folder of the checkpoint (and its tokenizer).
        task: a GLUE task name (:data:`GLUE_TASKS`), which fixes the text columns, label count and
            evaluation split.
        data: a ``DatasetDict`` with ``train`` and the task's evaluation split.
        slice_cfg: the SliceFine settings.
        args: ``transformers.TrainingArguments`` (see :func:`training_args`).
        max_length: tokenisation length.
        seed: seeds the slices' initial positions.

    Raises:
        ValueError: an unknown task or a missing split.
    """
    from transformers import DataCollatorWithPadding, Trainer

    from common.models import load_model, load_tokenizer

    if task not in GLUE_TASKS:
        raise ValueError(f"task must be one of {sorted(GLUE_TASKS)}, got {task!r}")
    (col_a, col_b), n_labels, val_split = GLUE_TASKS[task]
    for split in ("train", val_split):
        if split not in data:
            raise ValueError(f"GLUE {task}: dataset has no split {split!r}; splits: {list(data)}")
    tok = load_tokenizer(model_spec, padding_side="right")
    # float32 on the CPU: the Trainer places the model and its bf16 flag is autocast over fp32.
    model = load_model(
        model_spec, dtype="float32", device="cpu", kind="sequence_classification",
        num_labels=n_labels,
    )  # fmt: skip

    def encode(batch):
        texts = (batch[col_a],) if col_b is None else (batch[col_a], batch[col_b])
        return tok(*texts, truncation=True, max_length=max_length)

    data = data.map(encode, batched=True)
    sf = wrap_classifier(model, slice_cfg, seed)
    trainer = Trainer(
        model=sf,
        args=args,
        train_dataset=data["train"],
        eval_dataset=data[val_split],
        data_collator=DataCollatorWithPadding(tok),
        compute_metrics=accuracy_metric,
        callbacks=[SliceSwitchCallback(sf)],
    )
    return fit_and_report(trainer, sf, tok, args.output_dir)


def check_glue_data(task: str, data) -> None:
    """Refuses a GLUE ``DatasetDict`` without the task's splits, text columns or integer labels in
    ``[0, n_labels)`` (the hub's ``nyu-mll/glue`` layout), before any model loads (our engineering).

    Raises:
        ValueError: naming the task, split and what is missing.
    """
    if task not in GLUE_TASKS:
        raise ValueError(f"task must be one of {sorted(GLUE_TASKS)}, got {task!r}")
    (col_a, col_b), n_labels, val_split = GLUE_TASKS[task]
    for split in ("train", val_split):
        if split not in data:
            raise ValueError(f"GLUE {task}: dataset has no split {split!r}; splits: {list(data)}")
        need = [c for c in (col_a, col_b, "label") if c and c not in data[split].column_names]
        if need:
            raise ValueError(
                f"GLUE {task} {split}: columns {need} missing; has {data[split].column_names}"
            )
        bad = sorted({y for y in data[split]["label"] if not 0 <= y < n_labels})
        if bad:
            raise ValueError(f"GLUE {task} {split}: labels {bad[:5]} outside [0, {n_labels})")


def wrap_classifier(model, slice_cfg: SliceSettings, seed: int = 0):
    """SliceFine on ``slice_cfg.targets`` of a classifier; its head (``classifier``/``score``/
    ``head``) stays fully trainable (the standard GLUE/VTAB PEFT protocol).

    Source: our inference (trained head, the standard GLUE/VTAB PEFT protocol); not stated in
    the paper text we read.
    """
    head = [n for n, _ in model.named_children() if n in ("classifier", "score", "head")]
    return apply_slicefine(
        model,
        slice_cfg.targets,
        r=slice_cfg.r,
        mode=slice_cfg.mode,
        switch_every=slice_cfg.switch_every,
        seed=seed,
        init_position=slice_cfg.init_position,
        train_bias=slice_cfg.train_bias,
        modules_to_save=head,
    )


def accuracy_metric(pred) -> dict[str, float]:
    """``compute_metrics`` for the Trainer: top-1 accuracy of the logits.

    Source: engineering, not in the paper.
    """
    return {"accuracy": float((np.argmax(pred.predictions, -1) == pred.label_ids).mean())}


def training_args(
    node: dict | None, output_dir: str | Path, seed: int = 0, warmup_ratio: float = 0.0, **extra
):
    """``TrainingArguments`` for a paper stage: the preset's ``trainer`` node over our defaults.

    Source: engineering; the values are our inference (paper hyper-parameters not
    recovered).

    Defaults: no checkpoints or reporting, no weight decay (decaying the slice delta would not
    decay the real weights), bf16 only on a capable GPU, CPU when there is no GPU, and
    ``label_names=["labels"]`` (the SliceFine wrapper hides the class signature the Trainer
    inspects). ``node`` values win; ``extra`` (per-stage needs) win over both. ``warmup_ratio``
    becomes ``warmup_steps`` (a value < 1 is a ratio of the total steps in transformers 5).
    """
    from transformers import TrainingArguments

    from common.config import trainer_config

    node = dict(node or {})
    if node.get("bf16") and not (torch.cuda.is_available() and torch.cuda.is_bf16_supported()):
        node["bf16"] = False  # the preset's bf16 on a machine without it
    args = trainer_config(
        TrainingArguments,
        {**node, **extra},
        output_dir=str(output_dir),
        weight_decay=0.0,
        save_strategy="no",
        report_to="none",
        seed=seed,
        disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(),
        label_names=["labels"],
    )
    if warmup_ratio:
        # Set after construction: the trainer-node check types warmup_steps by its int default.
        args.warmup_steps = warmup_ratio
    return args


def fit_and_report(trainer, sf, processor, output_dir: str | Path) -> dict[str, float]:
    """Trains, evaluates and saves the merged model (shared by the GLUE and vision paths).

    Source: engineering, not in the paper.

    Returns accuracy, trainable parameters, optimiser steps per second, the number of slice
    switches and, on CUDA, the peak allocated memory in MiB.
    """
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    out = trainer.train()
    wall = time.time() - t0
    ev = trainer.evaluate()
    res = {
        "accuracy": float(ev["eval_accuracy"]),
        "trainable_params": float(sf.trainable_parameters()),
        "steps_per_s": float(out.global_step / max(wall, 1e-9)),
        "switches": float(sf.num_switches),
    }
    if torch.cuda.is_available():
        res["peak_mem_mib"] = torch.cuda.max_memory_allocated() / 2**20
    sf.merge_and_unload().save_pretrained(Path(output_dir) / "merged")
    processor.save_pretrained(Path(output_dir) / "merged")
    return res
