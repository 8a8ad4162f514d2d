"""The trie's ancestor-only attention mask and the packed forward (Sec. 3.3, App. B).

A node of a flattened trie (:mod:`methods.threadweaver.trie`) may attend to its ancestors and
itself only: ``tin[k] <= tin[q] <= tout[k]`` in DFS entry/exit indices. The paper trains with
FlexAttention (App. B); a dense additive mask serves small models and the CPU.

Shape letters: B sequences in a batch, N flattened trie nodes, V vocabulary.
"""

from __future__ import annotations

import torch

from .config import ATTN_FOR_MASK

__all__ = ["ancestor_mask", "dense_trie_mask", "flex_block_mask", "packed_forward"]


def ancestor_mask(tin: torch.Tensor, tout: torch.Tensor) -> torch.Tensor:
    """Dense ancestor-or-self mask ``A[q, k] = tin[k] <= tin[q] <= tout[k]`` (§3.3).

    Args:
        tin, tout: ``[N]`` or ``[B, N]`` DFS entry/exit indices.

    Returns:
        bool ``[N, N]`` (or ``[B, N, N]``); True where query ``q`` may attend to key ``k``.
    """
    if tin.shape != tout.shape:
        raise ValueError(f"tin {tuple(tin.shape)} and tout {tuple(tout.shape)} must match")
    q = tin.unsqueeze(-1)  # [..., N, 1]
    return (tin.unsqueeze(-2) <= q) & (tout.unsqueeze(-2) >= q)  # [..., N, N]


def flex_block_mask(tin: torch.Tensor, tout: torch.Tensor, device: str | None = None):
    """FlexAttention ``BlockMask`` for the ancestor mask of a ``[B, N]`` batch (memory O(N²/128²)).

    The paper trains with FlexAttention (App. B); a dense ``[N, N]`` mask at N ≈ 40k needs gigabytes.
    """
    from torch.nn.attention.flex_attention import create_block_mask

    if tin.dim() == 1:
        tin, tout = tin[None], tout[None]
    b, n = tin.shape

    def mask_mod(bi, h, q, k):
        return (tin[bi, k] <= tin[bi, q]) & (tout[bi, k] >= tin[bi, q])

    return create_block_mask(mask_mod, B=b, H=None, Q_LEN=n, KV_LEN=n, device=device or "cpu")


def dense_trie_mask(tin: torch.Tensor, tout: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive ``[B, 1, N, N]`` ancestor mask in ``dtype`` on ``tin``'s device (0 = attend).

    Source: paper §3.3 (ancestor mask); the official code also passes a dense mask.
    """
    allowed = ancestor_mask(tin, tout)  # [B, N, N]
    add = torch.zeros(allowed.shape[0], 1, *allowed.shape[1:], dtype=dtype, device=tin.device)
    return add.masked_fill_(~allowed.unsqueeze(1), torch.finfo(dtype).min)


def packed_forward(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Run ``model`` on a :class:`TrieCollator` batch; returns logits ``[B, N, V]``.

    Source: paper §3.3 (mask ``A`` and depth positions); device and dtype handling is engineering.

    The mask follows the inputs: a dense mask is moved to ``input_ids``' device and rebuilt in the
    model's dtype when it differs; without ``attention_mask`` (``mask_impl="flex"``) the
    FlexAttention ``BlockMask`` is built from ``tin``/``tout`` on that device.

    Raises:
        TypeError: the model's attention implementation cannot serve the batch's mask kind
            (a ``BlockMask`` needs ``attn_implementation="flex_attention"``, a dense 4-D mask
            ``"sdpa"`` or ``"eager"``).
    """
    ids = batch["input_ids"]
    dev = ids.device
    mask = batch.get("attention_mask")
    kind = "dense" if torch.is_tensor(mask) else "flex"
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if impl is not None and impl not in ATTN_FOR_MASK[kind]:
        raise TypeError(
            f"the trie mask kind {kind!r} needs attn_implementation in {ATTN_FOR_MASK[kind]}, but "
            f"the model uses {impl!r}; load it with attn_implementation={ATTN_FOR_MASK[kind][0]!r}"
        )
    if mask is None:
        if "tin" not in batch or "tout" not in batch:
            raise ValueError("batch has neither attention_mask nor tin/tout to build the trie mask")
        mask = flex_block_mask(batch["tin"].to(dev), batch["tout"].to(dev), device=dev)
    elif torch.is_tensor(mask):
        dtype = next(model.parameters()).dtype
        if mask.is_floating_point() and mask.dtype != dtype and "tin" in batch:
            mask = dense_trie_mask(batch["tin"].to(dev), batch["tout"].to(dev), dtype)
        else:
            mask = mask.to(dev)
    elif hasattr(mask, "to"):  # a BlockMask built by the caller
        mask = mask.to(dev)
    out = model(
        input_ids=ids,
        position_ids=batch["position_ids"].to(dev),
        attention_mask=mask,
        use_cache=False,
    )
    return out.logits
