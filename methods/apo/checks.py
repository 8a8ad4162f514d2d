"""Input checks shared by the APO loss and anchor modules (public-boundary validation, ours).

Each check names the argument and the expected shape, so a misaligned Top-K cache (padding side,
``logits_to_keep``) or a tokenizer mismatch fails before any arithmetic.
"""

from __future__ import annotations

import torch

__all__ = ["broadcast_advantages", "check_tensor", "check_topk"]


def check_tensor(name: str, x: object, ndim: tuple[int, ...]) -> torch.Tensor:
    """Return ``x`` if it is a tensor with one of the dimension counts ``ndim``, else raise."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() not in ndim:
        raise ValueError(
            f"{name} must have {' or '.join(map(str, ndim))} dims, got {tuple(x.shape)}"
        )
    return x


def check_topk(
    topk_ids: torch.Tensor, topk_logp_ref: torch.Tensor, bt: tuple[int, int], vocab: int | None
) -> None:
    """Check the reference Top-K cache: [B, T, K] integer ids aligned with ``bt`` = (B, T), no
    NaN/+inf log-probs, ids inside ``[0, vocab)`` when ``vocab`` is given."""
    check_tensor("topk_ids", topk_ids, (3,))
    check_tensor("topk_logp_ref", topk_logp_ref, (3,))
    if topk_ids.dtype.is_floating_point:
        raise TypeError(f"topk_ids must be an integer tensor, got {topk_ids.dtype}")
    if tuple(topk_ids.shape[:2]) != bt or topk_ids.shape != topk_logp_ref.shape:
        raise ValueError(
            "topk_ids and topk_logp_ref must be [B, T, K] aligned with the completion mask "
            f"[B, T] = {list(bt)}; got {tuple(topk_ids.shape)} and {tuple(topk_logp_ref.shape)} "
            "(check the padding side and logits_to_keep used for the reference Top-K)"
        )
    if topk_logp_ref.dtype.is_floating_point and (
        torch.isnan(topk_logp_ref).any() or (topk_logp_ref == float("inf")).any()
    ):
        raise ValueError(
            "topk_logp_ref (reference Top-K log-probs) contains NaN or +inf: the reference pass "
            "is broken (check the reference model's weights/dtype); padded slots must be -inf"
        )
    if vocab is not None and topk_ids.numel() and (topk_ids.min() < 0 or topk_ids.max() >= vocab):
        raise ValueError(
            f"topk_ids must index the policy vocabulary [0, {vocab}), got range "
            f"[{int(topk_ids.min())}, {int(topk_ids.max())}]: policy and reference tokenizers differ?"
        )


def broadcast_advantages(advantages: torch.Tensor, bt: tuple[int, int]) -> torch.Tensor:
    """Sequence-level [B] advantages as [B, 1] (token-level [B, T] unchanged); finite only."""
    check_tensor("advantages", advantages, (1, 2))
    if advantages.dim() == 1:
        if advantages.shape[0] != bt[0]:
            raise ValueError(
                f"advantages must be [B]={bt[0]} or [B, T], got {tuple(advantages.shape)}"
            )
        advantages = advantages[:, None]  # [B, 1]
    elif tuple(advantages.shape) != bt:
        raise ValueError(
            f"advantages must be [B] or [B, T]={list(bt)}, got {tuple(advantages.shape)}"
        )
    if not torch.isfinite(advantages).all():
        raise ValueError("advantages must be finite (got NaN or inf)")
    return advantages
