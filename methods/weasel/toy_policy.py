"""The SynthWeb toy's policy (our toy, not in the paper): a word-level tokenizer built from the
corpus, a tiny random-init causal LM (2-layer GPT-2 or ``common.tiny`` Llama), and its TRL SFT
(prompt–completion, completion-only loss; the paper fine-tunes with LLaMA-Factory LoRA-SFT,
docs/methods/weasel.md, Deviations)."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from typing import Any

from .config import POLICY_ARCHS

__all__ = ["POLICY_ARCHS", "build_policy", "build_word_tokenizer", "train_policy"]

_TOKEN_RE = r"\w+|[^\w\s]"


def build_word_tokenizer(texts: Sequence[str]) -> Any:
    """Word-level tokenizer (words and single punctuation marks) built from the corpus."""
    from tokenizers import decoders

    from common.tiny import word_tokenizer

    vocab = ["<pad>", "<eos>", "<unk>"]
    seen = set(vocab)
    for t in texts:
        for w in re.findall(_TOKEN_RE, t):
            if w not in seen:
                seen.add(w)
                vocab.append(w)
    for b in range(10, 400):  # every bid, so unseen test bids are not <unk>
        if str(b) not in seen:
            seen.add(str(b))
            vocab.append(str(b))
    # Whitespace is split off first, so no pre-token is a bare space (a lone ``Split(..., "isolated")``
    # keeps the gaps between matches as pre-tokens, and they are all <unk>).
    return word_tokenizer(
        {t: i for i, t in enumerate(vocab)},
        "<unk>",
        split_regex=_TOKEN_RE,
        decoder=decoders.WordPiece(),
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
    )


def build_policy(
    tokenizer: Any,
    arch: str = "gpt2",
    n_embd: int = 64,
    max_length: int = 256,
    seed: int = 0,
) -> Any:
    """A random-init 2-layer causal LM over ``tokenizer``'s vocabulary, in train mode.

    ``arch="gpt2"``: GPT-2 (learned absolute positions, 4 heads, no dropout), the original toy
    policy. ``arch="llama"``: ``common.tiny``'s Llama (rotary positions, 4 heads, 2 KV heads,
    untied embeddings), which forms the copy (induction) circuit of ``common.tiny.induction_warmup``
    on this budget where the GPT-2 does not.

    Raises:
        ValueError: on an unknown ``arch``.
    """
    import torch

    if arch not in POLICY_ARCHS:
        raise ValueError(f"arch must be one of {POLICY_ARCHS}, got {arch!r}")
    torch.manual_seed(seed)
    if arch == "llama":
        from common.tiny import tiny_causal_lm

        model, _ = tiny_causal_lm(
            "llama",
            hidden_size=n_embd,
            intermediate_size=2 * n_embd,
            max_position_embeddings=max_length,
            seed=seed,
            tokenizer=tokenizer,
            tie_word_embeddings=False,
        )
        model.train()
        return model
    from common.tiny import tiny_causal_lm

    model, _ = tiny_causal_lm(
        "gpt2",
        hidden_size=n_embd,
        num_attention_heads=4,
        max_position_embeddings=max_length,
        seed=seed,
        tokenizer=tokenizer,
        fork_rng=False,
        record=False,
        train=True,
        dropout=0.0,
        bos_token_id=tokenizer.eos_token_id,
    )
    return model


def train_policy(
    examples: list[dict[str, str]],
    tokenizer: Any,
    seed: int = 0,
    epochs: float = 2.0,
    lr: float = 1e-3,
    batch_size: int = 16,
    n_embd: int = 64,
    max_length: int = 256,
    model: Any | None = None,
) -> tuple[Any, dict[str, float]]:
    """SFT of the toy policy with TRL ``SFTTrainer`` (completion-only loss).

    ``model``: a policy from :func:`build_policy` (for instance one warmed up on the random-token
    lookup task, ``common.tiny.induction_warmup``, shared by every arm of a seed); None builds a
    random-init 2-layer GPT-2 of width ``n_embd``.
    """
    import time

    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from common.config import checkpointing_kwargs

    if model is None:
        model = build_policy(tokenizer, "gpt2", n_embd, max_length, seed)
    scratch = tempfile.TemporaryDirectory(prefix="weasel_sft_")  # TRL's folder; nothing is saved
    # TRL's SFTConfig defaults gradient_checkpointing=True, a name transformers 5 deprecates:
    # checkpointing_kwargs passes the same value under activation_checkpointing (no warning)
    kwargs = {
        "output_dir": scratch.name,
        "learning_rate": lr,
        "num_train_epochs": epochs,
        "per_device_train_batch_size": batch_size,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "max_length": max_length,
        "completion_only_loss": True,
        "save_strategy": "no",
        "report_to": "none",
        "logging_steps": 10,
        "use_cpu": True,
        "bf16": False,
        "dataloader_pin_memory": False,
        "disable_tqdm": True,
        "seed": seed,
        "data_seed": seed,
    }
    args = SFTConfig(**checkpointing_kwargs(SFTConfig, kwargs))
    ds = Dataset.from_list(examples)
    t0 = time.time()
    with scratch:
        trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer)
        trainer.train()
    wall = time.time() - t0
    n_tokens = sum(len(x) for x in trainer.train_dataset["input_ids"]) * epochs
    model.eval()
    return model, {
        "train_tokens": float(n_tokens),
        "train_seconds": wall,
        "n_train": float(len(ds)),
    }
