"""Entropy-driven adaptive block partition (paper: boundaries at entropy rises ΔH_i = H_{i+1} − H_i;
the exact rule is official ``llada/generate.py::determine_next_block_length``).

At the first undecided position ``s`` the model has just predicted every masked position. The next block
ends right before the position whose uncertainty rises most relative to its left neighbour, searched in the
window ``[s + m_min, min(s + M_max, end))``; when no rise reaches ``δ`` the block takes the whole window.
The rising position becomes the first token of the following block, so blocks tend to start at the
uncertain head of a new constituent (the entropy-reduction hypothesis).
"""

from __future__ import annotations

import math

import torch


def next_block_length(
    u: torch.Tensor,
    start: int,
    min_len: int = 1,
    max_len: int = 32,
    min_jump: float = 0.01,
    seq_end: int | None = None,
) -> int:
    """Length of the next block, cut at the largest uncertainty jump (official
    ``determine_next_block_length``: one largest jump per window, no multi-boundary rule).

    Source: the paper's entropy jump ``ΔH_i = H_{i+1} − H_i`` (abstract); the rule as official
    ``llada/generate.py``.

    With ``a = start + min_len`` and ``e = min(start + max_len, seq_end)``, the jumps are
    ``d_j = u_j - u_{j-1}`` for ``j ∈ [a, e)``; ``j* = argmax d_j`` (first maximiser). The block is
    ``[start, j*)`` if ``d_{j*} >= min_jump`` and ``[start, e)`` otherwise.

    Args:
        u: ``[L]`` uncertainty per position of the full sequence (e.g. ``token_entropy``).
        start: first undecided position ``s``.
        min_len: ``m_min >= 1``.
        max_len: ``M_max >= min_len``.
        min_jump: ``δ >= 0``, smallest rise that counts as a boundary.
        seq_end: end of the generation region (default ``len(u)``).

    Returns:
        Block length ``ℓ`` with ``1 <= ℓ <= min(max_len, seq_end - start)``; ``ℓ >= min_len`` unless fewer
        than ``min_len`` positions remain.

    Raises:
        ValueError: on a non-1-D ``u``, a NaN/inf ``u`` in the search window, bounds outside the
            sequence, or invalid lengths/jump.
    """
    if not isinstance(u, torch.Tensor) or u.dim() != 1:
        shape = tuple(u.shape) if isinstance(u, torch.Tensor) else type(u).__name__
        raise ValueError(f"u must be a 1-D tensor [L], got {shape}")
    n = u.shape[0]
    seq_end = n if seq_end is None else int(seq_end)
    if not 0 < seq_end <= n:
        raise ValueError(f"seq_end must be in (0, {n}], got {seq_end}")
    if not 0 <= start < seq_end:
        raise ValueError(f"start must be in [0, seq_end={seq_end}), got {start}")
    if min_len < 1:
        raise ValueError(f"min_len must be >= 1, got {min_len}")
    if max_len < min_len:
        raise ValueError(f"max_len ({max_len}) must be >= min_len ({min_len})")
    if not min_jump >= 0:  # also rejects NaN
        raise ValueError(f"min_jump must be a number >= 0, got {min_jump}")

    a = start + min_len
    e = min(start + max_len, seq_end)
    if a >= seq_end:  # fewer than min_len positions left: take them all
        return seq_end - start
    if a >= e:  # empty search window (min_len == max_len): a fixed-size block
        return e - start
    # One host transfer of the window (no per-value sync); float64 arithmetic as ``u.double()`` would do.
    w = u[a - 1 : e].double().tolist()  # u_{a-1}, ..., u_{e-1}
    if not all(math.isfinite(v) for v in w):  # an argmax would pick a NaN jump
        raise ValueError(
            f"u must be finite on the search window [{a - 1}, {e}) (NaN/inf uncertainty, e.g. from "
            f"NaN logits), got {w}"
        )
    jumps = [w[i + 1] - w[i] for i in range(e - a)]  # d_j for j in [a, e)
    i_star = max(range(e - a), key=jumps.__getitem__)  # max() returns the first maximiser
    length = (e - start) if jumps[i_star] < min_jump else (a + i_star - start)
    return min(length, max_len)
