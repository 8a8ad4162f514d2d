"""The slice-trainable linear layer (the paper's slice: a binary mask
M over r rows or r columns, update W = W₀ + M ⊙ U; Fig. 1).

Only a contiguous block of ``r`` rows or ``r`` columns of a pretrained ``nn.Linear`` weight is
trainable at a time. The block's update lives in a zero-initialised ``delta`` parameter:

- row slice, rows R = [p, p+r), ``delta`` ``[r, d_in]``:  y = x Wᵀ + b, then y[..., R] += x deltaᵀ;
- column slice, cols K = [p, p+r), ``delta`` ``[d_out, r]``: y = x Wᵀ + b + x[..., K] deltaᵀ.

This is exactly training the masked entries of W (∂L/∂delta is the slice of ∂L/∂W), while the full
weight stays frozen. ``commit`` folds ``delta`` into W and zeroes it, so after ``merge`` nothing is
added to the model: zero new parameters (paper abstract).

Shapes: d_in input features, d_out output features, r slice width.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

Orient = Literal["row", "column"]


def _check_r(r: int, orient: str, d_out: int, d_in: int) -> int:
    if orient not in ("row", "column"):
        raise ValueError(f"orient must be 'row' or 'column', got {orient!r}")
    if isinstance(r, bool) or not isinstance(r, int):
        raise TypeError(f"r must be an int, got {type(r).__name__}")
    dim = d_out if orient == "row" else d_in
    if not 1 <= r <= dim:
        raise ValueError(f"r must satisfy 1 <= r <= {dim} (the {orient} count), got r={r}")
    return dim


class _SliceLinearFn(torch.autograd.Function):
    """One autograd node for y = x Wᵀ + b with the slice update added in place (our inference).

    Forward: one full matmul plus an r-wide one written into the output's slice (no concatenated
    copy of y). Backward: ∂x = ∂y W (+ the slice's term), ∂delta = the slice of ∂yᵀ x; W is frozen,
    so its gradient is never formed. Saves only x (as the LoRA branch does), W and delta.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, delta, start: int, stop: int, row: bool):
        y = F.linear(x, weight, bias)  # [..., d_out]
        if row:
            y[..., start:stop] += F.linear(x, delta)  # [..., r]
        else:
            y += F.linear(x[..., start:stop], delta)
        ctx.save_for_backward(x, weight, delta)
        ctx.slice = (start, stop, row)
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx, gy):
        x, weight, delta = ctx.saved_tensors
        start, stop, row = ctx.slice
        gx = gdelta = gbias = None
        if ctx.needs_input_grad[0]:
            gx = gy @ weight  # [..., d_in]
            if row:
                gx += gy[..., start:stop] @ delta
            else:
                gx[..., start:stop] += gy @ delta
        if ctx.needs_input_grad[3]:
            g2 = gy.reshape(-1, gy.shape[-1])
            x2 = x.reshape(-1, x.shape[-1])
            gdelta = g2[:, start:stop].T @ x2 if row else g2.T @ x2[:, start:stop]
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gbias = gy.reshape(-1, gy.shape[-1]).sum(0)
        return gx, None, gbias, gdelta, None, None, None


class SliceFineLinear(nn.Module):
    """A frozen ``nn.Linear`` with one trainable row or column slice (paper Fig. 1: W = W₀ + M ⊙ U;
    the forward math is our inference, equivalent to it).

    Args:
        base: the pretrained linear layer; its weight is frozen and updated in place on ``commit``.
        r: slice width (rows or columns), 1 <= r <= d_out (row) or d_in (column).
        orient: ``"row"`` or ``"column"``.
        pos: first row/column of the slice, 0 <= pos <= dim - r.

    Raises:
        TypeError: if ``base`` is not an ``nn.Linear`` (convert GPT-2 ``Conv1D`` / gather
            quantised or partitioned weights first).
        ValueError: on ``r`` or ``pos`` out of range.
    """

    def __init__(self, base: nn.Linear, r: int, orient: Orient = "row", pos: int = 0) -> None:
        super().__init__()
        if not isinstance(base, nn.Linear) or type(base) is not nn.Linear:
            raise TypeError(
                f"SliceFine targets plain torch.nn.Linear layers, got {type(base).__name__}; "
                "convert Conv1D / quantised / partitioned layers to nn.Linear first"
            )
        self.base = base
        self.base.weight.requires_grad_(False)
        self.r = r
        self.orient: Orient = orient
        self.pos = 0
        self.delta = nn.Parameter(
            torch.zeros(0, dtype=base.weight.dtype, device=base.weight.device)
        )
        self.touched_rows: set[int] = set()
        self.touched_cols: set[int] = set()
        self.move_to(pos, orient)

    @property
    def d_out(self) -> int:
        """Output features of the wrapped layer; engineering, not in the paper."""
        return self.base.out_features

    @property
    def d_in(self) -> int:
        """Input features of the wrapped layer; engineering, not in the paper."""
        return self.base.in_features

    def dim(self, orient: Orient | None = None) -> int:
        """The number of rows (row orientation) or columns (column orientation) of the weight.

        Source: engineering, not in the paper.
        """
        return self.d_out if (orient or self.orient) == "row" else self.d_in

    def slice_index(self) -> tuple[str, int, int]:
        """``(orient, start, stop)`` of the active slice.

        Source: engineering, not in the paper.
        """
        return self.orient, self.pos, self.pos + self.r

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``W₀ x + (M ⊙ U) x`` with the slice's r-wide product added to its output slice
        (paper Figure 1 update; the fused autograd node is our inference).
        """
        start, stop = self.pos, self.pos + self.r
        w, b = self.base.weight, self.base.bias
        if w.requires_grad:  # someone unfroze the base weight: plain autograd keeps it correct
            y = self.base(x)  # [..., d_out]
            if self.orient == "row":
                upd = F.linear(x, self.delta)  # [..., r]
                return torch.cat([y[..., :start], y[..., start:stop] + upd, y[..., stop:]], -1)
            return y + F.linear(x[..., start:stop], self.delta)  # [..., d_out]
        return _SliceLinearFn.apply(x, w, b, self.delta, start, stop, self.orient == "row")

    @torch.no_grad()
    def commit(self) -> None:
        """Folds ``delta`` into the frozen weight and zeroes it (the update is kept).

        Source: our inference (a moved slice keeps its update, paper Figure 1).
        """
        start, stop = self.pos, self.pos + self.r
        if self.orient == "row":
            self.base.weight[start:stop, :] += self.delta
        else:
            self.base.weight[:, start:stop] += self.delta
        self.delta.zero_()

    @torch.no_grad()
    def move_to(self, pos: int, orient: Orient | None = None) -> None:
        """Activates the slice at ``pos`` (and ``orient``); the old ``delta`` must be committed.

        Source: paper Figure 1 (the slice moves); the position rule is our inference.

        When the orientation (hence the shape) is unchanged, the ``delta`` Parameter object is kept
        (only its data is replaced), so optimiser parameter groups that hold it stay valid; on an
        orientation flip a new Parameter replaces it (``reset_slice_optimizer_state`` swaps it in).
        Either way its optimiser state must be reset by the caller.

        Raises:
            ValueError: on a position out of range, or an uncommitted non-zero ``delta``.
        """
        orient = orient or self.orient
        dim = _check_r(self.r, orient, self.d_out, self.d_in)
        if not 0 <= pos <= dim - self.r:
            raise ValueError(f"pos must satisfy 0 <= pos <= {dim - self.r}, got {pos}")
        if self.delta.numel() and self.delta.abs().sum() > 0:
            raise ValueError("commit() the active slice before moving it (delta is non-zero)")
        shape = (self.r, self.d_in) if orient == "row" else (self.d_out, self.r)
        zeros = torch.zeros(shape, dtype=self.base.weight.dtype, device=self.base.weight.device)
        if tuple(self.delta.shape) == shape:
            self.delta.data = zeros  # same Parameter object: optimiser groups stay valid
        else:
            # An orientation flip changes the shape; autograd's grad accumulator is tied to the old
            # shape, so a new Parameter is needed (SliceFineModel.switch swaps it into optimisers).
            self.delta = nn.Parameter(zeros)
        self.orient, self.pos = orient, pos
        touched = self.touched_rows if orient == "row" else self.touched_cols
        touched.update(range(pos, pos + self.r))

    @torch.no_grad()
    def effective_weight(self) -> torch.Tensor:
        """W₀ + M ⊙ U: the weight the layer currently computes with, ``[d_out, d_in]``.

        Source: the paper's slice update ``W = W₀ + M ⊙ U`` (abstract and Figure 1).
        """
        w = self.base.weight.clone()
        start, stop = self.pos, self.pos + self.r
        if self.orient == "row":
            w[start:stop, :] += self.delta
        else:
            w[:, start:stop] += self.delta
        return w

    def extra_repr(self) -> str:
        """Module summary for ``print(model)``; engineering, not in the paper."""
        return f"r={self.r}, orient={self.orient}, pos={self.pos}, d_in={self.d_in}, d_out={self.d_out}"
