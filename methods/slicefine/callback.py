"""The switching schedule as a ``transformers`` callback (paper Fig. 1: the slice
slides at every switch; the period and the optimiser reset are our inference)."""

from __future__ import annotations

import logging

from transformers import TrainerCallback

from methods.slicefine.model import SliceFineModel, reset_slice_optimizer_state

logger = logging.getLogger(__name__)


class SliceSwitchCallback(TrainerCallback):
    """Moves every slice each ``switch_every`` optimiser steps and resets those optimiser moments.

    Works with ``transformers.Trainer`` and TRL's trainers: pass ``callbacks=[SliceSwitchCallback(sm)]``
    where ``sm`` is the :class:`SliceFineModel` being trained. The learning-rate schedule keeps
    running across switches (our inference; the paper does not say).

    Raises:
        ValueError: if ``switch_every`` is not a positive int.
    """

    def __init__(self, model: SliceFineModel, switch_every: int | None = None) -> None:
        n = switch_every if switch_every is not None else model.config.switch_every
        if n is None or n <= 0:
            raise ValueError(f"switch_every must be a positive int, got {n!r}")
        self.sf_model = model
        self.switch_every = int(n)

    def on_step_end(self, args, state, control, optimizer=None, **kwargs):
        """Switch every ``switch_every`` steps and reset the moments of the new slices
        (paper Figure 1 schedule; the reset is our inference).
        """
        if state.global_step > 0 and state.global_step % self.switch_every == 0:
            self.sf_model.switch()
            if optimizer is not None:
                reset_slice_optimizer_state(optimizer, self.sf_model)
            logger.debug(
                "slicefine: switch %d at step %d", self.sf_model.num_switches, state.global_step
            )
        return control
