"""Tiny offline models and tokenizers, built in-process from a seed.

Tests, toy reproductions and the demo tour never download weights. This module builds, in well under a
second, a byte-level BPE tokenizer trained on a small built-in corpus (with a chat template, pad and eos,
left padding), word-level tokenizers over a toy's own vocabulary (``word_tokenizer``) and random-init causal LMs (Qwen2, Llama, Qwen3, GPT-2, GPT-NeoX) or a LLaVA-style vision-language model
from tiny ``transformers`` configs. ``save_tiny`` writes a model and its tokenizer so that the
``Auto*.from_pretrained`` classes reload them identically, which is how the loading code of
``common/models.py`` is tested on local paths.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from common.induction import induction_batch, induction_warmup  # noqa: F401  (re-exported)
from common.tracking import record_model_load

PAD_TOKEN = "<|pad|>"
EOS_TOKEN = "<|im_end|>"
BOS_TOKEN = "<|im_start|>"
ENDOFTEXT_TOKEN = "<|endoftext|>"
IMAGE_TOKEN = "<image>"
SPECIAL_TOKENS = [PAD_TOKEN, ENDOFTEXT_TOKEN, BOS_TOKEN, EOS_TOKEN]
_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# A ChatML-style template (the Qwen family's layout), short enough for tiny contexts.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# The same layout for multimodal turns: content may be a list of {"type": "image"} / {"type": "text"}
# parts (TRL's and transformers' convention); each image part becomes one <image> placeholder.
VL_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<image>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

Arch = Literal["qwen2", "llama", "qwen3", "gpt2", "gpt_neox"]
_ARCHS: dict[str, tuple[type, type]] = {
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    "gpt2": (GPT2Config, GPT2LMHeadModel),
    "gpt_neox": (GPTNeoXConfig, GPTNeoXForCausalLM),
}
# Every dropout probability of each architecture's config (``dropout=`` sets them all at once).
_DROPOUT_FIELDS: dict[str, tuple[str, ...]] = {
    "qwen2": ("attention_dropout",),
    "llama": ("attention_dropout",),
    "qwen3": ("attention_dropout",),
    "gpt2": ("resid_pdrop", "embd_pdrop", "attn_pdrop"),
    "gpt_neox": ("attention_dropout", "hidden_dropout"),
}


def _builtin_corpus() -> list[str]:
    """A small deterministic corpus: arithmetic, digits, chat words and plain English sentences."""
    words = (
        "the a an of to in is are was be it that this for on with as by at from or and not "
        "question answer solve compute think step final result number sum product difference "
        "what how many plus minus times divided equals yes no true false because therefore so "
        "user assistant system you are helpful please give short reply the answer is boxed "
        "model data train test value left right up down start goal maze path cat dog red blue "
        "molecule caption image photo shows object color table chair person car tree sky water"
    ).split()
    lines = [" ".join(words[i : i + 12]) for i in range(0, len(words), 6)]
    for a in range(0, 100, 7):
        for b in range(0, 100, 11):
            lines.append(f"What is {a} + {b}? The answer is {a + b}.")
            lines.append(f"{a} * {b} = {a * b}; {a} - {b} = {a - b}")
    lines += [f"\\boxed{{{i}}} {i}.{i % 10} {-i}" for i in range(200)]
    lines += ["<think> reasoning </think> <answer> 42 </answer> ( ) [ ] { } , ; : ! ? ' \""]
    return lines


@functools.lru_cache(maxsize=4)
def _trained_bpe(vocab_size: int) -> str:
    """Trains the byte-level BPE once per process and returns it serialised (cheap to copy)."""
    tok = Tokenizer(models.BPE(unk_token=None))
    # The Qwen2 layout (NFC, regex split, byte level without its own regex): AutoTokenizer maps a
    # qwen2 config to Qwen2Tokenizer, which rebuilds exactly this pipeline from vocab and merges, so
    # a saved tiny model reloads with identical ids whatever class AutoTokenizer picks.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_builtin_corpus(), trainer=trainer)
    return tok.to_str()


def tiny_tokenizer(vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """Returns a byte-level BPE tokenizer trained on the built-in corpus.

    It has a ChatML chat template, ``<|pad|>`` as pad, ``<|im_end|>`` as eos (what a chat turn ends
    with), ``<|im_start|>`` as bos, and pads on the left (decoder-only generation).

    Args:
        vocab_size: total vocabulary size, special tokens and the 256 byte symbols included.

    Raises:
        ValueError: if ``vocab_size`` cannot hold the byte alphabet and the special tokens.
    """
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be >= {256 + len(SPECIAL_TOKENS)}, got {vocab_size}")
    backend = Tokenizer.from_str(_trained_bpe(vocab_size))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        bos_token=BOS_TOKEN,
        padding_side="left",
        chat_template=CHAT_TEMPLATE,
        model_max_length=2048,
    )


def word_tokenizer(
    vocab: Sequence[str] | Mapping[str, int],
    unk: str,
    *,
    split_regex: str | None = None,
    whitespace_split: bool = True,
    special_tokens: Sequence[str] = (),
    fuse_decoder: bool = False,
    decoder: Any = None,
    **hf_kwargs: Any,
) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over a toy vocabulary: one id per whitespace-separated word.

    Args:
        vocab: the words in id order (a repeated word keeps its first id) or a word -> id map.
        unk: the word that unknown words map to; must be in ``vocab`` (give ``unk_token`` too for
            ``transformers`` to treat it as special).
        split_regex: also split each word into the matches of this regex, kept as tokens
            (``tokenizers``' ``Split(..., "isolated")``), for vocabularies of glued symbols.
        whitespace_split: split at whitespace first (dropping it); False with ``split_regex``
            splits by the regex alone, so whitespace can be a token (character-level vocabularies).
        special_tokens: words never split and skipped by ``decode(skip_special_tokens=True)``.
        fuse_decoder: decode without spaces between tokens (for glued symbols).
        decoder: any other ``tokenizers.decoders`` object (e.g. ``decoders.WordPiece()``).
        **hf_kwargs: passed to ``PreTrainedTokenizerFast`` (``pad_token``, ``eos_token``,
            ``padding_side``, ``chat_template``, ...).

    Raises:
        ValueError: ``unk`` or a special token is not in the vocabulary, or ids repeat.
    """
    ids = dict(vocab) if isinstance(vocab, Mapping) else {}
    if not isinstance(vocab, Mapping):
        for w in vocab:
            ids.setdefault(w, len(ids))
    if len(set(ids.values())) != len(ids):
        raise ValueError("vocab: two words share an id")
    missing = [t for t in (unk, *special_tokens) if t not in ids]
    if missing:
        raise ValueError(f"unk / special_tokens not in vocab: {missing}")
    backend = Tokenizer(models.WordLevel(vocab=ids, unk_token=unk))
    if not whitespace_split and split_regex is None:
        raise ValueError("whitespace_split=False needs a split_regex")
    steps = [pre_tokenizers.WhitespaceSplit()] if whitespace_split else []
    if split_regex is not None:
        steps.append(pre_tokenizers.Split(Regex(split_regex), behavior="isolated"))
    backend.pre_tokenizer = steps[0] if len(steps) == 1 else pre_tokenizers.Sequence(steps)
    if fuse_decoder and decoder is not None:
        raise ValueError("give fuse_decoder or decoder, not both")
    if fuse_decoder:
        backend.decoder = decoders.Fuse()
    elif decoder is not None:
        backend.decoder = decoder
    if special_tokens:
        backend.add_special_tokens(list(special_tokens))
    return PreTrainedTokenizerFast(tokenizer_object=backend, **hf_kwargs)


def tiny_causal_lm(
    arch: Arch = "qwen2",
    hidden_size: int = 64,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int | None = None,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 1024,
    seed: int = 0,
    tokenizer: PreTrainedTokenizerFast | None = None,
    *,
    vocab_size: int | None = None,
    fork_rng: bool = True,
    record: bool = True,
    train: bool = False,
    dropout: float | None = None,
    **overrides: Any,
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast | None]:
    """Builds a random-init causal LM of the given architecture (and its tiny tokenizer).

    The one builder of every toy's decoder-only model: the options reproduce each toy's former
    hand-built config bit for bit (same config, same weights, same global RNG state afterwards).

    Args:
        arch: ``"qwen2"``, ``"llama"``, ``"qwen3"``, ``"gpt2"`` or ``"gpt_neox"``.
        hidden_size, num_hidden_layers, num_attention_heads, max_position_embeddings: the config
            sizes (GPT-2's ``n_embd``, ``n_layer``, ``n_head``, ``n_positions``).
        num_key_value_heads: grouped-query KV heads of the Llama / Qwen family (None: 2); the
            GPT architectures have none, so giving it for them raises.
        intermediate_size: the MLP width (None: 128 for the Llama / Qwen family, the former
            default; GPT-2's own default of ``4 * hidden_size``; ``4 * hidden_size`` for GPT-NeoX).
        seed: seeds the weight initialisation (same seed, same weights).
        tokenizer: gives the vocabulary size and the pad / eos / bos ids (default:
            ``tiny_tokenizer()`` unless ``vocab_size`` is given).
        vocab_size: the vocabulary size; without a tokenizer the token ids keep the config's
            defaults (set them in ``overrides``) and no tokenizer is built or returned; with one it
            must be at least ``len(tokenizer)`` (spare ids).
        fork_rng: True restores the global torch RNG after the initialisation (the caller's stream
            does not move); False leaves it where the seeded initialisation ends, as a toy that
            calls ``torch.manual_seed(seed)`` and then builds its model does.
        record: note the build in ``results.json``'s ``models_loaded``
            (:func:`common.tracking.record_model_load`).
        train: return the model in train mode (a freshly built ``nn.Module``'s mode) instead of
            eval mode.
        dropout: sets every dropout probability of the architecture's config to this value
            (GPT-2: ``resid_pdrop``, ``embd_pdrop``, ``attn_pdrop``; GPT-NeoX: attention and hidden;
            Llama / Qwen: attention); None keeps the config defaults. ``overrides`` still win.
        **overrides: passed to the config last, so they win (e.g. ``rope_theta``,
            ``tie_word_embeddings``, ``bos_token_id``, GPT-2's ``resid_pdrop``).

    Returns:
        ``(model, tokenizer)``, the model float32 on CPU; the tokenizer is None when only
        ``vocab_size`` was given.

    Raises:
        ValueError: on an unknown ``arch``, heads that do not divide the hidden size, KV heads for
            a GPT architecture, a ``vocab_size`` smaller than the tokenizer, or a ``dropout`` outside
            [0, 1).
    """
    if arch not in _ARCHS:
        raise ValueError(f"arch must be one of {sorted(_ARCHS)}, got {arch!r}")
    if dropout is not None and not 0.0 <= dropout < 1.0:  # also rejects NaN
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
    gpt = arch in ("gpt2", "gpt_neox")
    if gpt and num_key_value_heads is not None:
        raise ValueError(f"num_key_value_heads: {arch} has no grouped-query attention")
    kv_heads = num_attention_heads if gpt else (num_key_value_heads or 2)
    if hidden_size % num_attention_heads or num_attention_heads % kv_heads:
        raise ValueError(
            "num_attention_heads must divide hidden_size and num_key_value_heads must divide "
            f"num_attention_heads, got {hidden_size=}, {num_attention_heads=}, {kv_heads=}"
        )
    tok = tokenizer if tokenizer is not None or vocab_size is not None else tiny_tokenizer()
    if tok is not None and vocab_size is not None and vocab_size < len(tok):
        raise ValueError(f"vocab_size ({vocab_size}) must be >= len(tokenizer) ({len(tok)})")
    kwargs: dict[str, Any] = {"vocab_size": vocab_size if vocab_size is not None else len(tok)}
    if arch == "gpt2":
        kwargs.update(n_embd=hidden_size, n_layer=num_hidden_layers, n_head=num_attention_heads)
        kwargs["n_positions"] = max_position_embeddings
        if intermediate_size is not None:
            kwargs["n_inner"] = intermediate_size
    else:
        kwargs.update(
            hidden_size=hidden_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            max_position_embeddings=max_position_embeddings,
            intermediate_size=intermediate_size or (4 * hidden_size if gpt else 128),
        )
    if not gpt:
        kwargs["num_key_value_heads"] = kv_heads
        kwargs["tie_word_embeddings"] = True
    if arch == "qwen3":
        kwargs["head_dim"] = hidden_size // num_attention_heads
    if tok is not None:
        kwargs.update(
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
            bos_token_id=tok.bos_token_id,
        )
    if dropout is not None:
        kwargs.update(dict.fromkeys(_DROPOUT_FIELDS[arch], float(dropout)))
    config_cls, model_cls = _ARCHS[arch]
    config = config_cls(**{**kwargs, **overrides})
    with torch.random.fork_rng(devices=[], enabled=fork_rng):
        torch.manual_seed(seed)
        model = model_cls(config)
    if tok is not None:
        for name in ("pad_token_id", "eos_token_id", "bos_token_id"):
            setattr(model.generation_config, name, getattr(config, name))
    if record:
        record_model_load(
            f"tiny-{arch} (in-process)", hidden=hidden_size, layers=num_hidden_layers, seed=seed
        )
    return model.train(train), tok


def save_tiny(model: PreTrainedModel, tokenizer, path: str | Path) -> Path:
    """Writes ``model`` and ``tokenizer`` (or processor) to ``path`` for ``from_pretrained``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def tiny_llava(seed: int = 0, image_size: int = 32, patch_size: int = 8, hidden_size: int = 64):
    """Builds a tiny LLaVA-style vision-language model (CLIP vision tower + Llama) and its processor.

    The processor is a ``LlavaProcessor`` over the PIL CLIP image processor (no torchvision) and the
    tiny tokenizer with an ``<image>`` token; each image expands to ``(image_size/patch_size)**2``
    image tokens.

    Returns:
        ``(model, processor)``; the model in eval mode, float32, on CPU.
    """
    from transformers import (
        CLIPImageProcessorPil,
        CLIPVisionConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    tok = tiny_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    image_token_id = tok.convert_tokens_to_ids(IMAGE_TOKEN)
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=image_size,
        patch_size=patch_size,
        projection_dim=32,
    )
    text = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_id=image_token_id,
        vision_feature_select_strategy="default",  # drop CLS: one token per patch
        vision_feature_layer=-1,
        image_seq_length=(image_size // patch_size) ** 2,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlavaForConditionalGeneration(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": image_size},
        crop_size={"height": image_size, "width": image_size},
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        patch_size=patch_size,
        vision_feature_select_strategy="default",
        image_token=IMAGE_TOKEN,
        num_additional_image_tokens=1,  # CLIP's CLS, removed again by the "default" strategy
        chat_template=VL_CHAT_TEMPLATE,
    )
    record_model_load("tiny-llava (in-process)", hidden=hidden_size, seed=seed)
    return model.eval(), processor
