"""Block-wise prefill with eviction after every block (the paper's block-wise prefill; official
``model/wrapper.py::prefill_memory_constrained``).

Shape letters: B batch (1), Hk KV heads, T committed slots of a layer, M_l the layer's per-head
budget, L layers.

The history is fed ``block_size`` tokens at a time; after each block the cache is scored and cut
back to the budget, so the number of cached slots per head never exceeds M_l + block (+ p while a
scoring prompt of length p is attached). All baselines of the toy share this loop and differ only
in the scorer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch

from .cache import EpiCache, epicache_forward
from .scoring import (
    SCORERS,
    keydiff_cosine_scores,
    keydiff_scores,
    patched_prompt_scores,
    streaming_scores,
)

logger = logging.getLogger(__name__)

Level = Literal["uniform", "headwise"]


def select_keep(
    scores: torch.Tensor, valid: torch.Tensor, budget: int, level: Level = "uniform"
) -> torch.Tensor:
    """Chooses which committed slots of one layer survive (official ``EvictCache.evict_flattened``).

    ``uniform``: per head the top-min(M_l, n_h) slots. ``headwise``: the top-min(M_l·Hk, Σ n_h)
    slots of the whole layer, so heads may keep different counts. Ties go to the lower slot index;
    kept indices are returned ascending (positions stay in order).

    Args:
        scores: ``FloatTensor[B, Hk, T]`` importance (higher = keep).
        valid: ``BoolTensor[B, Hk, T]`` which slots hold a real token.
        budget: M_l, the per-head budget of this layer (>= 1).
        level: ``"uniform"`` or ``"headwise"``.

    Returns:
        ``LongTensor[B, Hk, m]`` slot indices, ascending per head, ``-1``-padded on the right.
    """
    b, hk, t = scores.shape
    s = scores.float().masked_fill(~valid, float("-inf"))
    n_valid = valid.sum(-1)  # [B, Hk]
    if level == "uniform":
        m = int(min(budget, t))
        order = torch.sort(-s, dim=-1, stable=True).indices[..., :m]  # [B, Hk, m]
        keep_count = n_valid.clamp(max=budget)  # [B, Hk]
        rank = torch.arange(m, device=s.device).view(1, 1, -1)
        idx = torch.where(rank < keep_count.unsqueeze(-1), order, torch.full_like(order, t))
    elif level == "headwise":
        total = int(min(budget * hk, int(n_valid.sum())))
        flat = s.reshape(b, hk * t)  # [B, Hk·T], index = h·T + i
        order = torch.sort(-flat, dim=-1, stable=True).indices[:, :total]  # [B, total]
        chosen = torch.zeros(b, hk * t, dtype=torch.bool, device=s.device)
        chosen.scatter_(1, order, True)
        chosen = chosen.view(b, hk, t)  # [B, Hk, T]
        m = int(chosen.sum(-1).max()) if total else 0
        slot = torch.arange(t, device=s.device).view(1, 1, -1).expand(b, hk, t)
        idx = torch.where(chosen, slot, torch.full_like(slot, t))
        idx = torch.sort(idx, dim=-1).values[..., :m]
    else:
        raise ValueError(f"level must be 'uniform' or 'headwise', got {level!r}")
    idx = torch.sort(idx, dim=-1).values  # ascending; padding (= t) last
    return torch.where(idx >= t, torch.full_like(idx, -1), idx)


def _check_budgets(budgets: Sequence[int] | np.ndarray | int, n_layers: int) -> list[int]:
    if isinstance(budgets, (int, np.integer)):
        budgets = [int(budgets)] * n_layers
    budgets = [int(x) for x in budgets]
    if len(budgets) != n_layers:
        raise ValueError(f"budgets must have one entry per layer ({n_layers}), got {len(budgets)}")
    if min(budgets) < 1:
        raise ValueError(f"every layer budget must be >= 1, got {budgets}")
    return budgets


@torch.no_grad()
def blockwise_prefill(
    model: torch.nn.Module,
    prefix_ids: torch.Tensor | None,
    ctx_ids: torch.Tensor,
    prompt_ids: torch.Tensor | None,
    budgets: Sequence[int] | np.ndarray | int,
    block_size: int = 2048,
    level: Level = "uniform",
    protect_prefix: bool = False,
    scorer: str = "patched",
    window: int = 64,
    n_sink: int = 4,
    max_cache_tokens: int | None = None,
    scorer_prefix_ids: torch.Tensor | None = None,
) -> EpiCache:
    """Prefills ``prefix ⊕ context`` block by block, evicting to the budget after every block.

    Follows the official ``prefill_memory_constrained``. Peak slots per head: M_l + block_size during the block
    forward, M_l + block_size + p while scoring with a prompt of length p.

    Args:
        model: HF causal LM with RoPE attention (Llama / Qwen2 / Qwen3); batch size 1.
        prefix_ids: ``LongTensor[1, n_sys]`` system/chat prefix, or None.
        ctx_ids: ``LongTensor[1, N]`` the conversation history.
        prompt_ids: ``LongTensor[1, p]`` the patched prompt (``scorer="patched"``; ignored by the
            other scorers).
        budgets: per-layer per-head budgets M_l (an int means the same for every layer).
        block_size: M_block, tokens per prefill block.
        level: ``"uniform"`` (same count per head) or ``"headwise"`` (per-layer pool).
        protect_prefix: never evict the prefix tokens (off in the official code).
        scorer: one of ``SCORERS``.
        window: last-window length for ``"snapkv"`` / ``"snapkv_lastwindow"`` (official 64).
        n_sink: sink tokens for ``"streaming"``.
        max_cache_tokens: optional cap on M_l + block + p; raises if it could be exceeded.
        scorer_prefix_ids: ``LongTensor[1, q]`` fed before the block by ``"kvzip"`` (official: the
            "repeat" instruction, end of the user turn, assistant header) and alone by
            ``"infinipot"`` (the "summarize" instruction and the same turn end); see
            :func:`methods.epicache.pipeline.baseline_prefix_ids`.

    Returns:
        The evicted :class:`EpiCache` with ``seen_tokens = n_sys + N`` and a per-step ``trace``.

    Raises:
        ValueError: on empty context, bad budgets/block size/level/scorer, batch > 1, or a context
            longer than ``max_position_embeddings``.
    """
    cfg = (
        model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    )
    n_layers = int(cfg.num_hidden_layers)
    budgets = _check_budgets(budgets, n_layers)
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int, got {window!r}")
    if scorer not in SCORERS:
        raise ValueError(f"scorer must be one of {SCORERS}, got {scorer!r}")
    if level not in ("uniform", "headwise"):
        raise ValueError(f"level must be 'uniform' or 'headwise', got {level!r}")
    if ctx_ids.dim() != 2 or ctx_ids.shape[0] != 1:
        raise ValueError(f"ctx_ids must be [1, N] (batch size 1), got {tuple(ctx_ids.shape)}")
    if ctx_ids.shape[1] == 0:
        raise ValueError("ctx_ids is empty: nothing to prefill")
    hybrid = any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or []))
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True) and hybrid:
        raise ValueError("models with sliding-window / hybrid layers are not supported")
    if scorer == "patched" and (prompt_ids is None or prompt_ids.numel() == 0):
        raise ValueError("scorer='patched' needs a non-empty prompt_ids")
    if scorer == "infinipot" and (scorer_prefix_ids is None or scorer_prefix_ids.numel() == 0):
        raise ValueError("scorer='infinipot' needs scorer_prefix_ids (see baseline_prefix_ids)")
    n_pre = 0 if scorer_prefix_ids is None else int(scorer_prefix_ids.shape[1])
    p_len = int(prompt_ids.shape[1]) if (prompt_ids is not None and scorer == "patched") else 0
    if scorer == "kvzip_repeat":
        p_len = block_size
    elif scorer == "kvzip":
        p_len = n_pre + block_size
    elif scorer == "infinipot":
        p_len = n_pre
    elif scorer == "snapkv":
        p_len = min(window, block_size)
    if max_cache_tokens is not None and max(budgets) + block_size + p_len > max_cache_tokens:
        raise ValueError(
            f"max(budgets) + block_size + p = {max(budgets) + block_size + p_len} exceeds "
            f"max_cache_tokens={max_cache_tokens}; lower block_size or the budget"
        )
    ids = ctx_ids if prefix_ids is None else torch.cat([prefix_ids, ctx_ids], dim=1)
    n_prefix = 0 if prefix_ids is None else int(prefix_ids.shape[1])
    n_tot = int(ids.shape[1])
    max_pos = getattr(cfg, "max_position_embeddings", None)
    if max_pos is not None and n_tot + p_len > max_pos:
        raise ValueError(
            f"context of {n_tot} tokens (+{p_len} prompt) exceeds max_position_embeddings={max_pos}"
        )

    cache = EpiCache(n_layers)
    pos = 0
    while pos < n_tot:
        blk = ids[:, pos : pos + block_size]
        q = int(blk.shape[1])
        position_ids = torch.arange(pos, pos + q, device=ids.device)[None]
        capture = "window_max" if scorer == "snapkv_lastwindow" else None
        first_block = pos == 0
        with epicache_forward(model, cache, capture=capture, window=window) as st:
            model(input_ids=blk, position_ids=position_ids, cache=cache, use_cache=True)
        peak_fwd = cache.max_tokens_per_head()
        cache.commit_(q)
        if scorer == "patched":
            scores = patched_prompt_scores(model, cache, prompt_ids)
            peak_score = cache.max_tokens_per_head() + p_len
        elif scorer in ("kvzip_repeat", "kvzip", "infinipot", "snapkv"):
            if scorer == "kvzip_repeat" or (scorer == "kvzip" and scorer_prefix_ids is None):
                feed = blk
            elif scorer == "kvzip":
                feed = torch.cat([scorer_prefix_ids.to(blk.device), blk], dim=1)
            elif scorer == "infinipot":
                feed = scorer_prefix_ids.to(blk.device)
            else:  # snapkv: the block's last window fed again after the cache
                feed = blk[:, -window:]
            scores = patched_prompt_scores(model, cache, feed)
            peak_score = cache.max_tokens_per_head() + int(feed.shape[1])
        elif scorer == "snapkv_lastwindow":
            scores = [st.scores[layer] for layer in range(n_layers)]
            peak_score = peak_fwd
        elif scorer == "keydiff":
            # official: per-head anchor on the first (4-D) block, one anchor per layer afterwards
            scores = keydiff_scores(cache, per_head=first_block)
            peak_score = peak_fwd
        elif scorer == "keydiff_cosine":
            scores = keydiff_cosine_scores(cache)
            peak_score = peak_fwd
        else:  # streaming
            scores = streaming_scores(cache, n_sink=n_sink)
            peak_score = peak_fwd
        keep = []
        for layer in range(n_layers):
            s = scores[layer]
            if protect_prefix and n_prefix:
                s = s.masked_fill(cache.kept_positions[layer] < n_prefix, float("inf"))
            keep.append(select_keep(s, cache.valid_mask(layer), budgets[layer], level))
        cache.evict_(keep)
        cache.trace.append(
            {
                "block_start": pos,
                "after_forward": peak_fwd,
                "during_scoring": peak_score,
                "after_evict": cache.max_tokens_per_head(),
                "max_valid_per_head": int(cache.tokens_per_head().max()),
            }
        )
        pos += q
    logger.debug("prefilled %d tokens in %d blocks", n_tot, len(cache.trace))
    return cache


def peak_tokens_per_head(cache: EpiCache) -> int:
    """Largest number of slots any head held at any point of the prefill (from ``cache.trace``)."""
    return max(max(step["after_forward"], step["during_scoring"]) for step in cache.trace)
