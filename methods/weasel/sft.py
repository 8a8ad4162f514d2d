"""Paper-scale SFT glue (spec §3.8, §7): AgentLab records -> TRL prompt/completion data, the three
paper recipes (LoRA r 8, alpha 8, dropout 0, all-linear; AdamW, cosine, warmup 0.1, bf16), and a
``train_sft`` entry point that builds ``trl.SFTTrainer`` with a PEFT ``LoraConfig``.

The selected subset stays in AgentLab's chat-record format (``{"messages": [system, user,
assistant]}`` with ``<think>…</think><action>…</action>``), which is what the SFT data loader here
and AgentLab's GenericAgent prompts use; the merged model is served by vLLM for AgentLab.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["SFT_RECIPES", "SFTRecipe", "load_agentlab_records", "to_prompt_completion", "train_sft"]


@dataclass(frozen=True)
class SFTRecipe:
    """One paper SFT recipe (spec §3.8 table; [secondary] source: the fork citing paper Table 9)."""

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
    """Reads an AgentLab-format file: a JSON list (or JSON lines) of ``{"messages": [...]}``.

    Raises:
        FileNotFoundError: if ``path`` is missing.
        ValueError: if a record lacks a ``messages`` list with user and assistant turns.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"path does not exist: {p}")
    text = p.read_text(encoding="utf-8").strip()
    rows = json.loads(text) if text.startswith("[") else [json.loads(x) for x in text.splitlines()]
    for i, r in enumerate(rows):
        msgs = r.get("messages") if isinstance(r, dict) else None
        roles = [m.get("role") for m in msgs] if isinstance(msgs, list) else []
        if "user" not in roles or "assistant" not in roles:
            raise ValueError(f"{p} record {i}: needs a messages list with user and assistant turns")
    return rows


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


def train_sft(
    model: str,
    records: list[dict],
    output_dir: str,
    recipe: SFTRecipe | None = None,
    world_size: int = 1,
    per_device_batch: int = 1,
    max_length: int = 12288,
    bf16: bool = True,
    max_steps: int = -1,
    **sft_kw: Any,
) -> Any:
    """LoRA SFT of ``model`` on AgentLab ``records`` with TRL; returns the trainer after training.

    ``gradient_accumulation_steps`` is set so that ``per_device_batch * world_size * accum``
    equals the recipe's global batch.

    Raises:
        ValueError: if the global batch is not divisible by ``per_device_batch * world_size``.
        KeyError: if ``recipe`` is None and ``model`` has no entry in :data:`SFT_RECIPES`.
    """
    from datasets import Dataset
    from peft import LoraConfig
    from trl import SFTConfig, SFTTrainer

    rc = recipe or SFT_RECIPES[model]
    if rc.global_batch % (per_device_batch * world_size):
        raise ValueError(
            f"global_batch {rc.global_batch} is not divisible by per_device_batch x world_size "
            f"= {per_device_batch * world_size}"
        )
    args = SFTConfig(
        output_dir=output_dir,
        learning_rate=rc.learning_rate,
        num_train_epochs=rc.num_train_epochs,
        per_device_train_batch_size=per_device_batch,
        gradient_accumulation_steps=rc.global_batch // (per_device_batch * world_size),
        lr_scheduler_type=rc.lr_scheduler_type,
        warmup_steps=rc.warmup_ratio,  # transformers 5: a float in [0, 1) is a ratio
        max_length=max_length,
        completion_only_loss=True,
        bf16=bf16,
        max_steps=max_steps,
        save_strategy="no" if max_steps > 0 else "epoch",
        report_to="none",
        **sft_kw,
    )
    lora = LoraConfig(
        r=rc.lora_r,
        lora_alpha=rc.lora_alpha,
        lora_dropout=rc.lora_dropout,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )
    if model.startswith("tiny-"):  # CPU tests: common.tiny models by name
        from common.models import load_model, load_tokenizer

        model_obj, tok = load_model(model), load_tokenizer(model)
    else:
        model_obj, tok = model, None
    trainer = SFTTrainer(
        model=model_obj,
        args=args,
        train_dataset=Dataset.from_list(to_prompt_completion(records)),
        peft_config=lora,
        processing_class=tok,
    )
    trainer.train()
    return trainer


def main(argv: list[str] | None = None) -> None:
    """``python -m methods.weasel.sft MODEL DATA_JSON OUT_DIR [--world-size N]`` (paper recipe of
    MODEL from :data:`SFT_RECIPES`; launch under ``accelerate launch`` for multi-GPU/ZeRO-3)."""
    import argparse
    import os

    ap = argparse.ArgumentParser(description="Weasel LoRA SFT with the paper recipe")
    ap.add_argument("model", choices=sorted(SFT_RECIPES))
    ap.add_argument("data")
    ap.add_argument("output_dir")
    ap.add_argument("--world-size", type=int, default=int(os.environ.get("WORLD_SIZE", "1")))
    ap.add_argument("--max-length", type=int, default=12288)
    a = ap.parse_args(argv)
    train_sft(
        a.model,
        load_agentlab_records(a.data),
        a.output_dir,
        world_size=a.world_size,
        max_length=a.max_length,
    )


if __name__ == "__main__":
    main()
