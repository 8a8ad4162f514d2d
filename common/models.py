"""Model and tokenizer loading: hub ids, local paths and ``tiny-*`` specs, one entry point.

``load_model("Qwen/Qwen3-4B-Base")`` on a user's GPU machine, ``load_model("/ckpt/run3")`` on a local
checkpoint and ``load_model("tiny-qwen2")`` in tests all go through the same function. Device and dtype
come from accelerate's process state, so the same call works under ``accelerate launch``. A hub id
that is not available offline fails with a message saying how to provide the weights.

``kind`` picks the auto class (``causal_lm``, ``vision_language``, ``sequence_classification``,
``image_classification``) or, for ``masked_diffusion`` (LLaDA, Dream), the checkpoint's own remote code
through the compatibility layer of :mod:`common.model_compat`. :func:`init_empty_model` builds the
same class from the config alone on the meta device (no weights read or allocated), for checks of
what a checkpoint is before any download.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageClassification,
    AutoModelForImageTextToText,
    AutoModelForSequenceClassification,
    AutoProcessor,
    AutoTokenizer,
    PreTrainedModel,
)

from common import model_compat, tiny
from common.tracking import record_model_load

logger = logging.getLogger(__name__)

TINY_PREFIX = "tiny-"
TINY_ARCHS = ("qwen2", "llama", "qwen3")
ModelKind = Literal[
    "causal_lm",
    "vision_language",
    "masked_diffusion",
    "sequence_classification",
    "image_classification",
]
#: ``kind`` -> the auto class; ``masked_diffusion`` resolves the checkpoint's own class instead.
AUTO_CLASSES: dict[str, type | None] = {
    "causal_lm": AutoModelForCausalLM,
    "vision_language": AutoModelForImageTextToText,
    "masked_diffusion": None,
    "sequence_classification": AutoModelForSequenceClassification,
    "image_classification": AutoModelForImageClassification,
}
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class ModelNotAvailableError(OSError):
    """A hub id could not be resolved offline (or at all)."""


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """Returns ``device`` or, when None, the device accelerate assigns to this process."""
    if device is not None:
        return torch.device(device)
    from accelerate import PartialState

    return PartialState().device


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """Maps ``"auto"`` to bfloat16 on a CUDA device that supports it, else float32.

    Raises:
        ValueError: on an unknown dtype name.
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be 'auto' or one of {sorted(_DTYPES)}, got {dtype!r}")
    return _DTYPES[dtype]


def _tiny_arch(spec: str) -> str | None:
    if not spec.startswith(TINY_PREFIX):
        return None
    arch = spec[len(TINY_PREFIX) :]
    if arch not in (*TINY_ARCHS, "llava"):
        raise ValueError(
            f"unknown tiny model spec {spec!r}; valid: "
            + ", ".join(f"'tiny-{a}'" for a in (*TINY_ARCHS, "llava"))
        )
    return arch


def _not_available(spec: str, err: Exception) -> ModelNotAvailableError:
    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
    return ModelNotAvailableError(
        f"model {spec!r} is neither a local directory nor available in the Hugging Face cache"
        + (" (HF_HUB_OFFLINE is set, so nothing is downloaded)" if offline else "")
        + ". Provide the weights: download them on a machine with network access "
        f"(`huggingface-cli download {spec}`) and copy the cache (HF_HOME), or pass a local path "
        "that holds config.json and the weights. For tests and toys use a 'tiny-qwen2' spec. "
        f"Underlying error: {type(err).__name__}: {err}"
    )


@contextlib.contextmanager
def weights_hint(spec: str | os.PathLike) -> Iterator[None]:
    """Turns an ``OSError`` raised while loading ``spec`` into :class:`ModelNotAvailableError`.

    Wrap any ``from_pretrained(spec)`` (a CLIP, an encoder, a tokenizer) so that a hub id missing
    offline gives the same "how to provide the weights" message as :func:`load_model`. Errors for an
    existing local directory (a broken checkpoint) pass through unchanged.
    """
    try:
        yield
    except ModelNotAvailableError:
        raise
    except OSError as err:
        if Path(spec).is_dir():
            raise
        raise _not_available(str(spec), err) from err


def load_model(
    spec: str,
    dtype: str | torch.dtype = "auto",
    device: str | torch.device | None = None,
    kind: ModelKind = "causal_lm",
    seed: int = 0,
    **kwargs,
) -> PreTrainedModel:
    """Loads a model by hub id, local path or ``tiny-<arch>`` spec.

    Args:
        spec: ``"org/name"`` (hub id), a local directory, or ``"tiny-qwen2"``, ``"tiny-llama"``,
            ``"tiny-qwen3"``, ``"tiny-llava"`` (built in-process, random init from ``seed``).
        dtype: ``"auto"`` (bf16 on capable GPUs, else fp32), ``"float32"``, ``"bfloat16"``,
            ``"float16"`` or a ``torch.dtype``.
        device: target device; None asks accelerate for this process's device.
        kind: ``"causal_lm"``, ``"vision_language"``, ``"sequence_classification"``,
            ``"image_classification"``, or ``"masked_diffusion"`` (the checkpoint's remote code,
            loaded through :mod:`common.model_compat`); hub/path models only.
        seed: initialisation seed of tiny models.
        **kwargs: passed to ``from_pretrained`` (e.g. ``attn_implementation``) or, for tiny
            specs, to ``tiny_causal_lm`` (sizes).

    Raises:
        ModelNotAvailableError: the hub id is not available offline; the message says how to fix it.
        ValueError: on an unknown tiny spec, dtype or kind.
    """
    if not isinstance(spec, str) or not spec:
        raise TypeError(f"spec must be a non-empty string (hub id, path or tiny-*), got {spec!r}")
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    arch = _tiny_arch(spec)
    if arch == "llava":
        model, _ = tiny.tiny_llava(seed=seed)
    elif arch is not None:
        model, _ = tiny.tiny_causal_lm(arch, seed=seed, **kwargs)
    else:
        with weights_hint(spec):
            model = _from_pretrained(spec, kind, torch_dtype, kwargs)
        logger.info("loaded %s (%s) on %s", spec, torch_dtype, dev)
        record_model_load(spec, cls=type(model).__name__, dtype=torch_dtype)
    return model.to(device=dev, dtype=torch_dtype)


def _check_kind(kind: str) -> None:
    if kind not in AUTO_CLASSES:
        raise ValueError(f"kind must be one of {sorted(AUTO_CLASSES)}, got {kind!r}")


def _from_pretrained(spec: str, kind: str, dtype: torch.dtype, kwargs: dict) -> PreTrainedModel:
    """``from_pretrained`` through the auto class of ``kind`` (remote code for masked diffusion)."""
    _check_kind(kind)
    if AUTO_CLASSES[kind] is not None:
        return AUTO_CLASSES[kind].from_pretrained(spec, dtype=dtype, **kwargs)
    revision = kwargs.get("revision")
    config = AutoConfig.from_pretrained(spec, trust_remote_code=True, revision=revision)
    cls = model_compat.remote_model_class(config)
    with model_compat.remote_code_compat(config):
        model = cls.from_pretrained(spec, config=config, dtype=dtype, **kwargs)
    return model_compat.finish_remote_load(model, config)


def init_empty_model(
    spec: str, kind: ModelKind = "causal_lm", dtype: str | torch.dtype = "bfloat16", **config_kwargs
) -> PreTrainedModel:
    """The model ``load_model(spec, kind=kind)`` would build, from its config alone, on ``meta``.

    Reads only ``config.json`` (and, for ``masked_diffusion``, the checkpoint's modelling files):
    no weights are read or allocated, so an 8B checkpoint's class, sizes and parameter count can be
    checked in a second.

    Args:
        spec: hub id or local folder holding ``config.json``.
        kind: as in :func:`load_model`.
        dtype: parameter dtype of the empty model.
        **config_kwargs: passed to ``AutoConfig.from_pretrained`` (e.g. ``revision``).

    Raises:
        ModelNotAvailableError: the config is neither local nor in the Hugging Face cache.
        ValueError: on an unknown kind or dtype.
    """
    _check_kind(kind)
    torch_dtype = resolve_dtype(dtype, torch.device("cpu"))
    remote = AUTO_CLASSES[kind] is None
    with weights_hint(spec):
        config = AutoConfig.from_pretrained(spec, trust_remote_code=remote, **config_kwargs)
    with torch.device("meta"):
        if remote:
            cls = model_compat.remote_model_class(config)
            with model_compat.remote_code_compat(config):
                return cls._from_config(config, dtype=torch_dtype)
        return AUTO_CLASSES[kind].from_config(config, dtype=torch_dtype)


def load_tokenizer(spec: str, padding_side: str = "left", **kwargs):
    """Loads the tokenizer (or, for ``tiny-llava``, the processor) matching ``load_model(spec)``.

    Decoder-only generation wants left padding; a tokenizer without a pad token gets its eos.

    Raises:
        ModelNotAvailableError: the hub id is not available offline.
    """
    arch = _tiny_arch(spec)
    if arch == "llava":
        return tiny.tiny_llava()[1]
    if arch is not None:
        return tiny.tiny_tokenizer()
    try:
        tok = AutoTokenizer.from_pretrained(spec, padding_side=padding_side, **kwargs)
    except OSError as err:
        if Path(spec).is_dir():
            raise
        raise _not_available(spec, err) from err
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_processor(spec: str, **kwargs):
    """Loads a multimodal processor by hub id or path (``tiny-llava`` builds the tiny one)."""
    if _tiny_arch(spec) == "llava":
        return tiny.tiny_llava()[1]
    try:
        return AutoProcessor.from_pretrained(spec, **kwargs)
    except OSError as err:
        if Path(spec).is_dir():
            raise
        raise _not_available(spec, err) from err
