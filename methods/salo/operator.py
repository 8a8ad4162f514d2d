"""The SALO operator (paper §4.1, Table 2 caption; official code ``salo/model.py``).

A multi-branch CNN over a hidden-state volume ``[B, L_w, T, D]`` with the hidden dimension as the
convolution channel axis: each branch is ``ReLU(BN(Conv2d_{D→F,(k_L,k_T),'same'}))`` and is followed by
a *sparsity-aware global max-pool* over (layer, token), so one strong local "needle" decides the score.
``pooling="mean"`` is the §5.4 ablation, a masked mean over the valid (layer, token) cells (dividing by the
real length, not the padded one as in the official ``salo/model.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


class _SameConv2d(nn.Conv2d):
    """``nn.Conv2d(..., padding="same")`` with the zero padding applied explicitly.

    Same output as torch's ``"same"`` (for an even kernel the extra zero goes right/bottom), without
    the warning torch raises for an even kernel, which copies the padded input anyway.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: tuple[int, int]):
        super().__init__(in_channels, out_channels, kernel_size, padding=0)
        kh, kw = self.kernel_size
        self._pad = ((kw - 1) // 2, kw - 1 - (kw - 1) // 2, (kh - 1) // 2, kh - 1 - (kh - 1) // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, self._pad))


class SALO(nn.Module):
    """Sparsity-aware latent operator: conv branches + masked global pooling + linear head.

    Paper §4.1 and Table 2 caption; layout and sizes of official ``salo/model.py::hiddenDetector``.

    Args:
        hidden_dim: the LLM hidden size ``D`` (conv input channels).
        n_filters: filters ``F`` per branch (repo: 64).
        layer_kernel: kernel extent over layers (repo: 3).
        token_kernels: kernel extents over tokens, one branch each (repo: (2, 3, 5)).
        dropout: dropout before the head (repo: 0.5).
        pooling: ``"max"`` (SALO) or ``"mean"`` (ablation).

    Raises:
        ValueError: on non-positive sizes, an empty ``token_kernels`` or an unknown ``pooling``.
    """

    def __init__(
        self,
        hidden_dim: int,
        n_filters: int = 64,
        layer_kernel: int = 3,
        token_kernels: Sequence[int] = (2, 3, 5),
        dropout: float = 0.5,
        pooling: str = "max",
    ) -> None:
        super().__init__()
        if hidden_dim <= 0 or n_filters <= 0 or layer_kernel <= 0:
            raise ValueError(
                f"hidden_dim, n_filters, layer_kernel must be > 0, got {hidden_dim}, {n_filters}, "
                f"{layer_kernel}"
            )
        if len(token_kernels) == 0 or any(k <= 0 for k in token_kernels):
            raise ValueError(f"token_kernels must be positive ints, got {token_kernels!r}")
        if pooling not in ("max", "mean"):
            raise ValueError(f"pooling must be 'max' or 'mean', got {pooling!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout}")
        self.config = dict(
            hidden_dim=hidden_dim,
            n_filters=n_filters,
            layer_kernel=layer_kernel,
            token_kernels=tuple(token_kernels),
            dropout=dropout,
            pooling=pooling,
        )
        self.hidden_dim, self.layer_kernel, self.pooling = hidden_dim, layer_kernel, pooling
        self.branches = nn.ModuleList(
            nn.Sequential(
                _SameConv2d(hidden_dim, n_filters, (layer_kernel, k)),
                nn.BatchNorm2d(n_filters),
                nn.ReLU(),
            )
            for k in token_kernels
        )
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(n_filters * len(token_kernels), 1)

    def _check(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if x.ndim != 4:
            raise ValueError(f"x must be [B, L, T, D], got shape {tuple(x.shape)}")
        b, n_l, t, d = x.shape
        if d != self.hidden_dim:
            raise ValueError(f"x hidden size {d} != probe hidden_dim {self.hidden_dim}")
        if n_l < self.layer_kernel:
            raise ValueError(f"layer window {n_l} is shorter than layer_kernel {self.layer_kernel}")
        if t < 1:
            raise ValueError("x must have at least one token")
        if mask is None:
            return torch.ones(b, t, dtype=torch.bool, device=x.device)
        if mask.shape != (b, t):
            raise ValueError(f"mask must be [B, T] = {(b, t)}, got {tuple(mask.shape)}")
        mask = mask.bool()
        if not mask.any(dim=1).all():
            raise ValueError("every mask row needs at least one valid token (all-zero row)")
        return mask

    def features(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Branch activation maps ``[B, 3F, L, T]`` and the validated mask (padding zero-filled)."""
        mask = self._check(x, mask)
        x = x.float() * mask[:, None, :, None]  # zero-fill padded positions: [B, L, T, D]
        h = x.permute(0, 3, 1, 2)  # [B, D, L, T]: hidden dim is the channel axis
        return torch.cat([br(h) for br in self.branches], dim=1), mask  # [B, 3F, L, T]

    def pool(self, a: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Masked global pooling over (layer, token): ``[B, C, L, T] -> [B, C]``."""
        m = mask[:, None, None, :]  # [B, 1, 1, T]
        if self.pooling == "max":
            return a.masked_fill(~m, float("-inf")).amax(dim=(2, 3))
        n_valid = mask.sum(dim=1).to(a) * a.shape[2]  # real cells per row: T_i * L
        return (a * m).sum(dim=(2, 3)) / n_valid[:, None]

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits ``[B]`` for volumes ``x`` ``[B, L, T, D]`` with token mask ``[B, T]``.

        Raises:
            ValueError: on a wrong shape, hidden size or an all-zero mask row.
        """
        a, mask = self.features(x, mask)
        return self.head(self.dropout(self.pool(a, mask))).squeeze(-1)

    @torch.no_grad()
    def argmax_sites(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """(layer, token) of each channel's pooled maximum: ``LongTensor[B, C, 2]`` (for ROI plots)."""
        a, mask = self.features(x, mask)
        a = a.masked_fill(~mask[:, None, None, :], float("-inf"))
        flat = a.flatten(2).argmax(dim=2)  # [B, C]
        t = a.shape[3]
        return torch.stack([flat // t, flat % t], dim=-1)


def save_detector(
    detector: nn.Module, path: str | Path, meta: dict[str, Any] | None = None
) -> Path:
    """Saves a detector's weights, constructor config and metadata (model id, window, hidden size).

    Engineering (the official code saves a bare ``state_dict``); the metadata is checked on load.

    ``detector`` must carry a ``config`` dict of constructor kwargs (SALO and the probes do).
    """
    if not hasattr(detector, "config"):
        raise TypeError(f"detector must carry a .config dict, got {type(detector).__name__}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "class": type(detector).__name__,
        "config": dict(detector.config),
        "meta": dict(meta or {}),
        "state_dict": detector.state_dict(),
    }
    torch.save(payload, path)
    return path


def load_detector(path: str | Path, expect: dict[str, Any] | None = None) -> tuple[nn.Module, dict]:
    """Loads a detector saved by :func:`save_detector` and checks its metadata (engineering).

    Args:
        path: the saved file.
        expect: metadata that must match (e.g. ``{"model": id, "window": [10, 20]}``).

    Returns:
        ``(detector in eval mode, meta)``.

    Raises:
        ValueError: if a key of ``expect`` differs from the stored metadata.
    """
    from methods.salo.baselines import LastTokenProbe, MeanPoolMLP

    payload = torch.load(Path(path), map_location="cpu", weights_only=False)
    meta = payload["meta"]
    for k, v in (expect or {}).items():
        stored = meta.get(k)
        if (list(stored) if isinstance(stored, (tuple, list)) else stored) != (
            list(v) if isinstance(v, (tuple, list)) else v
        ):
            raise ValueError(f"detector metadata {k}={stored!r} does not match expected {v!r}")
    classes = {"SALO": SALO, "LastTokenProbe": LastTokenProbe, "MeanPoolMLP": MeanPoolMLP}
    if payload["class"] not in classes:
        raise ValueError(f"unknown detector class {payload['class']!r}")
    det = classes[payload["class"]](**payload["config"])
    det.load_state_dict(payload["state_dict"])
    return det.eval(), meta
