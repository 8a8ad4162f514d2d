"""The token-loss reduction of TRL 1.16's ``GRPOTrainer._compute_loss``, as pure functions.

A custom per-token policy loss (APO, KMKC, ThreadWeaver, ...) is reduced to the scalar TRL
back-propagates by :func:`reduce_token_loss`, so that it is normalised exactly as TRL's own losses
are, in training and in evaluation, for every ``loss_type`` in :data:`LOSS_TYPES`. The pieces:

- :func:`check_token_loss_inputs`: the argument checks (names, shapes, counts);
- :func:`corrected_token_loss`: TRL's vLLM importance-sampling correction and the KL term;
- :func:`reduce_masked`: the per-``loss_type`` normalisation over the completion tokens.

Source: ``trl/trainer/grpo_trainer.py`` (trl 1.16.0), the tail of ``_compute_loss``; ``dr_grpo`` is
the Dr. GRPO objective (Liu et al. 2025), ``dapo`` DAPO's token-level loss (Yu et al. 2025).
Shapes: b sequences in the local batch, T completion tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "LOSS_TYPES",
    "check_token_loss_inputs",
    "corrected_token_loss",
    "reduce_masked",
    "reduce_token_loss",
]

LOSS_TYPES: tuple[str, ...] = (
    "grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "vespo", "luspo"
)  # fmt: skip
"""The ``loss_type`` values of trl 1.16, all reduced by :func:`reduce_token_loss`."""


def check_token_loss_inputs(
    per_token_loss: Tensor,
    completion_mask: Tensor,
    loss_type: str,
    mode: str = "train",
    gradient_accumulation_steps: int = 1,
    steps_per_generation: int = 1,
    num_processes: int = 1,
) -> None:
    """Raises ValueError (naming the argument) on an unknown ``loss_type`` or ``mode``, a
    ``per_token_loss`` that does not broadcast to the ``[b, T]`` mask, or a count below 1."""
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {list(LOSS_TYPES)}, got {loss_type!r}")
    if mode not in ("train", "eval"):
        raise ValueError(f"mode must be 'train' or 'eval', got {mode!r}")
    if completion_mask.dim() != 2:
        raise ValueError(
            f"completion_mask must have shape [b, T], got {tuple(completion_mask.shape)}"
        )
    b = completion_mask.size(0)
    widths = (1, completion_mask.size(1))
    if (
        per_token_loss.dim() != 2
        or per_token_loss.size(0) != b
        or per_token_loss.size(1) not in widths
    ):
        raise ValueError(
            f"per_token_loss must have shape [b, T] or [b, 1] with [b, T]="
            f"{tuple(completion_mask.shape)}, got {tuple(per_token_loss.shape)}"
        )
    if gradient_accumulation_steps < 1 or steps_per_generation < 1 or num_processes < 1:
        raise ValueError(
            "gradient_accumulation_steps, steps_per_generation and num_processes must be >= 1, got "
            f"{gradient_accumulation_steps}, {steps_per_generation}, {num_processes}"
        )


def corrected_token_loss(
    per_token_loss: Tensor,
    loss_type: str,
    importance_sampling_ratio: Tensor | None = None,
    per_token_kl: Tensor | None = None,
    beta: float = 0.0,
) -> Tensor:
    """TRL's corrections before the reduction, in TRL's order.

    1. multiplies by the vLLM importance-sampling correction ``importance_sampling_ratio``
       (``π_old / π_vLLM``, token- ``[b, T]`` or sequence-level ``[b, 1]``), when given and
       ``loss_type != "vespo"`` (VESPO folds the ratio into its gamma weights instead);
    2. adds ``beta * per_token_kl`` when ``per_token_kl`` is given and ``beta != 0`` (after the
       correction, as TRL does: the KL term is not importance-weighted).
    """
    if importance_sampling_ratio is not None and loss_type != "vespo":
        per_token_loss = per_token_loss * importance_sampling_ratio
    if per_token_kl is not None and beta != 0.0:
        per_token_loss = per_token_loss + beta * per_token_kl
    return per_token_loss


def reduce_masked(
    per_token_loss: Tensor,
    mask: Tensor,
    loss_type: str,
    *,
    mode: str = "train",
    max_completion_length: int | None = None,
    num_items_in_batch: Tensor | float | None = None,
    gradient_accumulation_steps: int = 1,
    steps_per_generation: int = 1,
    num_processes: int = 1,
) -> Tensor:
    """Reduces ``per_token_loss`` over the tokens where ``mask`` (float, ``[b, T]``) is 1:

    * ``grpo``, ``sapo``: mean over each sequence's tokens, then over sequences;
    * ``bnpo``: mean over all tokens of the local batch;
    * ``dr_grpo``: sum over tokens / (``b · max_completion_length``) (Dr. GRPO, Liu et al. 2025);
    * ``dapo``, ``cispo``, ``vespo``: sum over tokens / the token count of the whole generation
      batch (``num_items_in_batch``, all processes) divided by ``num_processes``, rescaled in
      training to one accumulation window by ``gradient_accumulation_steps /
      steps_per_generation``;
    * ``luspo``: sum over each sequence's tokens, then mean over sequences.

    In training (``mode="train"``) every type except ``dapo``/``cispo``/``vespo`` (whose normaliser
    already accounts for it) is divided by ``gradient_accumulation_steps``; evaluation is not
    accumulated, so nothing is divided there.

    Raises:
        ValueError: a missing ``max_completion_length`` (``dr_grpo``) or ``num_items_in_batch``
            (``dapo``, ``cispo``, ``vespo``).
    """
    accum = gradient_accumulation_steps if mode == "train" else 1.0
    if loss_type in ("grpo", "sapo"):
        loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
        return loss / accum
    if loss_type == "bnpo":
        return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0) / accum
    if loss_type == "dr_grpo":
        if max_completion_length is None or max_completion_length < 1:
            raise ValueError(
                f"loss_type='dr_grpo' needs max_completion_length >= 1, got {max_completion_length}"
            )
        loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * max_completion_length)
        return loss / accum
    if loss_type == "luspo":
        return (per_token_loss * mask).sum(-1).mean() / accum
    # dapo, cispo, vespo: normalised by the tokens of the whole generation batch.
    if num_items_in_batch is None:
        raise ValueError(f"loss_type={loss_type!r} needs num_items_in_batch (TRL's batch key)")
    items = torch.as_tensor(num_items_in_batch, dtype=per_token_loss.dtype)
    normalizer = items.to(per_token_loss.device).clamp(min=1.0) / num_processes
    if mode == "train":  # in eval the batch is neither split across steps nor accumulated
        normalizer = normalizer * gradient_accumulation_steps / steps_per_generation
    return (per_token_loss * mask).sum() / normalizer


def reduce_token_loss(
    per_token_loss: Tensor,
    completion_mask: Tensor,
    loss_type: str,
    *,
    mode: str = "train",
    max_completion_length: int | None = None,
    num_items_in_batch: Tensor | float | None = None,
    gradient_accumulation_steps: int = 1,
    steps_per_generation: int = 1,
    num_processes: int = 1,
    importance_sampling_ratio: Tensor | None = None,
    per_token_kl: Tensor | None = None,
    beta: float = 0.0,
) -> Tensor:
    """Reduce a per-token policy loss to the scalar TRL back-propagates for ``loss_type``.

    The tail of ``GRPOTrainer._compute_loss`` in trl 1.16: :func:`check_token_loss_inputs`, then
    :func:`corrected_token_loss` (importance-sampling correction, KL term), then
    :func:`reduce_masked` (the per-type normalisation and the accumulation division).

    Masks TRL applies before the reduction (``top_entropy_quantile``'s entropy mask, the off-policy
    mask) belong to the per-token loss; the entropy bonus and the MoE auxiliary loss TRL adds after
    the reduction are not part of this function.

    Args:
        per_token_loss: ``[b, T]`` (or ``[b, 1]``, broadcast over tokens) per-token loss, without
            the KL term.
        completion_mask: ``[b, T]`` 1 on the completion tokens that count (TRL: completion mask times
            tool mask).
        loss_type: one of :data:`LOSS_TYPES` (TRL's ``GRPOConfig.loss_type``).
        mode: ``"train"`` or ``"eval"``.
        max_completion_length: TRL's ``max_completion_length``; required for ``dr_grpo``.
        num_items_in_batch: completion tokens in the whole generation batch (TRL's batch key
            ``"num_items_in_batch"``); required for ``dapo``, ``cispo`` and ``vespo``.
        gradient_accumulation_steps: TRL's ``current_gradient_accumulation_steps``.
        steps_per_generation: ``GRPOConfig.steps_per_generation``.
        num_processes: ``accelerator.num_processes``.
        importance_sampling_ratio: TRL's batch key ``"importance_sampling_ratio"`` when
            ``use_vllm`` and ``vllm_importance_sampling_correction`` are on, else None.
        per_token_kl: ``[b, T]`` KL estimate to the reference (TRL: k3, optionally times the ratio).
        beta: KL coefficient (TRL's ``beta``).

    Returns:
        The 0-d loss to back-propagate.

    Raises:
        ValueError: unknown ``loss_type`` or ``mode``, shapes that do not broadcast to the mask, or a
            missing ``max_completion_length`` / ``num_items_in_batch``.
    """
    check_token_loss_inputs(
        per_token_loss,
        completion_mask,
        loss_type,
        mode,
        gradient_accumulation_steps,
        steps_per_generation,
        num_processes,
    )
    loss = corrected_token_loss(
        per_token_loss, loss_type, importance_sampling_ratio, per_token_kl, beta
    )
    return reduce_masked(
        loss,
        completion_mask.to(per_token_loss.dtype),
        loss_type,
        mode=mode,
        max_completion_length=max_completion_length,
        num_items_in_batch=num_items_in_batch,
        gradient_accumulation_steps=gradient_accumulation_steps,
        steps_per_generation=steps_per_generation,
        num_processes=num_processes,
    )
