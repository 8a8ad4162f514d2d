"""Detector training (official ``salo/train.py``): BCE, AdamW, cosine LR, clipping."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import torch
from torch import nn

from common.train_loop import train_steps
from methods.salo.operator import SALO

logger = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    """Optimisation settings (repo CLI defaults)."""

    epochs: int = 5
    batch_size: int = 16
    lr: float = 1e-3
    weight_decay: float = 1e-2
    min_lr: float = 1e-5  # cosine floor
    grad_clip: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError(
                f"epochs and batch_size must be >= 1, got {self.epochs}, {self.batch_size}"
            )
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


@dataclass
class SALOConfig:
    """Operator sizes (repo: 64 filters, kernels (3, {2, 3, 5}), dropout 0.5, max pooling)."""

    n_filters: int = 64
    layer_kernel: int = 3
    token_kernels: list[int] = field(default_factory=lambda: [2, 3, 5])
    dropout: float = 0.5
    pooling: str = "max"


def _check_data(x: torch.Tensor, mask: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if x.ndim != 4:
        raise ValueError(f"x must be [n, L, T, D], got {tuple(x.shape)}")
    if mask.shape != (x.shape[0], x.shape[2]):
        raise ValueError(f"mask must be [n, T], got {tuple(mask.shape)}")
    y = torch.as_tensor(y).float().flatten()
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"labels has {y.shape[0]} rows, x has {x.shape[0]}")
    if not ((y == 1).any() and (y == 0).any()):
        raise ValueError("labels must contain both classes (0 benign, 1 harmful)")
    return y


def train_detector(
    detector: nn.Module,
    x: torch.Tensor,
    mask: torch.Tensor,
    labels: torch.Tensor,
    cfg: TrainConfig | None = None,
) -> nn.Module:
    """Trains any ``detector(x, mask) -> logits[B]`` with BCE (labels 1 = harmful).

    The recipe of official ``salo/train.py::fit`` (AdamW, cosine LR, clip 1.0); the cropping is ours.

    Batches are cropped to their longest valid row, so padding never reaches the operator beyond what
    the batch needs. Returns the detector in eval mode.

    Raises:
        ValueError: on mismatched shapes or single-class labels.
    """
    cfg = cfg or TrainConfig()
    y = _check_data(x, mask, labels)
    gen = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)  # dropout
    n = x.shape[0]
    steps = cfg.epochs * math.ceil(n / cfg.batch_size)
    opt = torch.optim.AdamW(detector.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps, eta_min=cfg.min_lr)
    loss_fn = nn.BCEWithLogitsLoss()
    bn = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in detector.modules())
    # batch starts of an epoch; a 1-sample batch is skipped under BatchNorm (needs > 1 sample)
    starts = [
        b0 for b0 in range(0, n, cfg.batch_size) if not (bn and min(cfg.batch_size, n - b0) < 2)
    ]
    ep = {"perm": None, "idx": None, "total": 0.0}

    def batch_loss(step: int) -> torch.Tensor:
        if step % len(starts) == 0:  # a new epoch: a new order
            ep["perm"], ep["total"] = torch.randperm(n, generator=gen), 0.0
        b0 = starts[step % len(starts)]
        idx = ep["idx"] = ep["perm"][b0 : b0 + cfg.batch_size]
        m = mask[idx]
        t = int(m.any(0).nonzero().max()) + 1  # crop to the batch's longest row
        return loss_fn(detector(x[idx, :, :t].float(), m[:, :t]), y[idx])

    def log_epoch(step: int, loss: float) -> None:
        ep["total"] += loss * ep["idx"].numel()
        if (step + 1) % len(starts) == 0:
            logger.info("epoch %d loss %.4f", step // len(starts), ep["total"] / n)

    kw = {"optimizer": opt, "scheduler": sched, "grad_clip": cfg.grad_clip, "callback": log_epoch}
    train_steps(detector, batch_loss, cfg.epochs * len(starts), desc="salo detector", **kw)
    return detector.eval()


def train_salo(
    x: torch.Tensor,
    mask: torch.Tensor,
    labels: torch.Tensor,
    operator: SALOConfig | None = None,
    cfg: TrainConfig | None = None,
) -> SALO:
    """Builds a :class:`SALO` for ``x``'s hidden size and trains it on clean prompts (official ``train_probe.py``).

    Args:
        x: volumes ``[n, L_w, T, D]`` (zero at padding), e.g. from ``collect_volumes``.
        mask: ``[n, T]`` token mask.
        labels: ``[n]``, 1 = harmful, 0 = benign.
        operator: operator sizes; cfg: optimisation settings.
    """
    operator = operator or SALOConfig()
    cfg = cfg or TrainConfig()
    torch.manual_seed(cfg.seed)  # weight init
    model = SALO(
        x.shape[-1],
        n_filters=operator.n_filters,
        layer_kernel=operator.layer_kernel,
        token_kernels=tuple(operator.token_kernels),
        dropout=operator.dropout,
        pooling=operator.pooling,
    )
    return train_detector(model, x, mask, labels, cfg)


@torch.no_grad()
def score_detector(
    detector: nn.Module, x: torch.Tensor, mask: torch.Tensor, batch_size: int = 256
) -> torch.Tensor:
    """Probabilities ``σ(detector(x, mask))`` ``[n]`` in eval mode, in batches.

    As official ``salo/train.py::predict`` (sigmoid of the logit), batched.
    """
    detector.eval()
    out = []
    for b0 in range(0, x.shape[0], batch_size):
        m = mask[b0 : b0 + batch_size]
        t = int(m.any(0).nonzero().max()) + 1
        out.append(torch.sigmoid(detector(x[b0 : b0 + batch_size, :, :t].float(), m[:, :t])))
    return torch.cat(out)
