"""Paper-scale image classification (VTAB-1K) with the HF Trainer + SliceFine.

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
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from methods.slicefine.callback import SliceSwitchCallback
from methods.slicefine.config import SliceSettings
from methods.slicefine.glue import accuracy_metric, fit_and_report, wrap_classifier

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
)  # the image tasks of the paper's VTAB-1K table


def load_vtab1k(root: str | Path, task: str) -> DatasetDict:
    """One VTAB-1K task from the NOAH/VPT layout as ``{"train", "test"}`` (columns image, label).

    Source: engineering (NOAH/VPT list-file layout of VTAB-1K), not in the paper.

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


def train_vision(
    model_spec: str,
    data: DatasetDict,
    slice_cfg: SliceSettings,
    args,
    train_split: str = "train",
    eval_split: str = "test",
    seed: int = 0,
) -> dict[str, float]:
    """Fine-tunes ``model_spec`` on one VTAB-1K task with SliceFine; returns test metrics.

    Source: the paper's VTAB-1K experiments (tables not recovered); the settings here are
    our inference.

    Args:
        model_spec: hub id or local folder of an ``AutoModelForImageClassification`` backbone and
            its image processor (a new head is sized to the task's labels).
        data: a ``DatasetDict`` with columns ``image`` and ``label`` (:func:`load_vtab1k`).
        slice_cfg: the SliceFine settings.
        args: ``transformers.TrainingArguments`` (see :func:`methods.slicefine.glue.training_args`;
            ``remove_unused_columns`` must be False: the transform needs the raw image column).
        train_split, eval_split: split names.
        seed: seeds the slices' initial positions.

    Raises:
        ValueError: a missing split.
    """
    from transformers import AutoImageProcessor, AutoModelForImageClassification, Trainer

    from common.models import weights_hint
    from common.tracking import record_model_load

    for split in (train_split, eval_split):
        if split not in data:
            raise ValueError(f"dataset has no split {split!r}; splits: {list(data)}")
    labels = sorted(set(data[train_split]["label"]))
    with weights_hint(model_spec):
        processor = AutoImageProcessor.from_pretrained(model_spec)
        model = AutoModelForImageClassification.from_pretrained(
            model_spec, num_labels=len(labels), ignore_mismatched_sizes=True
        )
    record_model_load(model_spec, kind="image_classification")

    def transform(batch):
        images = [im.convert("RGB") for im in batch["image"]]
        out = processor(images=images, return_tensors="pt")
        out["labels"] = torch.tensor(batch["label"])
        return out

    train_ds = data[train_split].with_transform(transform)
    eval_ds = data[eval_split].with_transform(transform)
    sf = wrap_classifier(model, slice_cfg, seed)

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
    return fit_and_report(trainer, sf, processor, args.output_dir)
