"""Continued pre-training on a co-occurrence corpus, via transformers.

The repo uses LLaMA-Factory ``stage: pt`` (causal-LM loss on raw text); here the same is done with
``transformers.Trainer`` + ``DataCollatorForLanguageModeling(mlm=False)``. DeepSpeed ZeRO-3 is
reached through ``deepspeed=`` / accelerate at GPU scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["InductionConfig", "continued_pretrain"]


@dataclass
class InductionConfig:
    """Training settings; defaults are the repo's ``llama3_full_pt.yaml``."""

    output_dir: str = "outputs/induce"
    learning_rate: float = 1e-5
    num_train_epochs: float = 61.0
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 8
    max_len: int = 256
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = 0.1
    save_steps: int = 10
    save_strategy: str = "steps"  # "no" for toys (no checkpoint files)
    bf16: bool = True
    max_steps: int = -1
    deepspeed: str | None = None
    seed: int = 0


def continued_pretrain(
    model: Any,
    tokenizer: Any,
    dataset: Any,
    cfg: InductionConfig,
    callbacks: list[Any] | None = None,
) -> Any:
    """Trains ``model`` with the causal-LM loss on ``dataset["text"]`` and returns it.

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
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

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
    args = TrainingArguments(
        output_dir=cfg.output_dir,
        learning_rate=cfg.learning_rate,
        num_train_epochs=cfg.num_train_epochs,
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        lr_scheduler_type=cfg.lr_scheduler_type,
        warmup_steps=cfg.warmup_ratio,  # transformers 5: a float in [0, 1) is a ratio
        save_steps=cfg.save_steps,
        save_strategy=cfg.save_strategy,
        bf16=cfg.bf16,
        deepspeed=cfg.deepspeed,
        seed=cfg.seed,
        report_to=[],
        logging_steps=10,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=tok,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        callbacks=callbacks,
    )
    trainer.train()
    return model
