"""Policy log-probs at the K + 1 ids the APO loss needs (sampled token and reference Top-K).

The APO loss reads π_θ only at y_t and at the reference Top-K ids, so these helpers never keep the
full-vocabulary log-softmax of all positions (memory engineering of ours, docs/methods/apo.md,
Deviations).

Shape letters: B sequences, T completion tokens, V vocabulary, K Top-K size.
"""

from __future__ import annotations

import torch

from methods.apo.checks import check_tensor, check_topk

__all__ = ["gather_policy_logps", "policy_entropy", "policy_logps_at"]


def gather_policy_logps(
    logp: torch.Tensor, sampled: torch.Tensor, topk_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather the policy log-probs of the sampled token and of the reference Top-K tokens.

    Only K + 1 values per position are needed by the APO loss, so callers that hold full-vocab
    log-probs can reduce them here once (memory: [B, T, V] -> [B, T, K + 1]). Our engineering.

    Args:
        logp: policy log-softmax over the vocabulary, [B, T, V].
        sampled: sampled token ids y_t, [B, T].
        topk_ids: reference Top-K ids, [B, T, K].

    Returns:
        ``(logp_sampled [B, T], logp_topk [B, T, K])``.
    """
    logp_sampled = logp.gather(-1, sampled.long().unsqueeze(-1)).squeeze(-1)  # [B, T]
    logp_topk = logp.gather(-1, topk_ids.long())  # [B, T, K]
    return logp_sampled, logp_topk


def policy_logps_at(
    logits: torch.Tensor,
    sampled: torch.Tensor,
    topk_ids: torch.Tensor,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Policy log-probs at the sampled token and the reference Top-K, from logits [B, T, V].

    Never materialises the full-vocabulary log-softmax of all positions: it gathers the K + 1
    logits and subtracts a per-row logsumexp (TRL's :func:`trl.trainer.utils.selective_log_softmax`,
    the function TRL's ``GRPOTrainer`` uses for its own log-probs, so APO's loss memory is GRPO's;
    a fused Triton kernel on CUDA when available). The logits' dtype is kept, as TRL does (bf16
    logits use TRL's per-row bf16 log-softmax).

    Args:
        logits: policy logits for the T completion positions, [B, T, V].
        sampled: sampled token ids, [B, T].
        topk_ids: reference Top-K ids, [B, T, K].
        temperature: sampling temperature (> 0) the logits are divided by.

    Returns:
        ``(logp_sampled [B, T], logp_topk [B, T, K])``, differentiable w.r.t. ``logits``.
    """
    from trl.trainer.utils import selective_log_softmax

    check_tensor("logits", logits, (3,))
    check_tensor("sampled", sampled, (2,))
    bt = (sampled.shape[0], sampled.shape[1])
    if tuple(logits.shape[:2]) != bt:
        raise ValueError(
            f"logits must be [B, T, V] with [B, T]={list(bt)}, got {tuple(logits.shape)}"
        )
    vocab = logits.shape[-1]
    check_topk(topk_ids, topk_ids.float(), bt, vocab)
    if vocab <= topk_ids.shape[-1]:
        raise ValueError(f"K={topk_ids.shape[-1]} must be < vocabulary size V={vocab}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if sampled.numel() and (sampled.min() < 0 or sampled.max() >= vocab):
        raise ValueError(f"sampled ids must index the vocabulary [0, {vocab})")
    index = torch.cat([sampled.long()[..., None], topk_ids.long()], dim=-1)  # [B, T, 1 + K]
    lp = selective_log_softmax(logits, index, temperature=temperature)  # [B, T, 1 + K]
    return lp[..., 0], lp[..., 1:]


@torch.no_grad()
def policy_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy [B, T] of ``softmax(logits / temperature)``, one sequence at a time (no [B, T, V]
    fp32 copy; a logged diagnostic, our engineering, no gradient)."""
    check_tensor("logits", logits, (3,))
    out = []
    for row in logits:  # [T, V]
        lp = torch.log_softmax(row.float() / temperature, dim=-1)
        out.append(-(lp.exp() * lp).sum(-1))
    return torch.stack(out) if out else logits.new_zeros(logits.shape[:2]).float()
