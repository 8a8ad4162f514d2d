"""Paper-scale training (official ``training/train_sft.py``, official README): the HF-Trainer LoRA
warm-up of LESS, the fine-tuning recipe and the query loss. The data loaders are in
:mod:`methods.instruction_selection.paper_data`.

* :func:`less_warmup_trainer` is the paper's LESS warm-up: LoRA training with ``transformers.Trainer``
  (linear schedule, 3 % warm-up, ``save_strategy="epoch"``); each epoch checkpoint is read back
  (adapter weights + the AdamW moments of ``optimizer.pt``, matched to parameter names) into
  :class:`LESSCheckpoint` with the epoch's mean learning rate.
* :func:`train_tulu` / :func:`finetune_subset` fine-tune on a selected subset; :func:`query_loss` is
  the loss on the query set that the paper's distance-loss correlations read.
"""

from __future__ import annotations

import glob
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from common.config import CheckpointingNames

from .less import LESSCheckpoint, _supervised_ids
from .paper_data import load_pool
from .representations import _segments

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------ warm-up
def _trainer_param_order(model: torch.nn.Module) -> list[str]:
    """Names in the order ``Trainer.create_optimizer`` puts them (decay group, then no-decay)."""
    from transformers import Trainer

    decay = set(Trainer.get_decay_parameter_names(None, model))  # does not use ``self``
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [n for n, _ in named if n in decay] + [n for n, _ in named if n not in decay]


def load_trainer_checkpoint(model: torch.nn.Module, ckpt_dir: str, lr: float) -> LESSCheckpoint:
    """A ``Trainer`` checkpoint folder of a PEFT model -> :class:`LESSCheckpoint`.

    The adapter weights are loaded into ``model`` (``peft.set_peft_model_state_dict``) and read
    back by parameter name; ``optimizer.pt`` holds the AdamW moments by position, which are mapped
    to names in the Trainer's group order and shape-checked (docs/methods/instruction_selection.md: never trust order alone).
    """
    from peft import set_peft_model_state_dict

    path = os.path.join(ckpt_dir, "adapter_model.safetensors")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no adapter weights in {ckpt_dir}")
    from safetensors.torch import load_file

    set_peft_model_state_dict(model, load_file(path))
    named = dict(model.named_parameters())
    order = _trainer_param_order(model)
    params = {n: named[n].detach().clone() for n in order}
    opt_path = os.path.join(ckpt_dir, "optimizer.pt")
    if not os.path.exists(opt_path):
        raise FileNotFoundError(f"{ckpt_dir} has no optimizer.pt: LESS needs the Adam state")
    state = torch.load(opt_path, map_location="cpu", weights_only=False)
    idx = [i for g in state["param_groups"] for i in g["params"]]
    if len(idx) != len(order):
        raise ValueError(f"optimizer state has {len(idx)} tensors, the model {len(order)}")
    m, v = {}, {}
    for k, n in zip(idx, order):
        st = state["state"][k]
        if st["exp_avg"].shape != named[n].shape:
            raise ValueError(f"optimizer state {k} has shape {tuple(st['exp_avg'].shape)} != {n}")
        m[n], v[n] = st["exp_avg"].float().clone(), st["exp_avg_sq"].float().clone()
    return LESSCheckpoint(params=params, exp_avg=m, exp_avg_sq=v, lr=lr)


def _training_arguments_cls():
    from transformers import TrainingArguments

    return TrainingArguments


@dataclass
class TuluTrainingArguments(CheckpointingNames, _training_arguments_cls()):
    """``transformers.TrainingArguments`` for the paper's two Tulu trainings (the ``warmup`` and
    ``finetune`` trainer nodes).

    Only ``warmup_steps`` is re-declared, with a float default: the official 3 % warm-up is a ratio
    (transformers 5 reads a float < 1 as one), which then passes common.config's trainer-node type
    check (it takes the type from the default, TrainingArguments' int 0).
    """

    warmup_steps: float = field(
        default=0.0,
        metadata={"help": "Warm-up steps, or a ratio of the total steps when < 1 (repo: 0.03)."},
    )


def _tulu_items(rows, tokenizer, max_length: int) -> list[tuple[list[int], list[int]]]:
    eos = tokenizer.eos_token or ""
    items = [_supervised_ids(_segments(r["messages"], eos), tokenizer, max_length) for r in rows]
    kept = [(i, y) for i, y in items if any(t != -100 for t in y)]
    if len(kept) < len(
        items
    ):  # docs/methods/instruction_selection.md: drop and count fully truncated examples
        logger.warning(
            "dropped %d rows truncated to zero supervised tokens", len(items) - len(kept)
        )
    if not kept:
        raise ValueError("rows: every example is truncated to zero supervised tokens")
    return kept


def _collator(pad: int) -> Callable[[list[dict[str, list[int]]]], dict[str, torch.Tensor]]:
    def collate(batch: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        T = max(len(b["input_ids"]) for b in batch)
        ids = torch.tensor([b["input_ids"] + [pad] * (T - len(b["input_ids"])) for b in batch])
        lab = torch.tensor([b["labels"] + [-100] * (T - len(b["labels"])) for b in batch])
        att = torch.tensor(
            [[1] * len(b["input_ids"]) + [0] * (T - len(b["input_ids"])) for b in batch]
        )
        return {"input_ids": ids, "attention_mask": att, "labels": lab}  # [b, T] each

    return collate


def train_tulu(
    model: torch.nn.Module,
    tokenizer: Any,
    rows: Sequence[Mapping[str, Any]],
    out_dir: str,
    epochs: float = 2.0,
    lr: float = 2e-5,
    per_device_batch: int = 1,
    grad_accum: int = 128,
    warmup_ratio: float = 0.03,
    seed: int = 0,
    max_length: int = 2048,
    bf16: bool = False,
    save_strategy: str = "no",
    args: Any | None = None,
) -> Any:
    """``transformers.Trainer`` on Tulu rows with the assistant-only loss (official
    ``training/train_sft.py``).

    The paper's recipe for both the LESS warm-up (LoRA, 4 epochs, ``save_strategy="epoch"``) and the
    fine-tuning on a selected subset (full, 2 epochs): AdamW, lr 2e-5, linear schedule with 3 %
    warm-up, batch 1 × accumulation 128, no weight decay. ``args``: a ready
    ``TrainingArguments`` (the stages build it from the preset's trainer node); when given, the
    keyword settings above are ignored. Returns the trainer after training.
    """
    import datasets
    from transformers import Trainer, TrainingArguments

    if epochs <= 0:
        raise ValueError(f"epochs must be > 0, got {epochs}")
    if not 0.0 <= warmup_ratio < 1.0:
        raise ValueError(f"warmup_ratio must be in [0, 1), got {warmup_ratio}")
    kept = _tulu_items(rows, tokenizer, max_length)
    ds = datasets.Dataset.from_dict(
        {"input_ids": [i for i, _ in kept], "labels": [y for _, y in kept]}
    )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    if args is not None:
        trainer = Trainer(model=model, args=args, train_dataset=ds, data_collator=_collator(pad))
        trainer.train()
        model.eval()
        return trainer
    args = TrainingArguments(
        output_dir=out_dir,
        num_train_epochs=epochs,
        learning_rate=lr,
        lr_scheduler_type="linear",
        warmup_steps=warmup_ratio,  # transformers 5: a float < 1 is a ratio of the total steps
        per_device_train_batch_size=per_device_batch,
        gradient_accumulation_steps=grad_accum,
        weight_decay=0.0,
        save_strategy=save_strategy,
        logging_steps=1,
        report_to="none",
        seed=seed,
        bf16=bf16,
        use_cpu=not torch.cuda.is_available(),
        dataloader_pin_memory=False,
        remove_unused_columns=False,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=ds, data_collator=_collator(pad))
    trainer.train()
    model.eval()
    return trainer


def less_warmup_trainer(
    model: torch.nn.Module,
    tokenizer: Any,
    rows: Sequence[Mapping[str, Any]],
    out_dir: str,
    epochs: int = 4,
    lr: float = 2e-5,
    per_device_batch: int = 1,
    grad_accum: int = 128,
    warmup_ratio: float = 0.03,
    seed: int = 0,
    max_length: int = 2048,
    bf16: bool = False,
    args: Any | None = None,
) -> list[LESSCheckpoint]:
    """The paper's LESS warm-up with ``transformers.Trainer`` (official ``training/train_sft.py``
    with LoRA, ``representation/less/``).

    LoRA training of ``model`` (a PEFT model) through :func:`train_tulu` with a checkpoint per
    epoch (paper: 4 epochs, lr 2e-5, batch 1 × accumulation 128). Returns one
    :class:`LESSCheckpoint` per epoch whose ``lr`` is the mean learning rate of that epoch's
    optimizer steps (the LR weight ``η̄_t``).

    ``args``: a ready ``TrainingArguments`` (its ``save_strategy`` must be ``"epoch"`` and its
    ``output_dir`` is used instead of ``out_dir``); when given, ``epochs`` is its
    ``num_train_epochs``.

    Raises:
        ValueError: if ``epochs < 1``, ``args.save_strategy`` is not ``"epoch"``, or every row is
            truncated to zero supervised tokens.
    """
    if args is not None:
        if str(getattr(args.save_strategy, "value", args.save_strategy)) != "epoch":
            raise ValueError(
                f"the LESS warm-up needs save_strategy='epoch', got {args.save_strategy!r}"
            )
        out_dir, epochs = args.output_dir, int(args.num_train_epochs)
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    trainer = train_tulu(
        model,
        tokenizer,
        rows,
        out_dir,
        epochs=epochs,
        lr=lr,
        per_device_batch=per_device_batch,
        grad_accum=grad_accum,
        warmup_ratio=warmup_ratio,
        seed=seed,
        max_length=max_length,
        bf16=bf16,
        save_strategy="epoch",
        args=args,
    )
    lrs = {
        int(h["step"]): float(h["learning_rate"])
        for h in trainer.state.log_history
        if "learning_rate" in h
    }
    dirs = sorted(
        glob.glob(os.path.join(out_dir, "checkpoint-*")), key=lambda d: int(d.rsplit("-", 1)[1])
    )
    if len(dirs) != epochs:
        raise RuntimeError(f"expected {epochs} epoch checkpoints in {out_dir}, found {len(dirs)}")
    ckpts, prev = [], 0
    for d in dirs:
        step = int(d.rsplit("-", 1)[1])
        epoch_lrs = [lrs[s] for s in range(prev + 1, step + 1) if s in lrs]
        mean_lr = float(np.mean(epoch_lrs)) if epoch_lrs else lr
        ckpts.append(load_trainer_checkpoint(model, d, mean_lr if mean_lr > 0 else lr))
        prev = step
    model.eval()
    return ckpts


@torch.no_grad()
def query_loss(
    model: torch.nn.Module,
    tokenizer: Any,
    queries: Sequence[Mapping[str, Any]],
    max_length: int = 2048,
) -> float:
    """Mean token cross-entropy on the query labels (the paper's query loss;
    official ``evaluation/``).

    Each query is ``tok(prompt) ⧺ tok(label + EOS)``; only the label tokens are scored. Tokens are
    pooled over all queries (a long label weighs more), as in the official evaluation.
    """
    eos = tokenizer.eos_token or ""
    total, count = 0.0, 0
    model.eval()
    for r in queries:
        if not str(r.get("labels", "")).strip():
            raise ValueError("a query row has an empty label")
        ids, lab = _supervised_ids(
            [(str(r["prompts"]), False), (str(r["labels"]) + eos, True)], tokenizer, max_length
        )
        x = torch.tensor([ids], device=next(model.parameters()).device)
        y = torch.tensor([lab], device=x.device)
        logits = model(input_ids=x).logits[0, :-1].float()  # [T-1, V]
        tgt = y[0, 1:]  # [T-1]
        total += float(
            torch.nn.functional.cross_entropy(logits, tgt, ignore_index=-100, reduction="sum")
        )
        count += int((tgt != -100).sum())
    if count == 0:
        raise ValueError("queries: no supervised label tokens after truncation")
    return total / count


def finetune_subset(
    model_id: str,
    pool_source: str,
    subset_file: str,
    out_dir: str,
    seed: int = 0,
    epochs: float = 2.0,
    lr: float = 2e-5,
    grad_accum: int = 128,
    max_length: int = 2048,
    dtype: str = "bfloat16",
    queries: Sequence[Mapping[str, Any]] | None = None,
    args: Any | None = None,
    pool_split: str = "train",
) -> dict[str, float]:
    """Full fine-tuning of ``model_id`` on the pool rows listed in ``subset_file``.

    The paper's step 2 (official ``training/train_sft.py``): 2 epochs, lr 2e-5, linear schedule,
    3 % warm-up, batch 1 × 128, Tulu format, assistant-only loss. ``args``: a ready
    ``TrainingArguments`` (then the keyword settings are ignored). Saves the model to ``out_dir``
    and returns ``{"n_train", "query_loss"}`` (the latter when ``queries`` are given).
    """
    from common.models import load_model, load_tokenizer

    with open(subset_file) as fh:
        ids = json.load(fh)
    wanted = set(ids)
    if len(wanted) != len(ids):
        raise ValueError(f"{subset_file} lists duplicate ids")
    rows = [r for r in load_pool(pool_source, pool_split) if r["id"] in wanted]
    if len(rows) != len(wanted):
        raise ValueError(f"{len(wanted) - len(rows)} subset ids are not in the pool {pool_source}")
    model = load_model(model_id, dtype=dtype)
    tok = load_tokenizer(model_id, padding_side="right")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    train_tulu(
        model,
        tok,
        rows,
        out_dir,
        epochs=epochs,
        lr=lr,
        grad_accum=grad_accum,
        seed=seed,
        max_length=max_length,
        bf16=dtype == "bfloat16" and torch.cuda.is_available(),
        args=args,
    )
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    out = {"n_train": float(len(rows))}
    if queries is not None:
        out["query_loss"] = query_loss(model, tok, queries, max_length)
    with open(os.path.join(out_dir, "finetune.json"), "w") as fh:
        json.dump(out, fh)
    return out
