"""Greedy decoding over an evicted cache with absolute positions (the paper's query time;
the official code decodes greedily, at most 50 new tokens).

``model.generate`` derives RoPE positions and mask sizes from the cache length, which after
eviction is no longer the absolute position; this loop passes ``position_ids`` explicitly
(starting at ``cache.seen_tokens``) and masks through the ``"epicache"`` attention function.
The question's and the answer's K/V are cropped away afterwards, so the episode cache is reusable.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .cache import EpiCache, epicache_forward


@torch.no_grad()
def greedy_decode(
    model: torch.nn.Module,
    cache: EpiCache,
    input_ids: torch.Tensor,
    max_new_tokens: int = 50,
    eos_ids: Iterable[int] | None = None,
) -> torch.Tensor:
    """Greedy-decodes an answer to ``input_ids`` appended after ``cache``; the cache is left intact
    (paper, query time: decode over the retrieved episode cache; greedy, ≤ 50 tokens as the official
    ``run_epicache_eval.py``; explicit absolute positions are ours, since HF ``generate`` cannot).

    Args:
        model: the causal LM that built ``cache``.
        cache: an :class:`EpiCache` (evicted or not).
        input_ids: ``LongTensor[1, q]`` the question tokens (already formatted).
        max_new_tokens: the most tokens to generate (paper: 50).
        eos_ids: tokens that stop decoding (kept in the output, as HF generate does).

    Returns:
        ``LongTensor[1, n]`` the generated tokens, n <= max_new_tokens.

    Raises:
        ValueError: on a batch size other than 1, an empty question or max_new_tokens < 1.
    """
    if not isinstance(cache, EpiCache):
        raise TypeError(f"cache must be an EpiCache, got {type(cache).__name__}")
    if input_ids.dim() != 2 or input_ids.shape[0] != 1 or input_ids.shape[1] < 1:
        raise ValueError(f"input_ids must be [1, q>=1], got {tuple(input_ids.shape)}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    stop = set(eos_ids or [])
    pos = cache.seen_tokens
    out: list[int] = []
    cur = input_ids
    try:
        with epicache_forward(model, cache):
            for _ in range(max_new_tokens):
                q = int(cur.shape[1])
                position_ids = torch.arange(pos, pos + q, device=cur.device)[None]
                logits = model(
                    input_ids=cur, position_ids=position_ids, cache=cache, use_cache=True
                ).logits
                nxt = int(logits[0, -1].argmax())
                out.append(nxt)
                pos += q
                if nxt in stop:
                    break
                cur = torch.tensor([[nxt]], device=input_ids.device)
    finally:
        cache.drop_uncommitted_()
    return torch.tensor([out], dtype=torch.long, device=input_ids.device)
