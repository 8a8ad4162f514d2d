"""Token-importance scores for block-wise prefill eviction (the paper's
attention-based importance s_i = max_t Attn(x_t → x_i) over the patched prompt, and the baselines).

Shape letters: B batch (1), Hk KV heads, T committed slots of a layer, p prompt length, L layers.

Every scorer returns, per layer, ``FloatTensor[B, Hk, T]`` over the cache's committed slots (higher =
keep). Invalid (padded) slots are set to ``-inf`` by the eviction step, not here.

Scorers (``SCORERS``), as in the official ``model/wrapper.py::token_scoring`` (apple/ml-epicache
b742661) unless marked *ours*:

* ``patched``: attention from the episode's scoring prompt (``clustering`` branch).
* ``snapkv``: the last ``window`` (official 64) tokens of the block are fed again after the cache and
  score it like a patched prompt. ``snapkv_lastwindow`` (*ours*): the attention those tokens paid
  while the block itself was prefilled (causal, no second forward).
* ``kvzip``: "repeat the previous context" instruction, end of the user turn, assistant header, then
  the block (``scorer_prefix_ids ⊕ block``). ``kvzip_repeat`` (*ours*): the block alone.
* ``infinipot``: the official code's InfiniPot stand-in, a fixed "summarize the previous context"
  prompt (``scorer_prefix_ids``), scored like a patched prompt.
* ``keydiff``: score −k̂·ā with k̂ the unit keys and ā the mean unit key (per head on the first block,
  over the whole layer once the cache is flattened, as the official code does).
  ``keydiff_cosine`` (*ours*): −cos(k, mean k) per head.
* ``streaming`` (*ours*, StreamingLLM): sinks + most recent.
"""

from __future__ import annotations

import torch

from .cache import EpiCache, epicache_forward
from .config import SCORERS as SCORERS  # re-exported: the scorer names

# The official scoring prompts (model/wrapper.py::token_scoring): each is "\n\n" + text, then the end of
# the user turn and the assistant header (``scorer_prefix_ids`` of blockwise_prefill).
KVZIP_INSTRUCTION = "Repeat the part of the previous context exactly."
INFINIPOT_INSTRUCTION = "Summarize the previous context highlighting the most important parts."


@torch.no_grad()
def patched_prompt_scores(
    model: torch.nn.Module, cache: EpiCache, prompt_ids: torch.Tensor
) -> list[torch.Tensor]:
    """Scores cached tokens by the attention they receive from a patched prompt (paper, Episodic KV
    Compression, step 2: s_i = max_{t∈[n+1, n+p]} Attn(x_t → x_i); softmax over the cached keys and
    max over the query group as in the official ``attention/score.py::_get_score_flatten``).

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
    """StreamingLLM baseline (Xiao et al., 2024, attention sinks; a baseline row of the paper's tables):
    keep the first ``n_sink`` tokens and the most recent ones (score = position; our scoring form)."""
    out = []
    for layer in range(cache.num_layers):
        pos = cache.kept_positions[layer].float()  # [B, Hk, T]
        out.append(torch.where(pos < n_sink, torch.full_like(pos, float("inf")), pos))
    return out


def keydiff_official(k: torch.Tensor, valid: torch.Tensor, per_head: bool) -> torch.Tensor:
    """KeyDiff baseline (a row of the paper's tables) as the official EpiCache code computes it
    (``model/wrapper.py::token_scoring``, keydiff branch): ``−k̂_i · ā`` with ``k̂ = k/‖k‖``.

    ā is the mean unit key of the head (``per_head=True``: the first block, a 4-D cache) or of the
    whole layer over every head's valid slots (``per_head=False``: the official flattened cache after
    the first eviction). ā is not renormalised, so scores are comparable across heads only up to its
    norm, exactly as in the official headwise ("pair") eviction.

    Args:
        k: ``[B, Hk, T, d]`` keys of one layer.
        valid: ``BoolTensor[B, Hk, T]`` real slots.
        per_head: one anchor per head (True) or one per layer (False).

    Returns:
        ``FloatTensor[B, Hk, T]``.
    """
    kn = k.float() / k.float().norm(dim=-1, keepdim=True)  # [B, Hk, T, d]
    w = valid.unsqueeze(-1).to(kn.dtype)  # [B, Hk, T, 1]
    kn = torch.where(w > 0, kn, torch.zeros_like(kn))  # padding slots may be zero vectors
    if per_head:
        anchor = (kn * w).sum(2, keepdim=True) / w.sum(2, keepdim=True).clamp(
            min=1
        )  # [B, Hk, 1, d]
    else:
        anchor = (kn * w).sum((1, 2), keepdim=True) / w.sum((1, 2), keepdim=True).clamp(min=1)
    return -(kn * anchor).sum(-1)  # [B, Hk, T]


def keydiff_scores(cache: EpiCache, per_head: bool = True) -> list[torch.Tensor]:
    """Official KeyDiff scores of every layer (official ``token_scoring``; see :func:`keydiff_official`)."""
    out = []
    for layer in range(cache.num_layers):
        k, _ = cache.layer_kv(layer)  # [B, Hk, T, d]
        out.append(keydiff_official(k, cache.valid_mask(layer), per_head))
    return out


def keydiff_cosine_scores(cache: EpiCache) -> list[torch.Tensor]:
    """KeyDiff, our form (not the paper's nor the official code's; listed in the doc's deviations):
    keep keys least similar to the mean key of their head (score = −cosine)."""
    out = []
    for layer in range(cache.num_layers):
        k, _ = cache.layer_kv(layer)  # [B, Hk, T, d]
        valid = cache.valid_mask(layer).unsqueeze(-1).to(k.dtype)  # [B, Hk, T, 1]
        mean = (k * valid).sum(2, keepdim=True) / valid.sum(2, keepdim=True).clamp(min=1)
        cos = torch.nn.functional.cosine_similarity(k, mean.expand_as(k), dim=-1)  # [B, Hk, T]
        out.append(-cos.float())
    return out
