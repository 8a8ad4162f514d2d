"""The evictable KV cache and the attention backend that reads it (the paper's block-wise
prefill eviction; the cache layout is our design, as AdaKV's flattened cache in the official code).

Shape letters: B batch (always 1), H query heads, Hk KV heads, G = H / Hk group size, Q new query
tokens, T cached tokens of one layer (physical slots), K = T + Q keys seen by the new queries,
d head dim, L layers.

``EpiCache`` is a :class:`transformers.DynamicCache` whose layers may hold a different number of
tokens each (per-layer budgets) and whose kept tokens keep their *absolute* positions, recorded in
``kept_positions``. Head-wise budgets leave heads with different counts; the shorter heads are padded
with zero K/V slots whose position is ``-1`` and which the attention function masks out.

Because HF's mask builders size the mask from the cache length (wrong after eviction), every forward
over an ``EpiCache`` runs under :func:`epicache_forward`, which switches the model to the registered
``"epicache"`` attention function. That function builds the mask itself from the key count: cached
slots are visible when valid, new tokens are causal (bottom-right aligned). It also serves the
scoring passes (restricted softmax over cached keys, as official
``model/wrapper.py::token_scoring``) through a per-forward capture slot.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from transformers import AttentionInterface, DynamicCache
from transformers.masking_utils import AttentionMaskInterface

logger = logging.getLogger(__name__)

ATTN_NAME = "epicache"


class EpiCache(DynamicCache):
    """A DynamicCache with per-layer eviction and absolute position bookkeeping.

    Our engineering on transformers' ``DynamicCache`` (the official code keeps AdaKV's flattened
    cache instead).

    Attributes:
        seen_tokens: absolute number of tokens processed so far (the next token's RoPE position).
        kept_positions: per layer, ``LongTensor[B, Hk, T_l]`` absolute positions of the committed slots
            (``-1`` marks a padded, invalid slot). Slots beyond ``T_l`` in the layer tensors are
            uncommitted (a block being prefilled, a scoring prompt, a question being decoded).
        evicted: whether any eviction has happened (then ``model.generate`` is refused).
        trace: per prefill step, the largest number of physical slots per head, for memory audits.
    """

    def __init__(self, num_layers: int) -> None:
        super().__init__()
        self.num_layers = num_layers
        self.seen_tokens = 0
        self.kept_positions: list[torch.Tensor | None] = [None] * num_layers
        self.evicted = False
        self.trace: list[dict[str, int]] = []
        self._in_epicache_forward = False

    # -- guard against HF generate ----------------------------------------------------------------
    def get_seq_length(self, layer_idx: int = 0) -> int:
        if self.evicted and not self._in_epicache_forward:
            raise RuntimeError(
                "this EpiCache has been evicted: its length is no longer the absolute position, so "
                "model.generate would use wrong RoPE positions and masks. Use "
                "methods.epicache.greedy_decode(model, cache, input_ids) instead."
            )
        return super().get_seq_length(layer_idx)

    # -- bookkeeping ------------------------------------------------------------------------------
    def layer_kv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns the physical ``(K, V)`` of one layer, each ``[B, Hk, T_l(+uncommitted), d]``."""
        lay = self.layers[layer]
        return lay.keys, lay.values

    def set_layer_kv(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Replaces the physical K/V of one layer (used by eviction)."""
        lay = self.layers[layer]
        lay.keys, lay.values = keys, values

    def committed_len(self, layer: int) -> int:
        """Number of committed slots of ``layer`` (0 before the first commit)."""
        pos = self.kept_positions[layer]
        return 0 if pos is None else int(pos.shape[-1])

    def physical_len(self, layer: int) -> int:
        """Number of physical slots of ``layer``, uncommitted ones included."""
        if layer >= len(self.layers) or not self.layers[layer].is_initialized:
            return 0
        return int(self.layers[layer].keys.shape[-2])

    def commit_(self, n_new: int) -> None:
        """Marks the last ``n_new`` appended tokens as committed at positions seen..seen+n_new-1."""
        for layer in range(self.num_layers):
            k, _ = self.layer_kv(layer)
            b, hk = k.shape[0], k.shape[1]
            if self.physical_len(layer) != self.committed_len(layer) + n_new:
                raise RuntimeError(
                    f"layer {layer}: {self.physical_len(layer)} physical slots, expected "
                    f"{self.committed_len(layer)} committed + {n_new} new"
                )
            new = torch.arange(self.seen_tokens, self.seen_tokens + n_new, device=k.device)
            new = new.view(1, 1, -1).expand(b, hk, -1)  # [B, Hk, n_new]
            old = self.kept_positions[layer]
            self.kept_positions[layer] = new.clone() if old is None else torch.cat([old, new], -1)
        self.seen_tokens += n_new

    def drop_uncommitted_(self) -> None:
        """Crops every layer back to its committed slots (after scoring or decoding)."""
        for layer in range(self.num_layers):
            extra = self.physical_len(layer) - self.committed_len(layer)
            if extra > 0:
                self.layers[layer].crop(-extra)

    def valid_mask(self, layer: int) -> torch.Tensor:
        """``BoolTensor[B, Hk, T_l]``: which committed slots hold a real token."""
        return self.kept_positions[layer] >= 0

    def evict_(self, keep_idx: list[torch.Tensor]) -> None:
        """Keeps, per layer and KV head, the committed slots listed in ``keep_idx``.

        Args:
            keep_idx: per layer, ``LongTensor[B, Hk, M]`` of slot indices into the committed slots,
                ascending per head; ``-1`` entries pad heads that keep fewer slots (head-wise
                budgets). Uncommitted slots must have been dropped first.

        Raises:
            ValueError: on a wrong number of layers or out-of-range indices.
        """
        if len(keep_idx) != self.num_layers:
            raise ValueError(f"keep_idx must have {self.num_layers} entries, got {len(keep_idx)}")
        for layer, idx in enumerate(keep_idx):
            n = self.committed_len(layer)
            if self.physical_len(layer) != n:
                raise RuntimeError("drop uncommitted slots before evicting")
            if idx.numel() and (int(idx.max()) >= n or int(idx.min()) < -1):
                raise ValueError(f"keep_idx[{layer}] out of range [-1, {n})")
            k, v = self.layer_kv(layer)
            pad = idx < 0  # [B, Hk, M]
            safe = idx.clamp(min=0)
            gather = safe.unsqueeze(-1).expand(-1, -1, -1, k.shape[-1])  # [B, Hk, M, d]
            new_k = torch.gather(k, 2, gather).masked_fill(pad.unsqueeze(-1), 0.0)
            new_v = torch.gather(v, 2, gather).masked_fill(pad.unsqueeze(-1), 0.0)
            pos = torch.gather(self.kept_positions[layer], 2, safe).masked_fill(pad, -1)
            self.set_layer_kv(layer, new_k.contiguous(), new_v.contiguous())
            self.kept_positions[layer] = pos
        self.evicted = True

    def tokens_per_head(self) -> torch.Tensor:
        """``LongTensor[L, Hk]``: valid committed tokens per layer and KV head (batch 0)."""
        return torch.stack(
            [self.valid_mask(layer)[0].sum(-1) for layer in range(self.num_layers)]
        )  # [L, Hk]

    def max_tokens_per_head(self) -> int:
        """The largest number of physical slots any (layer, head) holds right now."""
        return max(self.physical_len(layer) for layer in range(self.num_layers))

    def nbytes(self) -> int:
        """Physical bytes of all cached K and V tensors (padding slots included)."""
        total = 0
        for layer in range(min(self.num_layers, len(self.layers))):
            if self.layers[layer].is_initialized:
                k, v = self.layer_kv(layer)
                total += k.numel() * k.element_size() + v.numel() * v.element_size()
        return total

    def clone(self) -> EpiCache:
        """A deep copy (tensors cloned), so that decoding on it can never touch the original."""
        out = EpiCache(self.num_layers)
        for layer in range(self.num_layers):
            k, v = self.layer_kv(layer)
            out.update(k.clone(), v.clone(), layer)
            out.kept_positions[layer] = self.kept_positions[layer].clone()
        out.seen_tokens, out.evicted = self.seen_tokens, self.evicted
        return out


# ------------------------------------------------------------------------------------------------
# Attention backend
# ------------------------------------------------------------------------------------------------


@dataclass
class _ForwardState:
    """What the attention function needs to know during one forward over an EpiCache."""

    cache: EpiCache | None = None
    capture: str | None = None  # None | "past_max" | "window_max"
    window: int = 0
    extra_mask: torch.Tensor | None = None  # BoolTensor[Q, K] for sensitivity profiling
    scores: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [B, Hk, T]
    keys: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [B, Hk, K, d]


_STATE: _ForwardState | None = None


def _epicache_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [B, H, Q, d]
    key: torch.Tensor,  # [B, Hk, K, d]
    value: torch.Tensor,  # [B, Hk, K, d]
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention whose mask comes from the cache's validity, not from HF's mask builder (ours).

    ``capture="past_max"`` computes the paper's importance s_i (Episodic KV Compression, step 2) with the
    softmax restricted to the cached keys (official ``attention/score.py``); ``"window_max"`` is our
    SnapKV last-window form.
    """
    state = _STATE if _STATE is not None else _ForwardState()
    layer = int(getattr(module, "layer_idx", 0))
    b, h, q_len, d = query.shape
    hk, k_len = key.shape[1], key.shape[2]
    g = h // hk
    past = k_len - q_len
    # Bottom-right aligned causal mask: query i sees key j iff j <= past + i.
    qi = torch.arange(q_len, device=query.device).view(-1, 1)
    kj = torch.arange(k_len, device=query.device).view(1, -1)
    allowed = (kj <= past + qi).view(1, 1, q_len, k_len).expand(b, hk, q_len, k_len)
    if state.cache is not None and state.cache.kept_positions[layer] is not None:
        valid = state.cache.valid_mask(layer)  # [B, Hk, T_committed]
        t = valid.shape[-1]
        allowed = allowed.clone()
        allowed[..., :t] &= valid.unsqueeze(2)
    if state.extra_mask is not None:
        allowed = allowed & state.extra_mask.view(1, 1, q_len, k_len)
    if state.keys is not None and state.capture == "keys":
        state.keys[layer] = key.detach()
    allowed_h = allowed.repeat_interleave(g, dim=1)  # [B, H, Q, K]
    k_rep = key.repeat_interleave(g, dim=1)  # [B, H, K, d]
    v_rep = value.repeat_interleave(g, dim=1)
    logits = torch.matmul(query, k_rep.transpose(2, 3)) * scaling  # [B, H, Q, K]
    neg = torch.finfo(logits.dtype).min
    logits = logits.masked_fill(~allowed_h, neg)
    probs = torch.softmax(logits.float(), dim=-1).to(query.dtype)
    out = torch.matmul(probs, v_rep).transpose(1, 2).contiguous()  # [B, Q, H, d]

    if state.capture == "past_max" and past > 0:
        # Official token_scoring: softmax over the cached (past) keys only; the prompt's own keys are excluded.
        sub = logits[..., :past].float().masked_fill(~allowed_h[..., :past], float("-inf"))
        p_past = torch.softmax(sub, dim=-1).nan_to_num(0.0)  # [B, H, Q, past]
        p_past = p_past.view(b, hk, g, q_len, past)
        state.scores[layer] = p_past.amax(dim=(2, 3))  # [B, Hk, past]
    elif state.capture == "window_max":
        # SnapKV-style: the last `window` queries of the block, causal attention over all keys.
        w = min(state.window, q_len)
        p_win = probs[:, :, q_len - w :, :].float().view(b, hk, g, w, k_len)
        state.scores[layer] = p_win.amax(dim=(2, 3))  # [B, Hk, K]
    return out, probs


def _no_mask(*args, **kwargs) -> None:
    return None


AttentionInterface.register(ATTN_NAME, _epicache_attention)
AttentionMaskInterface.register(ATTN_NAME, _no_mask)


@contextlib.contextmanager
def epicache_forward(
    model: torch.nn.Module,
    cache: EpiCache | None = None,
    capture: str | None = None,
    window: int = 0,
    extra_mask: torch.Tensor | None = None,
) -> Iterator[_ForwardState]:
    """Runs the enclosed forwards with the ``"epicache"`` attention function.

    Our engineering: a transformers attention-interface registration; the scores it captures are
    the restricted softmax of the official ``attention/score.py``.

    Args:
        model: a HF causal LM (Llama / Qwen2 / Qwen3 family).
        cache: the EpiCache the forwards read (its validity mask hides padded slots).
        capture: ``"past_max"`` (restricted-softmax scores over cached keys), ``"window_max"``
            (last-window scores), ``"keys"`` (record every layer's keys) or None.
        window: window length for ``"window_max"``.
        extra_mask: an optional ``BoolTensor[Q, K]`` AND-ed into the mask (profiling).

    Yields:
        The forward state; ``state.scores[layer]`` / ``state.keys[layer]`` hold the captures.
    """
    global _STATE
    prev_impl = model.config._attn_implementation
    prev_state = _STATE
    state = _ForwardState(cache=cache, capture=capture, window=window, extra_mask=extra_mask)
    _STATE = state
    if cache is not None:
        cache._in_epicache_forward = True
    model.set_attn_implementation(ATTN_NAME)
    try:
        yield state
    finally:
        model.set_attn_implementation(prev_impl)
        _STATE = prev_state
        if cache is not None:
            cache._in_epicache_forward = False
