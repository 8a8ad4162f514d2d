"""Continued pre-training on a co-occurrence corpus, via transformers.

The repo uses LLaMA-Factory ``stage: pt`` (causal-LM loss on raw text); here the same is done with
``transformers.Trainer`` + ``DataCollatorForLanguageModeling(mlm=False)``. DeepSpeed ZeRO-3 is
reached through ``deepspeed=`` / accelerate at GPU scale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from transformers import TrainingArguments

from common.config import CheckpointingNames

__all__ = ["InductionConfig", "continued_pretrain"]


@dataclass
class InductionConfig(CheckpointingNames, TrainingArguments):
    """HF ``TrainingArguments`` of the induction run plus the tokenisation cutoff.

    The official values (``examples/train_full/llama3_full_pt.yaml``: lr 1e-5, 61 epochs, batch 8 x 8,
    cutoff 256, cosine, warm-up 0.1, a checkpoint every 10 steps, bf16) are the ``trainer`` node of
    ``configs/experiment/llminertia_induce.yaml``.
    """

    max_len: int = field(
        default=256,
        metadata={"help": "tokenisation cutoff of the corpus texts (official cutoff_len 256)"},
    )
    warmup_fraction: float = field(
        default=0.0,
        metadata={
            "help": "warm-up as a fraction of the training steps (official warmup_ratio 0.1); when > 0 "
            "it is passed as warmup_steps (a float < 1 is a ratio in transformers 5)"
        },
    )

    def __post_init__(self):
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ValueError(f"warmup_fraction must be in [0, 1), got {self.warmup_fraction}")
        if self.warmup_fraction > 0:
            self.warmup_steps = self.warmup_fraction
        super().__post_init__()


def continued_pretrain(
    model: Any,
    tokenizer: Any,
    dataset: Any,
    cfg: InductionConfig,
    callbacks: list[Any] | None = None,
) -> Any:
    """Trains ``model`` with the causal-LM loss on ``dataset["text"]`` and returns it (continued
    pre-training of the paper's induction study; official code
    ``examples/train_full/llama3_full_pt.yaml`` settings as :class:`InductionConfig` defaults).

    Args:
        model: a ``PreTrainedModel`` (or a hub id / local path, loaded with ``common.models``).
        tokenizer: its tokenizer (``None`` when ``model`` is a spec string).
        dataset: a ``datasets.Dataset`` with a ``text`` column.
        cfg: :class:`InductionConfig`.
        callbacks: optional ``transformers.TrainerCallback`` list (e.g. evaluation at given steps
            for the training-intensity axis).

    Raises:
        ValueError: if the dataset has no ``text`` column or is empty.
    """
    if "text" not in dataset.column_names or len(dataset) == 0:
        raise ValueError("dataset must be a non-empty Dataset with a 'text' column")
    from transformers import DataCollatorForLanguageModeling, Trainer

    if isinstance(model, str):
        from common.models import load_model, load_tokenizer

        tokenizer = load_tokenizer(model)
        model = load_model(model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tok = dataset.map(
        lambda b: tokenizer(b["text"], truncation=True, max_length=cfg.max_len),
        batched=True,
        remove_columns=dataset.column_names,
    )
    args = cfg
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=tok,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        callbacks=callbacks,
    )
    trainer.train()
    return model
