"""Diagnostics for APO: safe-manifold mass and the reference Top-K coverage analysis (the paper's
Top-K coverage table, as restated second-hand).

Shape letters: B sequences, T completion tokens, V vocabulary, K Top-K size.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["safe_manifold_mass", "topk_coverage"]


def safe_manifold_mass(
    logp: torch.Tensor, topk_ids: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean policy mass on the reference Top-K, Σ_{k∈TopK(π_ref)} π_θ(k|s_t) (the paper's J_support).

    Args:
        logp: policy log-probs, [B, T, V].
        topk_ids: reference Top-K ids, [B, T, K].
        mask: completion mask [B, T] (None: all positions).

    Returns:
        Scalar tensor: the mask-weighted mean over positions.
    """
    if logp.dim() != 3 or topk_ids.dim() != 3 or logp.shape[:2] != topk_ids.shape[:2]:
        raise ValueError(
            f"logp must be [B, T, V] and topk_ids [B, T, K] with the same [B, T], got "
            f"{tuple(logp.shape)} and {tuple(topk_ids.shape)}"
        )
    mass = logp.gather(-1, topk_ids.long()).exp().sum(-1)  # [B, T]
    if mask is None:
        return mass.mean()
    if mask.shape != mass.shape:
        raise ValueError(f"mask must be [B, T]={list(mass.shape)}, got {tuple(mask.shape)}")
    m = mask.to(mass.dtype)
    return (mass * m).sum() / m.sum().clamp_min(1.0)


@torch.no_grad()
def topk_coverage(
    ref_model: torch.nn.Module,
    sequences: Sequence[str] | Sequence[Sequence[int]],
    ks: Sequence[int] = (1, 4, 8, 16),
    tokenizer: object | None = None,
    prompt_lengths: Sequence[int] | None = None,
) -> dict[int, float]:
    """Share of ground-truth next tokens that lie inside the reference Top-K (the paper's analysis).

    Teacher-forces each sequence through ``ref_model``; for every target position (after the
    prompt, if ``prompt_lengths`` is given) checks whether the true token is among the K most likely
    reference tokens. The paper reports 83.8 / 95.5 / 97.5 / 98.5 % for K = 1/4/8/16 on MATH.

    Args:
        ref_model: causal LM.
        sequences: texts (then ``tokenizer`` is required) or lists of token ids.
        ks: the K values, each in [1, V].
        tokenizer: tokenizer for text input.
        prompt_lengths: per sequence, the number of leading tokens not scored (default 0;
            the first token is never scored: nothing predicts it).

    Returns:
        ``{K: coverage}``, coverage in [0, 1], non-decreasing in K and 1.0 at K = V.
    """
    if not len(sequences):
        raise ValueError("sequences must be non-empty")
    if isinstance(sequences[0], str):
        if tokenizer is None:
            raise ValueError("tokenizer is required when sequences are strings")
        token_lists = [list(tokenizer(s, add_special_tokens=False)["input_ids"]) for s in sequences]
    else:
        token_lists = [list(map(int, s)) for s in sequences]
    if prompt_lengths is not None and len(prompt_lengths) != len(token_lists):
        raise ValueError("prompt_lengths must have one entry per sequence")
    device = next(ref_model.parameters()).device
    hits = {k: 0 for k in ks}
    total = 0
    for i, toks in enumerate(token_lists):
        if len(toks) < 2:
            continue
        ids = torch.tensor([toks], device=device)  # [1, L]
        logits = ref_model(input_ids=ids).logits[:, :-1]  # [1, L-1, V]
        vocab = logits.shape[-1]
        for k in ks:
            if not 1 <= k <= vocab:
                raise ValueError(f"each K in ks must be in [1, V={vocab}], got {k}")
        start = max((prompt_lengths[i] if prompt_lengths is not None else 0) - 1, 0)
        target = ids[:, 1:][:, start:]  # [1, n]
        lp = torch.log_softmax(logits[:, start:].float(), dim=-1)  # [1, n, V]
        # rank of the target = number of tokens strictly more likely (ties count in its favour)
        tgt_lp = lp.gather(-1, target[..., None])  # [1, n, 1]
        rank = (lp > tgt_lp).sum(-1)  # [1, n]
        for k in ks:
            hits[k] += int((rank < k).sum())
        total += target.numel()
    if total == 0:
        raise ValueError("no scorable positions (sequences too short or prompts cover them)")
    return {k: hits[k] / total for k in ks}
