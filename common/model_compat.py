"""Loading published remote-code checkpoints (LLaDA, Dream) under the installed transformers.

LLaDA (``GSAI-ML/LLaDA-8B-Instruct``, ``GSAI-ML/LLaDA-1.5``) and Dream (``Dream-org/Dream-v0-Base-7B``)
ship their own modelling files (``trust_remote_code``), written against transformers 4.4x. Under
transformers 5 (constraints.txt pins 5.24) their published code does not load:

* LLaDA's ``LLaDAModelLM.__init__`` never calls ``post_init()``, so the instance lacks
  ``all_tied_weights_keys`` (``AttributeError`` while finalising the load), and its
  ``tie_weights(self)`` takes no arguments while transformers calls
  ``tie_weights(missing_keys=..., recompute_mapping=False)`` (``TypeError``).
* Dream's ``DreamRotaryEmbedding`` looks up ``ROPE_INIT_FUNCTIONS["default"]``; transformers 5 computes
  the plain RoPE inside each model class and has no ``"default"`` key (``KeyError``). Past that, the
  frequencies live in a non-persistent ``inv_freq`` buffer: transformers 5 builds the model on the
  meta device and refills such buffers with ``torch.empty_like``, and Dream's ``_init_weights``
  (Linear/Embedding only) never recomputes them, so RoPE would run on uninitialised memory.

:func:`remote_model_class` resolves the checkpoint's own class through its ``auto_map`` and patches
what that class needs; :func:`remote_code_compat` registers Dream's plain-RoPE ``"default"`` only while
the model is built; :func:`finish_remote_load` recomputes Dream's RoPE buffers after the load. Each
fix is logged once per process. Nothing is patched for any other model type, and the
published code runs unchanged otherwise.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from collections.abc import Iterator
from typing import Any

import torch

logger = logging.getLogger(__name__)

#: ``model_type`` (config.json) -> the fixes its published code needs under transformers 5.
REMOTE_CODE_FIXES: dict[str, tuple[str, ...]] = {
    "llada": ("post_init", "tie_weights"),
    "Dream": ("default_rope", "rope_buffers"),
}
_LOGGED: set[tuple[str, str]] = set()


def _log_once(model_type: str, fix: str, detail: str) -> None:
    if (model_type, fix) not in _LOGGED:
        _LOGGED.add((model_type, fix))
        logger.info("transformers-5 compatibility for %s remote code: %s", model_type, detail)


def _default_rope_parameters(
    config: Any = None, device: torch.device | str | None = None, seq_len: int | None = None, **kw
) -> tuple[torch.Tensor, float]:
    """Plain RoPE inverse frequencies, the transformers 4.4x ``"default"`` entry.

    inv_freq_i = 1 / base^(2i / d), i = 0 .. d/2 − 1, with base = ``rope_theta`` and
    d = head_dim × ``partial_rotary_factor``; the attention scaling is 1.

    Returns:
        ``(inv_freq [d/2], 1.0)``.
    """
    if config is not None:
        params = getattr(config, "rope_parameters", None) or {}
        base = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        head_dim = getattr(config, "head_dim", None)
        head_dim = head_dim or config.hidden_size // config.num_attention_heads
        dim = int(head_dim * getattr(config, "partial_rotary_factor", 1.0))
    else:
        base, dim = kw["base"], kw["dim"]
    exponent = torch.arange(0, dim, 2, dtype=torch.int64).float().to(device) / dim  # [d/2]
    return 1.0 / (base**exponent), 1.0


@contextlib.contextmanager
def _default_rope_registered() -> Iterator[None]:
    """Adds ``ROPE_INIT_FUNCTIONS["default"]`` while the block runs (the rotary module keeps the
    function it looked up, so removing the key afterwards changes nothing for the built model)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    added = "default" not in ROPE_INIT_FUNCTIONS
    if added:
        ROPE_INIT_FUNCTIONS["default"] = _default_rope_parameters
    try:
        yield
    finally:
        if added:
            ROPE_INIT_FUNCTIONS.pop("default", None)


def _patch_post_init(cls: type, model_type: str) -> None:
    """Runs transformers' ``post_init`` bookkeeping after a constructor that skips it."""
    if getattr(cls.__init__, "_icml26_post_init", False):
        return
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if not hasattr(self, "all_tied_weights_keys"):
            self.post_init()  # transformers 5: tied-key maps, no weight init

    __init__._icml26_post_init = True
    cls.__init__ = __init__
    _log_once(model_type, "post_init", f"{cls.__name__}.__init__ now ends with post_init()")


def _patch_tie_weights(cls: type, model_type: str) -> None:
    """Lets a ``tie_weights(self)`` accept the keyword arguments transformers 5 passes.

    The checkpoint's own body still runs (LLaDA ties ``ff_out`` to ``wte`` when ``weight_tying``);
    ``missing_keys`` / ``recompute_mapping`` are dropped because that body decides from the config.
    """
    original = cls.tie_weights
    if "missing_keys" in inspect.signature(original).parameters:
        return

    @functools.wraps(original)
    def tie_weights(self, missing_keys=None, recompute_mapping=True, **_ignored):
        return original(self)

    cls.tie_weights = tie_weights
    _log_once(
        model_type, "tie_weights", f"{cls.__name__}.tie_weights accepts transformers-5 kwargs"
    )


def remote_model_class(config: Any, auto_key: str = "AutoModel") -> type:
    """The checkpoint's own model class named by ``config.auto_map[auto_key]``, with its fixes.

    Args:
        config: a config loaded with ``trust_remote_code=True`` (its ``auto_map`` and ``_name_or_path``
            locate the code).
        auto_key: which ``auto_map`` entry to resolve (``AutoModel``, ``AutoModelForCausalLM``).

    Raises:
        ValueError: the config names no remote class under ``auto_key``.
    """
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    auto_map = getattr(config, "auto_map", None) or {}
    if auto_key not in auto_map:
        raise ValueError(
            f"config of {config._name_or_path!r} has no auto_map[{auto_key!r}] (got keys "
            f"{sorted(auto_map)}); a remote-code checkpoint names its model class there"
        )
    ref = auto_map[auto_key]
    ref = ref[0] if isinstance(ref, (list, tuple)) else ref
    cls = get_class_from_dynamic_module(ref, config._name_or_path)
    fixes = REMOTE_CODE_FIXES.get(config.model_type, ())
    if "post_init" in fixes:
        _patch_post_init(cls, config.model_type)
    if "tie_weights" in fixes:
        _patch_tie_weights(cls, config.model_type)
    return cls


@contextlib.contextmanager
def remote_code_compat(config: Any) -> Iterator[None]:
    """The build-time part of the fixes (Dream's ``"default"`` RoPE) for ``config.model_type``."""
    if "default_rope" in REMOTE_CODE_FIXES.get(config.model_type, ()):
        _log_once(
            config.model_type, "default_rope", "plain RoPE registered as 'default' while building"
        )
        with _default_rope_registered():
            yield
    else:
        yield


def finish_remote_load(model: torch.nn.Module, config: Any) -> torch.nn.Module:
    """Recomputes the RoPE frequencies of rotary modules whose buffers a meta-device load left empty.

    Each module that kept its init function (``rope_init_fn``) gets ``inv_freq`` (and
    ``original_inv_freq``) from that function again, on the buffer's device; only for model types
    listed with ``"rope_buffers"``.

    Returns:
        ``model`` (modified in place).
    """
    if "rope_buffers" not in REMOTE_CODE_FIXES.get(config.model_type, ()):
        return model
    n = 0
    with _default_rope_registered(), torch.no_grad():
        for module in model.modules():
            fn, buf = getattr(module, "rope_init_fn", None), getattr(module, "inv_freq", None)
            if fn is None or not isinstance(buf, torch.Tensor) or buf.device.type == "meta":
                continue
            inv_freq, module.attention_scaling = fn(module.config, buf.device, **module.rope_kwargs)
            module.inv_freq = inv_freq.to(buf.dtype)  # [d/2]
            if hasattr(module, "original_inv_freq"):
                module.original_inv_freq = module.inv_freq
            n += 1
    _log_once(config.model_type, "rope_buffers", f"recomputed inv_freq of {n} rotary module(s)")
    return model
