"""World-model SFT recipe (paper §3.5, Table 9) as thin wrappers over TRL's ``SFTTrainer``.

* Stage 1 (transition modelling): every assistant turn of the multi-turn chat is supervised
  (``assistant_only_loss=True``; "history masking off"), lr 2e-5, 1 epoch, packing, 20K context.
* Stage 2 (reasoning activation): about 1K chain-of-thought samples from the Stage-1 checkpoint, loss
  on the final assistant turn only. Each chat is turned into prompt-completion form (prompt = every
  turn before the last assistant turn), which gives the last-turn-only loss through TRL's
  completion mask.

TRL builds the assistant mask from ``{% generation %}`` markers in the chat template; tokenizers whose
template lacks them get :data:`TRAIN_CHAT_TEMPLATE` (the ChatML layout, with markers).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
from trl import SFTConfig, SFTTrainer

from common.config import checkpointing_kwargs
from common.tiny import word_tokenizer
from methods.webworld.data import Trajectory, to_chat

logger = logging.getLogger(__name__)

__all__ = [
    "TRAIN_CHAT_TEMPLATE",
    "chat_dataset",
    "last_turn_dataset",
    "site_tokenizer",
    "stage1_config",
    "stage2_config",
    "train_world_model",
]

# ChatML with generation markers, so that TRL can build the assistant-token mask.
TRAIN_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}"
    "{% endgeneration %}{{ '\n' }}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Paper Table 9 (LLaMA-Factory recipe), per model size; the effective batch is devices x 2 x 2.
_STAGE1 = dict(
    learning_rate=2.0e-5,
    lr_scheduler_type="cosine",
    warmup_steps=0.1,  # a float < 1 is a ratio of the total steps (transformers >= 5)
    num_train_epochs=1,
    per_device_train_batch_size=2,
    gradient_accumulation_steps=2,
    max_length=20_000,
    packing=True,
    assistant_only_loss=True,
    bf16=True,
    gradient_checkpointing=True,
    use_liger_kernel=True,
)
_STAGE2 = dict(
    _STAGE1,
    learning_rate=8.0e-6,
    num_train_epochs=5,
    assistant_only_loss=False,
    completion_only_loss=True,
)
_SIZES = ("0.6B", "1.7B", "4B", "8B", "14B", "32B", "tiny")


def _config(base: dict, model_size: str, output_dir: str, overrides: dict[str, Any]) -> SFTConfig:
    if model_size not in _SIZES:
        raise ValueError(f"model_size must be one of {_SIZES}, got {model_size!r}")
    kw = dict(base)
    if model_size == "tiny":  # CPU: no bf16, no liger, no checkpointing, no saving
        kw.update(bf16=False, use_liger_kernel=False, gradient_checkpointing=False, use_cpu=True)
        kw.update(dataloader_pin_memory=False, max_length=2048)
    if model_size == "32B":
        kw.update(per_device_train_batch_size=1, gradient_accumulation_steps=4)  # ZeRO-3 (Table 9)
    kw.update(output_dir=output_dir, report_to="none", save_strategy="no", logging_steps=10)
    kw.update(overrides)
    return SFTConfig(**checkpointing_kwargs(SFTConfig, kw))


def stage1_config(model_size: str = "8B", output_dir: str = "outputs/webworld/stage1", **overrides):
    """Stage-1 ``SFTConfig``: lr 2e-5 cosine, warm-up 0.1, 1 epoch, 2x2 per device, packing, 20K
    context, loss on every assistant turn (paper Table 9). ``model_size="tiny"`` gives the CPU variant.

    Raises:
        ValueError: on an unknown ``model_size``.
    """
    return _config(_STAGE1, model_size, output_dir, overrides)


def stage2_config(model_size: str = "8B", output_dir: str = "outputs/webworld/stage2", **overrides):
    """Stage-2 ``SFTConfig``: lr 8e-6, 5 epochs, loss on the last assistant turn only (Table 9);
    feed it :func:`last_turn_dataset`.

    Raises:
        ValueError: on an unknown ``model_size``.
    """
    return _config(_STAGE2, model_size, output_dir, overrides)


def chat_dataset(trajs: Iterable[Trajectory], **templates: str) -> Dataset:
    """Stage-1 training set: one ``{"messages"}`` chat per trajectory (paper App. N.1)."""
    rows = [to_chat(t, **templates) for t in trajs]
    if not rows:
        raise ValueError("trajs must contain at least one trajectory")
    return Dataset.from_list(rows)


def last_turn_dataset(chats: Iterable[dict]) -> Dataset:
    """Stage-2 form: ``{"prompt": turns before the last assistant turn, "completion": [last]}``.

    Stage-2 training of §3.5 (Table 9): loss on the last turn only.

    Raises:
        ValueError: if a chat does not end with an assistant turn.
    """
    rows = []
    for i, c in enumerate(chats):
        msgs = c["messages"] if isinstance(c, dict) else c
        if not msgs or msgs[-1]["role"] != "assistant":
            raise ValueError(f"chats[{i}] must end with an assistant turn")
        rows.append({"prompt": list(msgs[:-1]), "completion": [msgs[-1]]})
    if not rows:
        raise ValueError("chats must not be empty")
    return Dataset.from_list(rows)


# Word-level pre-tokens: a word or a number (with its leading space, if any), one punctuation mark,
# a newline, a tab or a run of spaces. Page titles, link names and bids become single tokens, the same
# wherever they occur (``[43] link 'music'`` and ``click('43')`` share ``43``; ``'music'`` gives ``music``).
_WORD_SPLIT = r" ?[A-Za-z]+| ?\d+| ?[^\sA-Za-z\d]|\n\t*|\t| +"


_SITE_TOKENIZER_KWARGS: dict[str, Any] = {
    "pad_token": "<|pad|>",
    "eos_token": "<|im_end|>",
    "bos_token": "<|im_start|>",
    "unk_token": "<unk>",
    "padding_side": "left",
    "chat_template": TRAIN_CHAT_TEMPLATE,
    "model_max_length": 4096,
}


def site_tokenizer(
    corpus: Iterable[str], vocab_size: int = 2000, kind: str = "bpe"
) -> PreTrainedTokenizerFast:
    """A small tokenizer fitted to a synthetic-site corpus (toy only; our toy design).

    Source: our choice (CPU toy), not in the paper.

    Args:
        corpus: texts of the synthetic grammar (chats, word lists).
        vocab_size: upper bound on the vocabulary (special tokens included).
        kind: ``"word"`` (our toy design: a WordLevel vocabulary of every pre-token in ``corpus``, so that
            a title or a bid is one token and copying it is a single-token lookup) or ``"bpe"``
            (numbers and quoted names are separate pre-tokens, the layout between them merges).

    Both carry the ChatML special tokens and :data:`TRAIN_CHAT_TEMPLATE`; decoding concatenates
    tokens, which is lossless on the corpus alphabet (and, for ``"word"``, on its words).

    Raises:
        ValueError: on an unknown ``kind`` or a ``vocab_size`` too small for the word vocabulary.
    """
    if kind not in ("bpe", "word"):
        raise ValueError(f"kind must be 'bpe' or 'word', got {kind!r}")
    specials = ["<|pad|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
    corpus = list(corpus)
    if kind == "word":
        split = pre_tokenizers.Split(Regex(_WORD_SPLIT), behavior="isolated", invert=False)
        # the role names that TRAIN_CHAT_TEMPLATE writes after <|im_start|> are always in
        roles = ["system", "user", "assistant"]
        words = sorted({w for t in corpus + roles for w, _ in split.pre_tokenize_str(t)})
        if len(words) + len(specials) > vocab_size:
            raise ValueError(
                f"vocab_size must be >= {len(words) + len(specials)} for this corpus, got {vocab_size}"
            )
        return word_tokenizer(
            specials + words,
            "<unk>",
            split_regex=_WORD_SPLIT,
            whitespace_split=False,
            special_tokens=specials,
            fuse_decoder=True,
            **_SITE_TOKENIZER_KWARGS,
        )
    else:
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Split(
            Regex(r"'[^'\n]*'|\d+|\n"), behavior="isolated", invert=False
        )
        alphabet = sorted({ch for t in corpus for ch in t})
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=specials,
            initial_alphabet=alphabet,
            show_progress=False,
        )
        tok.train_from_iterator(corpus, trainer=trainer)
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, **_SITE_TOKENIZER_KWARGS)


def train_world_model(model, tokenizer, dataset: Dataset, config: SFTConfig):
    """Runs TRL ``SFTTrainer`` on a chat (Stage 1) or prompt-completion (Stage 2) dataset.

    Source: paper Section 3.5 and Table 9 (two-stage SFT).

    A tokenizer whose chat template has no ``{% generation %}`` markers gets
    :data:`TRAIN_CHAT_TEMPLATE` when ``config.assistant_only_loss`` is set.

    Returns:
        ``(model, train_loss)``; the model is left in eval mode.
    """
    if not isinstance(config, SFTConfig):
        raise TypeError(f"config must be a trl.SFTConfig, got {type(config).__name__}")
    # "add_generation_prompt" in any template must not count as a {% generation %} marker
    has_marker = re.search(r"{%-?\s*generation\s*-?%}", tokenizer.chat_template or "")
    if config.assistant_only_loss and not has_marker:
        logger.info("chat template has no generation markers; using TRAIN_CHAT_TEMPLATE")
        tokenizer.chat_template = TRAIN_CHAT_TEMPLATE
    trainer = SFTTrainer(
        model=model, args=config, train_dataset=dataset, processing_class=tokenizer
    )
    out = trainer.train()
    model.eval()
    return model, float(out.training_loss)
