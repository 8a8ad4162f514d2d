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
    """Chooses which committed slots of one layer survive (paper, Block-wise Prefill: after each
    block keep the top-M_l tokens by score; the ``headwise`` pool is the official
    ``EvictCache.evict_flattened`` "pair" level, the stable low-index tie break is ours).

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


def _text_config(model: torch.nn.Module):
    cfg = model.config
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def _check_prefill_args(
    cfg, ctx_ids, prompt_ids, block_size, level, scorer, window, scorer_prefix_ids
) -> None:
    """Rejects bad arguments of :func:`blockwise_prefill`, naming the argument (ours)."""
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


def _check_capacity(cfg, m_max: int, block_size: int, p_len: int, n_tot: int, cap) -> None:
    """Rejects a declared memory cap below M_l + M_block + p, or a context past the RoPE range."""
    if cap is not None and m_max + block_size + p_len > cap:
        raise ValueError(
            f"max(budgets) + block_size + p = {m_max + block_size + p_len} exceeds "
            f"max_cache_tokens={cap}; lower block_size or the budget"
        )
    max_pos = getattr(cfg, "max_position_embeddings", None)
    if max_pos is not None and n_tot + p_len > max_pos:
        raise ValueError(
            f"context of {n_tot} tokens (+{p_len} prompt) exceeds max_position_embeddings={max_pos}"
        )


def _trace_step(cache: EpiCache, pos: int, peak_fwd: int, peak_score: int) -> None:
    """Appends one block's slot counts to ``cache.trace`` (read by :func:`peak_tokens_per_head`)."""
    cache.trace.append(
        {
            "block_start": pos,
            "after_forward": peak_fwd,
            "during_scoring": peak_score,
            "after_evict": cache.max_tokens_per_head(),
            "max_valid_per_head": int(cache.tokens_per_head().max()),
        }
    )


def _scoring_len(scorer, prompt_ids, scorer_prefix_ids, block_size: int, window: int) -> int:
    """p, the tokens fed after the cache to score one block (0 for scorers without a feed); the peak
    bound M_l + M_block + p is our reading of the official ``prefill_memory_constrained`` control flow."""
    n_pre = 0 if scorer_prefix_ids is None else int(scorer_prefix_ids.shape[1])
    if scorer == "patched":
        return int(prompt_ids.shape[1])
    return {
        "kvzip_repeat": block_size,
        "kvzip": n_pre + block_size,
        "infinipot": n_pre,
        "snapkv": min(window, block_size),
    }.get(scorer, 0)


def _scorer_feed(scorer, blk, prompt_ids, scorer_prefix_ids, window) -> torch.Tensor | None:
    """What a prompt-style scorer feeds after the cache (official ``token_scoring``), else None."""
    if scorer == "patched":
        return prompt_ids
    if scorer == "kvzip_repeat" or (scorer == "kvzip" and scorer_prefix_ids is None):
        return blk
    if scorer == "kvzip":
        return torch.cat([scorer_prefix_ids.to(blk.device), blk], dim=1)
    if scorer == "infinipot":
        return scorer_prefix_ids.to(blk.device)
    if scorer == "snapkv":  # the block's last window fed again after the cache
        return blk[:, -window:]
    return None


def _score_block(model, cache, scorer, feed, st, first_block: bool, n_sink: int):
    """Per-layer scores of the committed slots after one block (see :mod:`.scoring`)."""
    if feed is not None:
        return patched_prompt_scores(model, cache, feed)
    if scorer == "snapkv_lastwindow":
        return [st.scores[layer] for layer in range(cache.num_layers)]
    if scorer == "keydiff":
        # official: per-head anchor on the first (4-D) block, one anchor per layer afterwards
        return keydiff_scores(cache, per_head=first_block)
    if scorer == "keydiff_cosine":
        return keydiff_cosine_scores(cache)
    return streaming_scores(cache, n_sink=n_sink)


def _evict_to_budget(cache, scores, budgets, level, protect_prefix: bool, n_prefix: int) -> None:
    """Block-wise prefill's eviction step (paper, Block-wise Prefill: evict back to M after every
    block): keep the top-M_l slots of every layer (:func:`select_keep`); ``protect_prefix`` is ours."""
    keep = []
    for layer in range(cache.num_layers):
        s = scores[layer]
        if protect_prefix and n_prefix:
            s = s.masked_fill(cache.kept_positions[layer] < n_prefix, float("inf"))
        keep.append(select_keep(s, cache.valid_mask(layer), budgets[layer], level))
    cache.evict_(keep)


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

    Paper, Block-wise Prefill (the cache never exceeds M + M_block); loop as in the official
    ``model/wrapper.py::prefill_memory_constrained``. Peak slots per head: M_l + block_size during the block
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
    cfg = _text_config(model)
    n_layers = int(cfg.num_hidden_layers)
    budgets = _check_budgets(budgets, n_layers)
    _check_prefill_args(
        cfg, ctx_ids, prompt_ids, block_size, level, scorer, window, scorer_prefix_ids
    )
    p_len = _scoring_len(scorer, prompt_ids, scorer_prefix_ids, block_size, window)
    ids = ctx_ids if prefix_ids is None else torch.cat([prefix_ids, ctx_ids], dim=1)
    n_prefix = 0 if prefix_ids is None else int(prefix_ids.shape[1])
    n_tot = int(ids.shape[1])
    _check_capacity(cfg, max(budgets), block_size, p_len, n_tot, max_cache_tokens)
    cache, pos = EpiCache(n_layers), 0
    capture = "window_max" if scorer == "snapkv_lastwindow" else None
    while pos < n_tot:  # paper, block-wise prefill: forward a block, score, evict back to M_l
        blk = ids[:, pos : pos + block_size]
        q = int(blk.shape[1])
        position_ids = torch.arange(pos, pos + q, device=ids.device)[None]
        with epicache_forward(model, cache, capture=capture, window=window) as st:
            model(input_ids=blk, position_ids=position_ids, cache=cache, use_cache=True)
        peak_fwd = cache.max_tokens_per_head()
        cache.commit_(q)
        feed = _scorer_feed(scorer, blk, prompt_ids, scorer_prefix_ids, window)
        scores = _score_block(model, cache, scorer, feed, st, pos == 0, n_sink)
        # slots while the feed is attached (only the feed's length for scorers without a feed: 0)
        peak_score = peak_fwd if feed is None else cache.max_tokens_per_head() + int(feed.shape[1])
        _evict_to_budget(cache, scores, budgets, level, protect_prefix, n_prefix)
        _trace_step(cache, pos, peak_fwd, peak_score)
        pos += q
    logger.debug("prefilled %d tokens in %d blocks", n_tot, len(cache.trace))
    return cache


def peak_tokens_per_head(cache: EpiCache) -> int:
    """Largest number of slots any head held at any point of the prefill (from ``cache.trace``; ours,
    the quantity the paper's bound M + M_block is about)."""
    return max(max(step["after_forward"], step["during_scoring"]) for step in cache.trace)
