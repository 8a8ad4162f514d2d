"""Token-importance scores for block-wise prefill eviction (EpiCache §3.4 and the baselines).

Shape letters: B batch (1), Hk KV heads, T committed slots of a layer, p prompt length, L layers.

Every scorer returns, per layer, ``FloatTensor[B, Hk, T]`` over the cache's committed slots (higher =
keep). Invalid (padded) slots are set to ``-inf`` by the eviction step, not here.
"""

from __future__ import annotations

import torch

from .cache import EpiCache, epicache_forward

SCORERS = ("patched", "snapkv_lastwindow", "kvzip_repeat", "keydiff", "streaming")


@torch.no_grad()
def patched_prompt_scores(
    model: torch.nn.Module, cache: EpiCache, prompt_ids: torch.Tensor
) -> list[torch.Tensor]:
    """Scores cached tokens by the attention they receive from a patched prompt (spec §3.4).

    s_i^(l,h) = max_{t ∈ P, g ∈ group(h)} softmax_{j ∈ cache}(q_{t,g} · k_j / √d)[i]

    The prompt is fed after the cache at positions ``seen_tokens .. seen_tokens + p − 1``
    (Deviation: the official code starts one position earlier; see docs). Its K/V are dropped
    afterwards, so the cache is unchanged.

    Args:
        model: the causal LM the cache belongs to.
        cache: the cache after committing the current block.
        prompt_ids: ``LongTensor[1, p]`` the patched prompt (the episode's medoid segments).

    Returns:
        Per layer, ``FloatTensor[1, Hk, T_l]``.
    """
    if prompt_ids.dim() != 2 or prompt_ids.shape[0] != 1 or prompt_ids.shape[1] < 1:
        raise ValueError(f"prompt_ids must be [1, p>=1], got {tuple(prompt_ids.shape)}")
    start = cache.seen_tokens
    pos = torch.arange(start, start + prompt_ids.shape[1], device=prompt_ids.device)[None]
    try:
        with epicache_forward(model, cache, capture="past_max") as st:
            model(input_ids=prompt_ids, position_ids=pos, cache=cache, use_cache=True)
    finally:
        cache.drop_uncommitted_()
    return [st.scores[layer] for layer in range(cache.num_layers)]


def streaming_scores(cache: EpiCache, n_sink: int = 4) -> list[torch.Tensor]:
    """StreamingLLM: keep the first ``n_sink`` tokens and the most recent ones (score = position)."""
    out = []
    for layer in range(cache.num_layers):
        pos = cache.kept_positions[layer].float()  # [B, Hk, T]
        out.append(torch.where(pos < n_sink, torch.full_like(pos, float("inf")), pos))
    return out


def keydiff_scores(cache: EpiCache) -> list[torch.Tensor]:
    """KeyDiff: keep keys least similar to the mean key of their head (score = −cosine)."""
    out = []
    for layer in range(cache.num_layers):
        k, _ = cache.layer_kv(layer)  # [B, Hk, T, d]
        valid = cache.valid_mask(layer).unsqueeze(-1).to(k.dtype)  # [B, Hk, T, 1]
        mean = (k * valid).sum(2, keepdim=True) / valid.sum(2, keepdim=True).clamp(min=1)
        cos = torch.nn.functional.cosine_similarity(k, mean.expand_as(k), dim=-1)  # [B, Hk, T]
        out.append(-cos.float())
    return out
