"""Sequence-level uncertainty signals (paper App. C.1, Eq. 24; E1–E3 of docs/methods/kmkc.md).

Shape letters: B responses, T answer tokens, V vocabulary.
"""

from __future__ import annotations

import torch


def _check_mask(values: torch.Tensor, mask: torch.Tensor, name: str) -> torch.Tensor:
    if not isinstance(values, torch.Tensor) or not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} and mask must be torch tensors")
    if mask.shape != values.shape[:2] or values.dim() < 2:
        raise ValueError(
            f"mask must be [B, T] matching {name}'s first two dims, got {name} "
            f"{tuple(values.shape)} and mask {tuple(mask.shape)}"
        )
    mask = mask.bool()
    n_tok = mask.sum(dim=1)  # [B]
    if (n_tok == 0).any():
        bad = torch.nonzero(n_tok == 0).flatten().tolist()
        raise ValueError(f"every response needs T >= 1 answer tokens; rows {bad} have none")
    return mask


def sequence_nll(token_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood of each response (Eq. 24 / E1).

    U(y|q) = −(1/T) Σ_t log p_θ(x_t | q, x_<t), over the answer tokens only (mask = True).

    Args:
        token_logprobs: ``[B, T]`` log-probabilities of the sampled tokens (padding may hold anything,
            including ±inf / NaN).
        mask: ``[B, T]`` bool, True on answer tokens.

    Returns:
        ``[B]`` float tensor U ≥ 0.

    Raises:
        ValueError: on shape mismatch or a response with no answer tokens.
    """
    mask = _check_mask(token_logprobs, mask, "token_logprobs")
    if token_logprobs.dim() != 2:
        raise ValueError(f"token_logprobs must be [B, T], got {tuple(token_logprobs.shape)}")
    lp = torch.where(mask, token_logprobs, torch.zeros_like(token_logprobs))  # [B, T]
    return -lp.sum(dim=1) / mask.sum(dim=1)  # [B]


def sequence_confidence(u: torch.Tensor) -> torch.Tensor:
    """Sequence confidence c = exp(−U) ∈ (0, 1] (E2): the geometric-mean token probability.

    Source: the paper's confidence exp(−NLL) of Eq. 24's U, as quoted in third-party notes (paper
    text not read).

    Raises:
        ValueError: if any U is negative or NaN (U is a mean NLL, so it is ≥ 0).
    """
    u = torch.as_tensor(u, dtype=torch.float32) if not isinstance(u, torch.Tensor) else u
    if torch.isnan(u).any() or (u < 0).any():
        raise ValueError("u must be mean NLLs >= 0 without NaN")
    return torch.exp(-u)


def mean_token_entropy(
    logits: torch.Tensor, mask: torch.Tensor, chunk_size: int = 64
) -> torch.Tensor:
    """Mean next-token entropy over the answer tokens (E3).

    Source: our inference from the official ``assets/method.png`` ("entropy over token
    distribution"); not an equation of the paper.

    H̄(y|q) = (1/T) Σ_t H(p_θ(·|q, x_<t)),  H(p) = −Σ_v p_v log p_v.
    Computed in chunks over T so that only ``[B, chunk, V]`` log-softmax lives at once.

    Args:
        logits: ``[B, T, V]`` next-token logits at the answer positions.
        mask: ``[B, T]`` bool, True on answer tokens.
        chunk_size: positions per chunk.

    Returns:
        ``[B]`` entropies in nats, within [0, log V].
    """
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3:
        raise ValueError("logits must be a [B, T, V] tensor")
    mask = _check_mask(logits, mask, "logits")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    total = logits.new_zeros(logits.shape[0], dtype=torch.float32)  # [B]
    for s in range(0, logits.shape[1], chunk_size):
        lg = logits[:, s : s + chunk_size].float()  # [B, t, V]
        logp = torch.log_softmax(lg, dim=-1)
        ent = -(logp.exp() * logp).sum(-1)  # [B, t]
        m = mask[:, s : s + chunk_size]
        total = total + torch.where(m, ent, torch.zeros_like(ent)).sum(1)
    return total / mask.sum(dim=1)
