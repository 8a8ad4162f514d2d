"""The toys' small training loop: ``steps`` optimiser steps on a loss the caller computes, with progress.

Every toy trains the same way: draw a batch, compute a loss, ``zero_grad`` -> ``backward`` ->
(optional) gradient-norm clipping -> ``step`` -> (optional) scheduler step. :func:`train_steps` is
that loop once; the caller's ``loss_fn(step)`` draws its batch from its own generator and runs the
forward pass, so the random draws and the arithmetic stay those of the method.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import torch

from common.tracking import progress


def train_steps(
    model: torch.nn.Module,
    loss_fn: Callable[[int], torch.Tensor],
    steps: int,
    *,
    lr: float | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    weight_decay: float = 0.0,
    scheduler=None,
    grad_clip: float | None = None,
    accumulation_steps: int = 1,
    desc: str = "train",
    callback: Callable[[int, float], bool | None] | None = None,
) -> list[float]:
    """Runs ``steps`` optimiser steps of ``loss_fn`` on ``model`` and returns the loss of each step.

    Each step ``i`` (0-based) does, in this order: ``zero_grad``; for each of its
    ``k = accumulation_steps`` micro-batches ``j``, ``loss = loss_fn(i * k + j)`` and
    ``(loss / k).backward()`` (gradient accumulation: with a mean loss, k micro-batches of b rows give
    the gradient of one batch of k·b rows); ``clip_grad_norm_(model.parameters(), grad_clip)`` when
    ``grad_clip`` is set; ``optimizer.step()``; ``scheduler.step()`` when given; then ``callback(i, loss)`` when
    given, which may return True to stop after that step. The model is put in train mode first
    and left in it (the caller switches to eval).

    Args:
        model: the module being trained (train mode; clipping runs over its parameters).
        loss_fn: ``step -> scalar loss`` (draws the batch and runs the forward pass).
        steps: number of optimiser steps (0 runs none).
        lr: builds ``AdamW(trainable parameters, lr, weight_decay=weight_decay)``; give either
            ``lr`` or ``optimizer``.
        optimizer: a ready optimiser (for other settings: betas, a scheduler bound to it).
        weight_decay: AdamW weight decay when built from ``lr``.
        scheduler: an lr scheduler stepped once after every optimiser step.
        grad_clip: max total gradient norm (``torch.nn.utils.clip_grad_norm_``), or None.
        accumulation_steps: micro-batches (``loss_fn`` calls) per optimiser step.
        desc: the progress bar's label (bars are silent with ``ICML26_PROGRESS=0``).
        callback: ``(step, loss) -> stop?`` after every step (logging, evaluation, early stop).

    Returns:
        The float loss of every step run (the mean of its micro-batch losses).

    Raises:
        ValueError: on a negative ``steps``, on giving both or neither of ``lr`` and
            ``optimizer``, on a non-positive ``lr``, ``grad_clip`` or ``accumulation_steps``, or on a
            non-scalar loss.
    """
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    if (lr is None) == (optimizer is None):
        raise ValueError("give exactly one of lr and optimizer")
    if lr is not None and not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    if grad_clip is not None and not grad_clip > 0:
        raise ValueError(f"grad_clip must be > 0 or None, got {grad_clip!r}")
    k = accumulation_steps
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"accumulation_steps must be an integer >= 1, got {k!r}")
    if optimizer is None:
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    model.train()
    losses: list[float] = []
    for step in progress(range(int(steps)), desc=desc, unit="step"):
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for micro in range(k):
            loss = loss_fn(step * k + micro)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise ValueError(f"loss_fn must return a scalar tensor, got {type(loss).__name__}")
            (loss / k).backward()  # x / 1 is exact: k = 1 is the plain loop
            total += float(loss.detach())
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        losses.append(total / k)
        if callback is not None and callback(step, losses[-1]):
            break
    return losses
