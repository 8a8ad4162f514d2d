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
    desc: str = "train",
    callback: Callable[[int, float], bool | None] | None = None,
) -> list[float]:
    """Runs ``steps`` optimiser steps of ``loss_fn`` on ``model`` and returns the loss of each step.

    Each step ``i`` (0-based) does, in this order: ``loss = loss_fn(i)``; ``zero_grad``;
    ``loss.backward()``; ``clip_grad_norm_(model.parameters(), grad_clip)`` when ``grad_clip`` is
    set; ``optimizer.step()``; ``scheduler.step()`` when given; then ``callback(i, loss)`` when
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
        desc: the progress bar's label (bars are silent with ``ICML26_PROGRESS=0``).
        callback: ``(step, loss) -> stop?`` after every step (logging, evaluation, early stop).

    Returns:
        The float loss of every step run.

    Raises:
        ValueError: on a negative ``steps``, on giving both or neither of ``lr`` and
            ``optimizer``, on a non-positive ``lr`` or ``grad_clip``, or on a non-scalar loss.
    """
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    if (lr is None) == (optimizer is None):
        raise ValueError("give exactly one of lr and optimizer")
    if lr is not None and not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    if grad_clip is not None and not grad_clip > 0:
        raise ValueError(f"grad_clip must be > 0 or None, got {grad_clip!r}")
    if optimizer is None:
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    model.train()
    losses: list[float] = []
    for step in progress(range(int(steps)), desc=desc, unit="step"):
        loss = loss_fn(step)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ValueError(f"loss_fn must return a scalar tensor, got {type(loss).__name__}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        losses.append(float(loss.detach()))
        if callback is not None and callback(step, losses[-1]):
            break
    return losses
