"""Paper-scale sequence classification (GLUE-style, spec §7) with the HF Trainer + SliceFine.

``train_glue`` loads a checkpoint by hub id or path, a GLUE task from the hub (or a local
``save_to_disk`` folder / json files with the same columns), applies SliceFine to the target linears
(the classifier head stays trainable), trains with ``transformers.Trainer`` and the
:class:`SliceSwitchCallback`, evaluates, and returns accuracy plus the accounting the paper reports
(trainable parameters, step throughput, peak GPU memory). Run it under ``accelerate launch`` for
several GPUs (DDP; see the method doc for FSDP / ZeRO-3 limits).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from methods.slicefine.callback import SliceSwitchCallback
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


@dataclass
class GlueConfig:
    """The paper-scale classification run (values [inferred], spec §7)."""

    model: str = "FacebookAI/roberta-base"
    task: str = "rte"
    data_path: str | None = None  # a local save_to_disk folder; None = the hub's nyu-mll/glue
    r: int = 4
    mode: str = "row"
    switch_every: int = 100
    targets: list[str] = field(
        default_factory=lambda: ["query", "key", "value", "attention.output.dense"]
    )
    lr: float = 1e-3
    epochs: float = 30
    batch_size: int = 32
    max_length: int = 256
    max_steps: int = -1
    warmup_ratio: float = 0.06
    bf16: bool = True
    seed: int = 0
    # Unknown in the paper; the authors' RoCoFT code (RoCoFT.py, ``bias=True``) and LiME's SliceFine
    # layer train the target layers' biases. False keeps every original parameter frozen.
    train_bias: bool = False

    def __post_init__(self) -> None:
        if self.task not in GLUE_TASKS:
            raise ValueError(f"task must be one of {sorted(GLUE_TASKS)}, got {self.task!r}")


def train_glue(gc: GlueConfig, output_dir: str | Path) -> dict[str, float]:
    """Fine-tunes ``gc.model`` on ``gc.task`` with SliceFine and returns validation metrics."""
    from datasets import load_dataset, load_from_disk
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
    )

    (col_a, col_b), n_labels, val_split = GLUE_TASKS[gc.task]
    if gc.data_path:
        ds = load_from_disk(gc.data_path)
    else:
        ds = load_dataset("nyu-mll/glue", gc.task)
    tok = AutoTokenizer.from_pretrained(gc.model)
    model = AutoModelForSequenceClassification.from_pretrained(gc.model, num_labels=n_labels)

    def encode(batch):
        args = (batch[col_a],) if col_b is None else (batch[col_a], batch[col_b])
        return tok(*args, truncation=True, max_length=gc.max_length)

    ds = ds.map(encode, batched=True)
    sf = wrap_classifier(model, gc)
    args = trainer_args(gc, output_dir)

    trainer = Trainer(
        model=sf,
        args=args,
        train_dataset=ds["train"],
        eval_dataset=ds[val_split],
        data_collator=DataCollatorWithPadding(tok),
        compute_metrics=accuracy_metric,
        callbacks=[SliceSwitchCallback(sf)],
    )
    return fit_and_report(trainer, sf, tok, output_dir)


def wrap_classifier(model, pc):
    """SliceFine on ``pc.targets`` of a classifier; its head (``classifier``/``score``/``head``)
    stays fully trainable (the standard GLUE/VTAB PEFT protocol)."""
    head = [n for n, _ in model.named_children() if n in ("classifier", "score", "head")]
    return apply_slicefine(
        model,
        pc.targets,
        r=pc.r,
        mode=pc.mode,
        switch_every=pc.switch_every,
        seed=pc.seed,
        train_bias=pc.train_bias,
        modules_to_save=head,
    )


def accuracy_metric(pred) -> dict[str, float]:
    """``compute_metrics`` for the Trainer: top-1 accuracy of the logits."""
    return {"accuracy": float((np.argmax(pred.predictions, -1) == pred.label_ids).mean())}


def trainer_args(pc, output_dir: str | Path, **extra):
    """``TrainingArguments`` from a paper config (GLUE or vision): the settings both paths share."""
    from transformers import TrainingArguments

    kwargs = {
        "output_dir": str(output_dir),
        "learning_rate": pc.lr,
        "num_train_epochs": pc.epochs,
        "max_steps": pc.max_steps,
        "per_device_train_batch_size": pc.batch_size,
        "per_device_eval_batch_size": pc.batch_size,
        "warmup_steps": pc.warmup_ratio,  # a float in (0, 1) is a ratio of the total steps
        "weight_decay": 0.0,
        "bf16": pc.bf16 and torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
        "save_strategy": "no",
        "report_to": "none",
        "seed": pc.seed,
        "disable_tqdm": True,
        "use_cpu": not torch.cuda.is_available(),
        "label_names": ["labels"],  # the wrapper hides the class signature Trainer inspects
    }
    kwargs.update(extra)
    return TrainingArguments(**kwargs)


def fit_and_report(trainer, sf, processor, output_dir: str | Path) -> dict[str, float]:
    """Trains, evaluates and saves the merged model (shared by the GLUE and vision paths).

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
