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

# The image tasks of the paper's VTAB-1K table -> their class count (the head size): VTAB's task
# definitions (google-research/task_adaptation), as the VTAB-1K PEFT code sizes its heads (NOAH).
# A 1,000-image training list need not show every class, so the count is not read from the labels.
VTAB_CLASSES = {
    "caltech101": 102,
    "oxford_flowers102": 102,
    "oxford_iiit_pet": 37,
    "patch_camelyon": 2,
    "eurosat": 10,
    "diabetic_retinopathy": 5,
    "kitti": 4,
}
VTAB_TASKS = tuple(VTAB_CLASSES)
#: split -> the NOAH/VPT list file it is read from.
VTAB_LISTS = {"train": "train800val200.txt", "test": "test.txt"}


def load_vtab1k(root: str | Path, task: str) -> DatasetDict:
    """One VTAB-1K task from the NOAH/VPT layout as ``{"train", "test"}`` (columns image, label).

    Source: engineering (NOAH/VPT list-file layout of VTAB-1K), not in the paper.

    ``train`` is ``train800val200.txt`` (the 1,000 images the protocol trains on), ``test`` is
    ``test.txt``; each line is ``<path relative to the task folder> <integer label>``.

    Raises:
        FileNotFoundError: if a list file, or an image a line names, is missing (task, file and
            line named; the first missing image stops the read).
        ValueError: on a malformed line (file and line number named).
    """
    from datasets import Dataset, DatasetDict, Image

    folder = Path(root) / task
    splits = {}
    for split, name in VTAB_LISTS.items():
        listing = folder / name
        if not listing.is_file():
            raise FileNotFoundError(f"VTAB-1K {task}: list file not found: {listing}")
        paths, labels = [], []
        for i, line in enumerate(listing.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            parts = line.rsplit(maxsplit=1)
            if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
                raise ValueError(
                    f"VTAB-1K {task}: {listing}:{i}: expected '<image path> <label>', got {line!r}"
                )
            if not (folder / parts[0]).is_file():
                raise FileNotFoundError(
                    f"VTAB-1K {task}: {listing}:{i}: image {folder / parts[0]} not found"
                )
            paths.append(str(folder / parts[0]))
            labels.append(int(parts[1]))
        splits[split] = Dataset.from_dict({"image": paths, "label": labels}).cast_column(
            "image", Image()
        )
    return DatasetDict(splits)


def check_vision_data(task: str, data, source: str | Path, eval_split: str = "test") -> int:
    """Refuses a task's ``DatasetDict`` without ``train`` and ``eval_split``, the ``image`` and
    ``label`` columns, or with a label outside ``[0, classes)``, before any model loads; returns
    the class count (:data:`VTAB_CLASSES`, else the distinct training labels of a custom task).

    Source: engineering, not in the paper.

    Args:
        task: the benchmark set's name.
        data: the task's ``DatasetDict`` (:func:`load_vtab1k`, ``load_from_disk`` or the hub).
        source: where it was read from (a NOAH/VPT task folder names its list files).
        eval_split: the split the stage evaluates on.

    Raises:
        ValueError: naming the task, the file (or split) and the problem.
    """
    lists = Path(source).is_dir() and (Path(source) / VTAB_LISTS["train"]).is_file()
    for split in ("train", eval_split):
        where = Path(source) / VTAB_LISTS[split] if lists and split in VTAB_LISTS else source
        if split not in data:
            raise ValueError(f"VTAB-1K {task} ({where}): no split {split!r}; splits: {list(data)}")
        need = [c for c in ("image", "label") if c not in data[split].column_names]
        if need:
            raise ValueError(
                f"VTAB-1K {task} ({where}, {split}): columns {need} missing; "
                f"has {data[split].column_names}"
            )
    n = VTAB_CLASSES.get(task) or len(set(data["train"]["label"]))
    for split in ("train", eval_split):
        where = Path(source) / VTAB_LISTS[split] if lists and split in VTAB_LISTS else source
        bad = sorted({y for y in data[split]["label"] if not 0 <= y < n})
        if bad:
            raise ValueError(
                f"VTAB-1K {task} ({where}, {split}): labels {bad[:5]} outside [0, {n})"
                + (f" ({task} has {n} classes)" if task in VTAB_CLASSES else "")
            )
    return n


def train_vision(
    model_spec: str,
    data: DatasetDict,
    slice_cfg: SliceSettings,
    args,
    train_split: str = "train",
    eval_split: str = "test",
    seed: int = 0,
    num_labels: int | None = None,
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
        num_labels: the head size (:func:`check_vision_data`); None counts the distinct training
            labels.

    Raises:
        ValueError: a missing split.
    """
    from transformers import AutoImageProcessor, Trainer

    from common.models import load_model, weights_hint

    for split in (train_split, eval_split):
        if split not in data:
            raise ValueError(f"dataset has no split {split!r}; splits: {list(data)}")
    num_labels = num_labels or len(set(data[train_split]["label"]))
    with weights_hint(model_spec):
        processor = AutoImageProcessor.from_pretrained(model_spec)
    # float32 on the CPU: the Trainer places the model and its bf16 flag is autocast over fp32.
    model = load_model(
        model_spec, dtype="float32", device="cpu", kind="image_classification",
        num_labels=num_labels, ignore_mismatched_sizes=True,
    )  # fmt: skip

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
