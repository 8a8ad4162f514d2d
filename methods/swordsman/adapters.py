"""Model adapters: one interface over LLaDA, Dream and tiny masked LMs (official ``llada/generate.py``,
``dream/model/generation_utils_block.py``).

The decoder needs three things from a masked-diffusion LM: a full forward pass whose logits are aligned so
that ``logits[:, j]`` predicts ``x[:, j]``, an optional KV cache from that pass, and a cheap forward over the
current block that reuses the cache (Fast-dLLM's prefix cache: feed the block and the masked suffix after
the cached prefix; dual cache: feed only the block and overwrite its cache entries via ``replace_position``).
Model quirks stay here: Dream predicts the *next* token, so its logits are shifted right by one and cached
block calls look one committed token back.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Protocol, runtime_checkable

import torch

logger = logging.getLogger(__name__)

LLADA_MASK_ID = 126336  # GSAI-ML/LLaDA-8B-Instruct tokenizer: <|mdm_mask|>
LLADA_EOS_IDS = (126081, 126348)  # <|endoftext|>, <|eot_id|>


@runtime_checkable
class DLMAdapter(Protocol):
    """What ``swordsman_generate`` needs from a masked-diffusion LM.

    Attributes:
        mask_id: id of the mask token.
        eos_ids: ids counted as end of sequence (for token counts).
        supports: cache modes the model can run: a subset of ``{"none", "prefix", "dual"}``.
    """

    mask_id: int
    eos_ids: set[int]
    supports: set[str]

    def forward(self, x: torch.Tensor, use_cache: bool = False) -> tuple[torch.Tensor, Any]:
        """Full pass: ``x [1, L]`` -> (aligned logits ``[1, L, V]``, cache or None).

        Source: engineering (adapter over the official ``llada/generate.py`` /
        ``dream/model/generation_utils_block.py`` model calls).
        """

    def block_forward(
        self, x: torch.Tensor, start: int, end: int, past: Any, cache: str
    ) -> torch.Tensor:
        """Logits ``[1, end - start, V]`` for the block ``[start, end)`` of ``x [1, L]``.

        Source: official ``llada/generate.py`` (``generate_with_dual_cache_adaptive`` block passes);
        the interface is engineering.
        """


def _truncate_cache(past: Any, length: int) -> Any:
    """Keep the first ``length`` positions of a KV cache (prefix-cache mode; Fast-dLLM's prefix cache,
    official ``llada/generate.py::generate_with_prefix_cache_adaptive``).

    ``transformers`` ``Cache`` objects (``DynamicCache``) are cropped in place with the current
    convention, ``crop(-n)`` removes the last ``n`` positions (a positive ``crop`` argument is rejected
    since transformers 5); legacy ``((k, v), ...)`` tuples and tensors are sliced.
    """
    if past is None:
        raise ValueError("past must be a KV cache from a full forward pass, got None")
    if isinstance(past, torch.Tensor):
        return past[..., :length]
    if isinstance(past, (tuple, list)):  # legacy ((k, v), ...) with k: [B, heads, L, d]
        return tuple(tuple(t[:, :, :length] for t in layer) for layer in past)
    if hasattr(past, "crop") and hasattr(past, "get_seq_length"):  # transformers Cache
        n = int(past.get_seq_length())
        if length > n:
            raise ValueError(f"length must be <= the cached {n} positions, got {length}")
        if length < n:
            past.crop(length - n)
        return past
    raise TypeError(f"past of type {type(past).__name__} cannot be truncated")


def _output_cache(out: Any) -> Any:
    """The KV cache a model call returned. transformers >= 5 names it ``cache`` (reading the old
    ``past_key_values`` alias logs a deprecation warning); remote-code models may still return
    ``past_key_values``."""
    if hasattr(out, "cache"):
        return out.cache
    return getattr(out, "past_key_values", None)


def _output_logits(out: Any) -> torch.Tensor:
    """The logits of a model call: a ``ModelOutput``'s ``logits``, a plain dict's ``"logits"``
    (remote code may return one) or the first element of a tuple."""
    if hasattr(out, "logits"):
        return out.logits
    if isinstance(out, dict):
        if "logits" not in out:
            raise KeyError(f"the model returned a dict without 'logits' (keys {sorted(out)})")
        return out["logits"]
    return out[0]


class HFDiffusionAdapter:
    """Adapter over a Hugging Face module ``model(input_ids, ...) -> .logits``.

    Args:
        model: the network; its ``forward`` must accept ``input_ids`` and return ``.logits`` ``[1, L, V]``.
        mask_id: mask token id.
        eos_ids: end-of-sequence ids.
        shift_logits: True for next-token-predicting DLMs (Dream): ``z'_0 = z_0``, ``z'_j = z_{j-1}``.
        supports: cache modes; inferred from ``model.forward``'s parameters when None (``prefix`` needs
            a cache argument, ``cache`` (transformers >= 5) or ``past_key_values`` (remote code such as
            Fast-dLLM's LLaDA), and ``use_cache``; ``dual`` also ``replace_position``).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        mask_id: int,
        eos_ids: tuple[int, ...] | set[int] = (),
        shift_logits: bool = False,
        supports: set[str] | None = None,
    ) -> None:
        if mask_id is None:
            raise ValueError("mask_id must be an int (the model's mask token), got None")
        if not isinstance(mask_id, int):
            raise TypeError(f"mask_id must be an int, got {type(mask_id).__name__}")
        self.model = model
        self.mask_id = int(mask_id)
        self.eos_ids = {int(e) for e in eos_ids}
        self.shift_logits = bool(shift_logits)
        params = inspect.signature(model.forward).parameters
        # The keyword the model takes its cache under: transformers >= 5 deprecates past_key_values.
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        if supports is None:
            supports = {"none"}
            if ("cache" in params or "past_key_values" in params) and "use_cache" in params:
                supports.add("prefix")
                if "replace_position" in params:
                    supports.add("dual")
        self.supports = set(supports)

    @torch.no_grad()
    def _call(
        self,
        ids: torch.Tensor,
        past: Any = None,
        use_cache: bool = False,
        replace_position: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any]:
        kwargs: dict[str, Any] = {}
        caching = use_cache or past is not None
        if caching:
            kwargs.update({self._cache_kw: past, "use_cache": True})
        if replace_position is not None:
            kwargs["replace_position"] = replace_position
        out = self.model(ids, **kwargs)
        logits = _output_logits(out)
        return logits, _output_cache(out) if caching else None

    def forward(self, x: torch.Tensor, use_cache: bool = False) -> tuple[torch.Tensor, Any]:
        """Full pass over ``x [1, L]``; returns aligned logits ``[1, L, V]`` and the cache.

        Next-token DLMs (Dream) are aligned by shifting right by one, ``z'_0 = z_0``, ``z'_j = z_{j-1}``
        (official ``dream/model/generation_utils_block.py``).
        """
        if use_cache and "prefix" not in self.supports:
            raise ValueError(
                f"use_cache=True but this model supports only cache modes {sorted(self.supports)}"
            )
        logits, past = self._call(x, use_cache=use_cache)
        if use_cache and past is None:
            raise ValueError("use_cache=True but the model returned no past_key_values")
        if self.shift_logits:
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)  # [1, L, V]
        return logits, past

    def block_forward(
        self, x: torch.Tensor, start: int, end: int, past: Any, cache: str
    ) -> torch.Tensor:
        """Logits ``[1, end - start, V]`` for the block ``[start, end)``.

        ``"prefix"``: Fast-dLLM's prefix cache (official ``generate_with_prefix_cache_adaptive``: the cache
        is cut to the committed prefix, the block and the masked suffix are fed); ``"dual"``: the dual
        cache (official ``generate_with_dual_cache_adaptive``: only the block is fed and its cache entries
        are overwritten via ``replace_position``). For a next-token DLM the fed slice starts one committed
        token earlier (our inference, deviations table "Dream cached first token").
        """
        if cache not in self.supports:
            raise ValueError(
                f"cache={cache!r} not supported by this model ({sorted(self.supports)})"
            )
        n = end - start
        if cache == "none":
            return self.forward(x)[0][:, start:end]
        # A shifted model predicts position j from j - 1: start the fed slice one committed token earlier,
        # so raw output i (input position q + i) predicts position start + i.
        q = start - 1 if self.shift_logits else start
        if q < 0:
            raise ValueError("a next-token DLM needs at least one token before the block")
        if cache == "prefix":
            raw, _ = self._call(x[:, q:], past=_truncate_cache(past, q), use_cache=True)
        else:  # dual
            replace = torch.zeros_like(x, dtype=torch.bool)  # [1, L]
            replace[:, q:end] = True
            raw, _ = self._call(x[:, q:end], past=past, use_cache=True, replace_position=replace)
        return raw[:, :n]


class HFMaskedLMAdapter(HFDiffusionAdapter):
    """Adapter for a bidirectional ``*ForMaskedLM`` used as a toy masked-diffusion LM (no cache).

    Our construction for CPU tests (not in the paper); wraps a transformers masked LM.
    """

    def __init__(self, model: torch.nn.Module, mask_id: int, eos_ids=()) -> None:
        super().__init__(model, mask_id, eos_ids, shift_logits=False, supports={"none"})


class LLaDAAdapter(HFDiffusionAdapter):
    """LLaDA (GSAI-ML/LLaDA-8B-Instruct, LLaDA-1.5): logits already aligned, mask id 126336.

    Source: official ``llada/generate.py`` (how the model is called); caches as in Fast-dLLM's LLaDA port.

    Prefix/dual cache need a modeling file whose ``forward`` takes ``past_key_values``/``use_cache``
    (and ``replace_position`` for dual), as Fast-dLLM's LLaDA port does; otherwise only ``"none"``.
    """

    def __init__(self, model, mask_id: int = LLADA_MASK_ID, eos_ids=LLADA_EOS_IDS, supports=None):
        super().__init__(model, mask_id, eos_ids, shift_logits=False, supports=supports)

    @classmethod
    def from_pretrained(
        cls,
        model_id: str,
        dtype: str = "bfloat16",
        device: str | None = None,
        mask_id: int | None = None,
    ):
        """Load a LLaDA checkpoint by hub id or local path (``trust_remote_code``).

        Source: engineering; mask id as official ``llada/generate.py``.

        The mask id is, in order: ``mask_id``; the tokenizer's ``<|mdm_mask|>`` token; its
        ``mask_token_id``; LLaDA's 126336. EOS ids are the tokenizer's ``<|endoftext|>``/``<|eot_id|>``
        and ``eos_token_id`` (LLaDA's 126081/126348 if it has none).

        Returns:
            ``(adapter, tokenizer)``.
        """
        model, tok = _load_remote(model_id, dtype, device)
        if mask_id is None:
            mask_id = _special_id(tok, "<|mdm_mask|>")
        if mask_id is None:
            mask_id = tok.mask_token_id if tok.mask_token_id is not None else LLADA_MASK_ID
        eos = {e for e in (_special_id(tok, t) for t in ("<|endoftext|>", "<|eot_id|>")) if e}
        if tok.eos_token_id is not None:
            eos.add(int(tok.eos_token_id))
        return cls(model.eval(), mask_id=int(mask_id), eos_ids=eos or LLADA_EOS_IDS), tok


class DreamAdapter(HFDiffusionAdapter):
    """Dream (Dream-org/Dream-v0-Base-7B): next-token logits, shifted right by one.

    Source: official ``dream/model/generation_utils_block.py`` (the logit shift and cached calls).
    """

    def __init__(self, model, mask_id: int, eos_ids=(), supports=None):
        super().__init__(model, mask_id, eos_ids, shift_logits=True, supports=supports)

    @classmethod
    def from_pretrained(
        cls,
        model_id: str,
        dtype: str = "bfloat16",
        device: str | None = None,
        mask_id: int | None = None,
    ):
        """Load a Dream checkpoint by hub id or local path (``trust_remote_code``).

        Source: engineering; mask id as official ``dream/model/generation_utils_block.py``.

        The mask id is ``mask_id`` or the tokenizer's ``mask_token_id`` (Dream's ``<|mask|>``).

        Returns:
            ``(adapter, tokenizer)``.

        Raises:
            ValueError: if no mask id can be found.
        """
        model, tok = _load_remote(model_id, dtype, device)
        if mask_id is None:
            mask_id = tok.mask_token_id
        if mask_id is None:
            raise ValueError(f"tokenizer of {model_id!r} has no mask token; pass mask_id")
        eos = {int(tok.eos_token_id)} if tok.eos_token_id is not None else set()
        return cls(model.eval(), mask_id=int(mask_id), eos_ids=eos), tok


def _special_id(tok: Any, token: str) -> int | None:
    """Id of ``token`` if it is a single known token of ``tok``, else None."""
    vocab = tok.get_vocab()
    return int(vocab[token]) if token in vocab else None


def _load_remote(model_id: str, dtype: str, device: str | None):
    """The checkpoint's own remote-code model and its tokenizer (``trust_remote_code``).

    The model loads through :func:`common.models.load_model` with ``kind="masked_diffusion"``, so
    the published LLaDA / Dream modelling files get the transformers-5 fixes of
    :mod:`common.model_compat` (docs/models.md); a plain ``AutoModel.from_pretrained`` fails on both.
    ``device=None`` leaves the placement to :func:`common.models.resolve_device`.
    """
    from transformers import AutoTokenizer

    from common.models import load_model, weights_hint

    model = load_model(model_id, dtype=dtype, device=device, kind="masked_diffusion")
    with weights_hint(model_id):
        tok = AutoTokenizer.from_pretrained(model_id, trust_remote_code=True)
    logger.info("loaded %s (%s)", model_id, type(model).__name__)
    return model, tok
