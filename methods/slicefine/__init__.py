"""SliceFine: The Universal Winning-Slice Hypothesis for Pretrained Networks (arXiv 2510.08513).

Fine-tune only a small contiguous slice (r rows or columns) of selected pretrained weights, moving
the slice every N steps: zero new parameters, and any wide-enough slice is a local winning ticket.
The moving-slice schedule is reconstructed (paper text and official code were unavailable).
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from methods.slicefine.callback import SliceSwitchCallback
    from methods.slicefine.diagnostics import (
        local_ticket_test,
        restricted_grad_ratio,
        spectral_balance,
        task_energy,
    )
    from methods.slicefine.layer import SliceFineLinear
    from methods.slicefine.model import (
        SliceFineConfig,
        SliceFineModel,
        apply_slicefine,
        check_optimizer,
        load_slice_state_dict,
        next_position,
        reset_slice_optimizer_state,
    )

__all__ = [
    "SliceFineConfig",
    "SliceFineLinear",
    "SliceFineModel",
    "SliceSwitchCallback",
    "apply_slicefine",
    "check_optimizer",
    "load_slice_state_dict",
    "local_ticket_test",
    "next_position",
    "reset_slice_optimizer_state",
    "restricted_grad_ratio",
    "spectral_balance",
    "task_energy",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
