"""Model and tokenizer loading: hub ids, local paths and ``tiny-*`` specs, one entry point.

``load_model("Qwen/Qwen3-4B-Base")`` on a user's GPU machine, ``load_model("/ckpt/run3")`` on a local
checkpoint and ``load_model("tiny-qwen2")`` in tests all go through the same function. Device and dtype
come from accelerate's process state, so the same call works under ``accelerate launch``. A hub id
that is not available offline fails with a message saying how to provide the weights.
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
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
    PreTrainedModel,
)

from common import tiny
from common.tracking import record_model_load

logger = logging.getLogger(__name__)

TINY_PREFIX = "tiny-"
TINY_ARCHS = ("qwen2", "llama", "qwen3")
ModelKind = Literal["causal_lm", "vision_language"]
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
        kind: ``"causal_lm"`` or ``"vision_language"`` (hub/path models only).
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
        classes = {
            "causal_lm": AutoModelForCausalLM,
            "vision_language": AutoModelForImageTextToText,
        }
        if kind not in classes:
            raise ValueError(f"kind must be one of {sorted(classes)}, got {kind!r}")
        try:
            model = classes[kind].from_pretrained(spec, dtype=torch_dtype, **kwargs)
        except OSError as err:
            if Path(spec).is_dir():
                raise
            raise _not_available(spec, err) from err
        logger.info("loaded %s (%s) on %s", spec, torch_dtype, dev)
        record_model_load(spec, cls=type(model).__name__, dtype=torch_dtype)
    return model.to(device=dev, dtype=torch_dtype)


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
