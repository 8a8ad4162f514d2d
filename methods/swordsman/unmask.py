"""Threshold-based parallel unmasking inside a block (official `llada/generate.py::get_transfer_index`).

Every masked position of the block whose top-1 probability reaches the threshold is committed in the same
step; the single most confident masked position is always committed so that a block of length ``ℓ``
finishes in at most ``ℓ`` steps.
"""

from __future__ import annotations

import torch


def select_transfer(
    logits: torch.Tensor,
    x_blk: torch.Tensor,
    mask_id: int,
    tau: float,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    confidence_dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose the tokens to commit at one denoising step (``U_t``; official ``get_transfer_index``).

    Source: official ``llada/generate.py`` (``get_transfer_index``).

    ``x̂_j = argmax_v p_j(v)`` (Gumbel-max sample if ``temperature > 0``), ``c_j = p_j(x̂_j)``;
    commit ``{j masked : c_j >= tau} ∪ {argmax_{j masked} c_j}``.

    Args:
        logits: ``[1, ℓ, V]`` logits aligned with the block positions.
        x_blk: ``[1, ℓ]`` current block tokens (``mask_id`` where undecided).
        mask_id: the mask token id.
        tau: commit threshold in ``[0, 1]``.
        temperature: 0 for greedy; > 0 samples ``x̂`` with the Gumbel-max trick.
        generator: RNG for sampling.
        confidence_dtype: precision of the softmax behind ``c_j``. ``torch.float64`` as in the official
            LLaDA code (``F.softmax(logits.to(torch.float64))``); ``torch.float32`` is this repository's
            earlier choice. It matters on near-ties: probabilities that round to the same float32 value
            make the forced top-1 pick the first position and can flip ``c_j >= tau``, which changes NFE.

    Returns:
        ``(x0, commit)``: ``x0 [1, ℓ]`` proposed tokens (equal to ``x_blk`` off the masked positions) and
        ``commit [1, ℓ]`` bool, True only on masked positions; at least one True if any mask remains.
    """
    if logits.dim() != 3 or logits.shape[:2] != x_blk.shape:
        raise ValueError(
            f"logits must be [1, ℓ, V] matching x_blk [1, ℓ], got {tuple(logits.shape)} and "
            f"{tuple(x_blk.shape)}"
        )
    if confidence_dtype not in (torch.float32, torch.float64):
        raise TypeError(
            f"confidence_dtype must be torch.float32 or torch.float64, got {confidence_dtype}"
        )
    masked = x_blk == mask_id  # [1, ℓ]
    logp = torch.log_softmax(logits.to(confidence_dtype), dim=-1)  # [1, ℓ, V]
    # Deviation: the mask token itself is never proposed (the official code can "commit" a mask, which
    # leaves the position undecided and can stall a block on a badly trained model).
    logp[..., mask_id] = float("-inf")
    if temperature > 0:
        u = torch.rand(logp.shape, generator=generator, dtype=logp.dtype).clamp_(1e-20, 1.0)
        x0 = (logp / temperature - torch.log(-torch.log(u))).argmax(-1)  # [1, ℓ]
    else:
        x0 = logp.argmax(-1)  # [1, ℓ]
    conf = logp.gather(-1, x0.unsqueeze(-1)).squeeze(-1).exp()  # [1, ℓ]
    conf = conf.masked_fill(~masked, -1.0)
    commit = masked & (conf >= tau)
    # Forced top-1 without a host sync: the most confident position is committed iff it is masked
    # (it is, whenever any position is: masked confidences are >= 0 > -1).
    best = conf.argmax(-1, keepdim=True)  # [1, 1]
    commit.scatter_(1, best, masked.gather(1, best))
    x0 = torch.where(masked, x0, x_blk)
    return x0, commit
