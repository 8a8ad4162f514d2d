"""Paper-scale image classification (VTAB-1K-style, spec §7) with the HF Trainer + SliceFine.

``train_vision`` loads an image classifier by hub id or path (default: the ImageNet-21k ViT-B/16,
the backbone the paper's 85.8 M "Full" row implies), a VTAB-1K task in the layout the PEFT
literature distributes (NOAH / VPT: ``<data_root>/<task>/train800val200.txt`` and ``test.txt``,
one ``<relative image path> <label>`` per line; 800 + 200 training images, evaluated on the test
list) or a local ``save_to_disk`` folder with ``train``/``test`` splits (columns ``image``, ``label``),
applies SliceFine to the target linears of the encoder (the new classification head stays
trainable), trains with ``transformers.Trainer`` and :class:`SliceSwitchCallback`, and reports
accuracy and the accounting of the GLUE path. In transformers 5 the HF ViT names its projections
``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``, ``mlp.fc1`` and ``mlp.fc2`` (separate q/k/v, so no
fused-``qkv`` caveat as with timm).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from methods.slicefine.callback import SliceSwitchCallback
from methods.slicefine.glue import (
    accuracy_metric,
    fit_and_report,
    trainer_args,
    wrap_classifier,
)

if TYPE_CHECKING:
    from datasets import DatasetDict

logger = logging.getLogger(__name__)

VTAB_TASKS = (
    "caltech101",
    "oxford_flowers102",
    "oxford_iiit_pet",
    "patch_camelyon",
    "eurosat",
    "diabetic_retinopathy",
    "kitti",
)  # the image tasks of the paper's VTAB-1K table (spec §7)


@dataclass
class VisionConfig:
    """The paper-scale image run (values [inferred], spec §7).

    Attributes:
        model: hub id or path of an ``AutoModelForImageClassification`` backbone.
        task: a VTAB-1K task name (the folder under ``data_root`` and the result key).
        data_root: the VTAB-1K root in the NOAH/VPT layout.
        data_path: a local ``save_to_disk`` folder used instead of ``data_root``.
        train_split / eval_split: split names.
        r, mode, switch_every, targets: SliceFine settings (paper §3, Fig. 1).
        train_bias: also train the target layers' biases (unknown in the paper; the authors'
            RoCoFT code trains them by default).
        lr, epochs, batch_size, max_steps, warmup_ratio, bf16, seed: Trainer settings.
    """

    model: str = "google/vit-base-patch16-224-in21k"
    task: str = "caltech101"
    data_root: str = "data/vtab-1k"
    data_path: str | None = None
    train_split: str = "train"
    eval_split: str = "test"
    r: int = 4
    mode: str = "row"
    switch_every: int = 100
    targets: list[str] = field(default_factory=lambda: ["q_proj", "v_proj"])
    lr: float = 1e-3
    epochs: float = 100
    batch_size: int = 64
    max_steps: int = -1
    warmup_ratio: float = 0.1
    bf16: bool = True
    seed: int = 0
    train_bias: bool = False  # unknown in the paper; RoCoFT.py trains biases (bias=True)

    def __post_init__(self) -> None:
        if self.data_path is None and self.task not in VTAB_TASKS:
            raise ValueError(
                f"task must be one of {list(VTAB_TASKS)} (or give data_path), got {self.task!r}"
            )
        if self.r < 1:
            raise ValueError(f"r must be >= 1, got {self.r}")


def load_vtab1k(root: str | Path, task: str) -> DatasetDict:
    """One VTAB-1K task from the NOAH/VPT layout as ``{"train", "test"}`` (columns image, label).

    ``train`` is ``train800val200.txt`` (the 1,000 images the protocol trains on), ``test`` is
    ``test.txt``; each line is ``<path relative to the task folder> <integer label>``.

    Raises:
        FileNotFoundError: if a list file is missing.
        ValueError: on a malformed line (file and line number named).
    """
    from datasets import Dataset, DatasetDict, Image

    folder = Path(root) / task
    splits = {}
    for split, name in (("train", "train800val200.txt"), ("test", "test.txt")):
        listing = folder / name
        if not listing.is_file():
            raise FileNotFoundError(f"VTAB-1K list file not found: {listing}")
        paths, labels = [], []
        for i, line in enumerate(listing.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            parts = line.rsplit(maxsplit=1)
            if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
                raise ValueError(f"{listing}:{i}: expected '<image path> <label>', got {line!r}")
            paths.append(str(folder / parts[0]))
            labels.append(int(parts[1]))
        splits[split] = Dataset.from_dict({"image": paths, "label": labels}).cast_column(
            "image", Image()
        )
    return DatasetDict(splits)


def train_vision(vc: VisionConfig, output_dir: str | Path) -> dict[str, float]:
    """Fine-tunes ``vc.model`` on one VTAB-1K task with SliceFine; returns test metrics."""
    from datasets import load_from_disk
    from transformers import (
        AutoImageProcessor,
        AutoModelForImageClassification,
        Trainer,
    )

    ds = load_from_disk(vc.data_path) if vc.data_path else load_vtab1k(vc.data_root, vc.task)
    for split in (vc.train_split, vc.eval_split):
        if split not in ds:
            raise ValueError(f"dataset has no split {split!r}; splits: {list(ds)}")
    labels = sorted(set(ds[vc.train_split]["label"]))
    processor = AutoImageProcessor.from_pretrained(vc.model)
    model = AutoModelForImageClassification.from_pretrained(
        vc.model, num_labels=len(labels), ignore_mismatched_sizes=True
    )

    def transform(batch):
        images = [im.convert("RGB") for im in batch["image"]]
        out = processor(images=images, return_tensors="pt")
        out["labels"] = torch.tensor(batch["label"])
        return out

    train_ds = ds[vc.train_split].with_transform(transform)
    eval_ds = ds[vc.eval_split].with_transform(transform)
    sf = wrap_classifier(model, vc)
    # remove_unused_columns=False: the transform needs the raw image column.
    args = trainer_args(vc, output_dir, remove_unused_columns=False)

    def collate(rows):
        return {k: torch.stack([row[k] for row in rows]) for k in ("pixel_values", "labels")}

    trainer = Trainer(
        model=sf,
        args=args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        data_collator=collate,
        compute_metrics=accuracy_metric,
        callbacks=[SliceSwitchCallback(sf)],
    )
    return fit_and_report(trainer, sf, processor, output_dir)
