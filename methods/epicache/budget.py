"""Layer sensitivity profiling and per-layer budget allocation (official
``data/layer_scores/layer_profile.py`` and ``model/wrapper.py::allocate_layer_budget``).

Shape letters: L layers, N profiling tokens, Hk KV heads, d head dim.

Sensitivity compares each layer's keys under full causal attention with the keys under a block mask
(what block-wise prefill sees); layers whose keys move more get more of the total budget L·M.
"""

from __future__ import annotations

import logging
from typing import Literal

import numpy as np
import torch

from .cache import epicache_forward

logger = logging.getLogger(__name__)


def block_attention_mask(
    n: int, block: int = 4096, sink: int = 128, overlap: float = 0.5
) -> torch.Tensor:
    """The block-prefill mask 𝓜′ used for profiling (paper, Sensitivity-aware Layer-wise Budget
    Allocation: keys under block-wise attention 𝓜′ vs full causal 𝓜; sink and overlap as the official
    ``data/layer_scores/layer_profile.py::_create_block_only_mask`` and its defaults).

    Query i in block b = ⌊i / block⌋ sees key j ≤ i iff j is in block b, or j lies in the last
    ⌊overlap·block⌋ tokens of block b − 1, or (only for queries i ≥ sink) j < sink. The sink columns
    are opened for the rows from ``sink`` on, as in the official code: with sink > block the first
    ``sink`` queries see only their own block and the overlap.

    Returns:
        ``BoolTensor[n, n]`` (True = may attend).

    Raises:
        ValueError: on n < 1, block < 1, sink < 0 or overlap outside [0, 1].
    """
    if n < 1 or block < 1 or sink < 0 or not 0.0 <= overlap <= 1.0:
        raise ValueError(
            f"need n >= 1, block >= 1, sink >= 0, 0 <= overlap <= 1; got {n}, {block}, {sink}, {overlap}"
        )
    i = torch.arange(n).view(-1, 1)
    j = torch.arange(n).view(1, -1)
    bi, bj = i // block, j // block
    ov = int(overlap * block)
    prev_tail = (bj == bi - 1) & (j >= bi * block - ov)
    sink_cols = (j < sink) & (i >= sink)
    return (j <= i) & ((bj == bi) | sink_cols | prev_tail)


def windowed_key_similarity(a: torch.Tensor, b: torch.Tensor, window: int | None) -> float:
    """Mean cosine between two key tensors ``[Hk, N, d]`` of one layer (paper's σ_l; windows:
    official ``compute_windowed_key_similarity``).

    ``window=None``: per-token cosine averaged over heads and tokens (the paper's σ_l). An int: cosine
    of flattened windows of ``window`` consecutive keys, averaged over heads and windows; the last
    window may be shorter and is kept (official ``compute_windowed_key_similarity``).
    """
    if window is None:
        return float(torch.nn.functional.cosine_similarity(a, b, dim=-1).mean())
    n = a.shape[1]
    sims = [
        torch.nn.functional.cosine_similarity(
            a[:, s : s + window].reshape(a.shape[0], -1),
            b[:, s : s + window].reshape(b.shape[0], -1),
            dim=-1,
        )  # [Hk]
        for s in range(0, n, window)
    ]
    return float(torch.stack(sims, dim=1).mean())  # mean over [Hk, nW]


@torch.no_grad()
def profile_layer_sensitivity(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    block: int = 4096,
    sink: int = 128,
    overlap: float = 0.5,
    window: int | None = None,
) -> np.ndarray:
    """σ_l: mean cosine between keys under the full and the block mask (paper, Sensitivity-aware
    Layer-wise Budget Allocation; one sample as the official ``layer_profile.py``).

    σ_l = (1 / (Hk·N)) Σ_{h,i} cos(k_full,i^(l,h), k_block,i^(l,h)); with ``window`` (official: 100)
    the cosine is taken between flattened windows of ``window`` consecutive keys instead, the last
    partial window included (:func:`windowed_key_similarity`).

    Args:
        model: the causal LM.
        input_ids: ``LongTensor[1, N]`` one long profiling sample.
        block, sink, overlap: the block mask (official 4096 / 128 / 0.5).
        window: None for per-token cosine (paper), an int for windowed cosine (official code).

    Returns:
        ``float[L]`` similarities σ_l (sensitivity is 1 − σ_l).
    """
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"input_ids must be [1, N], got {tuple(input_ids.shape)}")
    if window is not None and (not isinstance(window, int) or window < 1):
        raise ValueError(f"window must be None or a positive int, got {window!r}")
    n = int(input_ids.shape[1])
    with epicache_forward(model, None, capture="keys") as full:
        model(input_ids=input_ids, use_cache=False)
    mask = block_attention_mask(n, block, sink, overlap).to(input_ids.device)
    with epicache_forward(model, None, capture="keys", extra_mask=mask) as blk:
        model(input_ids=input_ids, use_cache=False)
    sig = []
    for layer in sorted(full.keys):
        a, b = full.keys[layer][0].float(), blk.keys[layer][0].float()  # [Hk, N, d]
        sig.append(windowed_key_similarity(a, b, window))
    out = np.asarray(sig)
    if not np.isfinite(out).all():
        raise ValueError("sensitivity profile holds NaN or inf")
    return out


def allocate_layer_budgets(
    sigma: np.ndarray,
    M: int,
    alpha: float = 2.0,
    mode: Literal["paper", "repo"] = "paper",
    floor_frac: float = 0.25,
) -> np.ndarray:
    """Splits the total budget L·M over layers by sensitivity s_l = 1 − σ_l (paper, Sensitivity-aware
    Layer-wise Budget Allocation: M_l = s_l^α / Σ_j s_j^α · L·M; the floor is the official
    ``allocate_layer_budget``'s, the exact-sum water-filling and largest-remainder rounding are ours).

    ``paper``: M_l ∝ s_l^α, with a floor max(1, ⌊floor_frac·M⌋) funded by the other layers and
    largest-remainder rounding so that Σ_l M_l = L·M exactly. Equal s (or α = 0) gives M_l = M.
    ``repo``: n_l = (σ_l − min σ)/(max σ − min σ), w_l = (1 − n_l)^α, M_l = ⌊w_l·L·M / Σ w⌋, then
    clamped to the floor (the sum may then exceed L·M, as in the official code).

    Args:
        sigma: ``float[L]`` key similarities σ_l from :func:`profile_layer_sensitivity`.
        M: average per-head budget per layer.
        alpha: sharpness α >= 0 (paper best 2; official 1.1-1.3 in repo mode).
        mode: ``"paper"`` or ``"repo"``.
        floor_frac: floor as a fraction of M (official 1/4).

    Returns:
        ``int[L]`` budgets M_l >= 1.

    Raises:
        ValueError: on M < 1, α < 0, NaN/inf or an unknown mode.
    """
    sigma = np.asarray(sigma, dtype=np.float64).reshape(-1)
    if sigma.size == 0 or not np.isfinite(sigma).all():
        raise ValueError("sigma must be a non-empty finite array")
    if not isinstance(M, (int, np.integer)) or M < 1:
        raise ValueError(f"M must be an int >= 1, got {M!r}")
    if alpha < 0 or not np.isfinite(alpha):
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    n_layers = sigma.size
    total = n_layers * int(M)
    floor = max(1, int(np.floor(floor_frac * M)))
    if mode == "repo":
        span = sigma.max() - sigma.min()
        if span <= 0 or alpha == 0:
            return np.full(n_layers, int(M), dtype=np.int64)
        norm = (sigma - sigma.min()) / span
        w = (1.0 - norm) ** alpha
        out = np.floor(w * total / w.sum()).astype(np.int64)
        return np.maximum(out, floor)
    if mode != "paper":
        raise ValueError(f"mode must be 'paper' or 'repo', got {mode!r}")
    s = np.clip(1.0 - sigma, 0.0, None)
    w = np.power(s, alpha) if alpha > 0 else np.ones(n_layers)
    if w.sum() <= 0 or np.allclose(w, w[0]):
        return np.full(n_layers, int(M), dtype=np.int64)
    # Water-filling: layers whose share falls under the floor are pinned to it; the rest share the remainder.
    pinned = np.zeros(n_layers, dtype=bool)
    ideal = np.zeros(n_layers)
    while True:
        free = ~pinned
        rest = total - floor * pinned.sum()
        ideal[pinned] = floor
        ideal[free] = w[free] / w[free].sum() * rest if w[free].sum() > 0 else rest / free.sum()
        newly = free & (ideal < floor)
        if not newly.any():
            break
        pinned |= newly
    base = np.floor(ideal).astype(np.int64)
    short = total - int(base.sum())
    frac = ideal - base
    order = np.argsort(-frac, kind="stable")  # largest remainder first, lower index on ties
    base[order[:short]] += 1
    return base
