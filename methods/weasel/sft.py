"""Paper-scale SFT (the paper's recipe as quoted by secondary notes, "Table 9"; official README): AgentLab records -> TRL prompt/completion
data, the three paper recipes (LoRA r 8, alpha 8, dropout 0, all-linear; AdamW, cosine, warmup 0.1,
bf16), :class:`WeaselSFTConfig` (a ``trl.SFTConfig`` with the LoRA knobs as fields) and
:func:`train_sft`, which builds ``trl.SFTTrainer`` with a PEFT ``LoraConfig``.

The selected subset stays in AgentLab's chat-record format (``{"messages": [system, user,
assistant]}`` with ``<think>…</think><action>…</action>``), which is what the SFT data loader here
and AgentLab's GenericAgent prompts use; the merged model is served by vLLM for AgentLab.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import SFTConfig

from common.config import CheckpointingNames

__all__ = [
    "SFT_RECIPES",
    "SFTRecipe",
    "WeaselSFTConfig",
    "load_agentlab_records",
    "recipe_trainer_node",
    "to_prompt_completion",
    "train_sft",
]


@dataclass(frozen=True)
class SFTRecipe:
    """One paper SFT recipe (paper Table 9 as cited by a public fork; the paper text was not
    available to us)."""

    learning_rate: float
    num_train_epochs: float
    global_batch: int
    lora_r: int = 8
    lora_alpha: int = 8
    lora_dropout: float = 0.0
    warmup_ratio: float = 0.1
    lr_scheduler_type: str = "cosine"


SFT_RECIPES: dict[str, SFTRecipe] = {
    "Qwen/Qwen2.5-7B-Instruct": SFTRecipe(2e-5, 4, 8),
    "google/gemma-3-4b-it": SFTRecipe(2e-5, 2, 16),
    "Qwen/Qwen3-8B": SFTRecipe(1e-6, 2, 8),
}


def load_agentlab_records(path: str | Path) -> list[dict]:
    """Reads an AgentLab-format file: a JSON list (or JSON lines) of ``{"messages": [...]}``
    (:func:`methods.weasel.data.load_agentlab_file`; the official subset file
    ``weasel_agenttrek_train_10k.json`` is such a list).

    Raises:
        FileNotFoundError: if ``path`` is missing.
        ValueError: if a record lacks a ``messages`` list with user and assistant turns.
    """
    from .data import load_agentlab_file

    return load_agentlab_file(path)


def to_prompt_completion(records: list[dict]) -> list[dict[str, list[dict]]]:
    """Chat records -> TRL conversational prompt/completion rows (prompt = every turn before the
    last assistant turn, completion = that assistant turn), so ``completion_only_loss`` applies and
    the tokenizer's chat template renders both sides.

    Raises:
        ValueError: if a record has no assistant turn.
    """
    out = []
    for i, r in enumerate(records):
        msgs = r["messages"]
        last = max((k for k, m in enumerate(msgs) if m.get("role") == "assistant"), default=-1)
        if last < 1:
            raise ValueError(f"record {i} has no assistant turn after a prompt")
        out.append({"prompt": msgs[:last], "completion": [msgs[last]]})
    return out


@dataclass
class WeaselSFTConfig(CheckpointingNames, SFTConfig):
    """``trl.SFTConfig`` plus the paper's LoRA settings (the adapter is built from these fields)."""

    # Re-declared with a float default: a ratio such as 0.1 (transformers 5 reads a float < 1 as a
    # ratio of the total steps) then passes common.config's type check of the trainer node, which
    # takes the type from the default (TrainingArguments' int 0).
    warmup_steps: float = field(
        default=0.0,
        metadata={"help": "Warm-up steps, or a ratio of the total steps when < 1 (recipe: 0.1)."},
    )
    lora_r: int = field(default=8, metadata={"help": "LoRA rank (paper recipe: 8)."})
    lora_alpha: int = field(default=8, metadata={"help": "LoRA alpha (paper recipe: 8)."})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout (paper recipe: 0)."})
    lora_target_modules: str = field(
        default="all-linear", metadata={"help": "PEFT target_modules (paper recipe: all-linear)."}
    )


def recipe_trainer_node(
    model: str, world_size: int = 1, per_device_batch: int = 1
) -> dict[str, Any]:
    """The ``trainer`` node of :data:`SFT_RECIPES` ``[model]`` for a given device layout.

    Source: paper Table 9 (as cited by a public fork) for the recipe; the layout is engineering.

    ``gradient_accumulation_steps`` is set so that ``per_device_batch * world_size * accum``
    equals the recipe's global batch.

    Raises:
        KeyError: if ``model`` has no recipe.
        ValueError: if the global batch is not divisible by ``per_device_batch * world_size``.
    """
    rc = SFT_RECIPES[model]
    if rc.global_batch % (per_device_batch * world_size):
        raise ValueError(
            f"global_batch {rc.global_batch} is not divisible by per_device_batch x world_size "
            f"= {per_device_batch * world_size}"
        )
    return {
        "learning_rate": rc.learning_rate,
        "num_train_epochs": rc.num_train_epochs,
        "per_device_train_batch_size": per_device_batch,
        "gradient_accumulation_steps": rc.global_batch // (per_device_batch * world_size),
        "lr_scheduler_type": rc.lr_scheduler_type,
        "warmup_steps": rc.warmup_ratio,  # transformers 5: a float in [0, 1) is a ratio
        "lora_r": rc.lora_r,
        "lora_alpha": rc.lora_alpha,
        "lora_dropout": rc.lora_dropout,
    }


def train_sft(model: Any, tokenizer: Any, records: list[dict], args: WeaselSFTConfig) -> Any:
    """LoRA SFT of ``model`` on AgentLab ``records`` with TRL; returns the trainer after training.

    Args:
        model: a loaded causal LM (``common.models.load_model``).
        tokenizer: its tokenizer (with a chat template).
        records: AgentLab chat records (:func:`load_agentlab_records`).
        args: the SFT settings; ``completion_only_loss`` trains on the assistant turn only.

    Raises:
        TypeError: if ``args`` is not a :class:`WeaselSFTConfig`.
        ValueError: if ``records`` is empty.
    """
    from datasets import Dataset
    from peft import LoraConfig
    from trl import SFTTrainer

    if not isinstance(args, WeaselSFTConfig):
        raise TypeError(f"args must be a WeaselSFTConfig, got {type(args).__name__}")
    if not records:
        raise ValueError("records must hold at least one AgentLab chat record")
    lora = LoraConfig(
        r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout,
        target_modules=args.lora_target_modules,
        task_type="CAUSAL_LM",
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(to_prompt_completion(records)),
        peft_config=lora,
        processing_class=tokenizer,
    )
    trainer.train()
    return trainer
