"""Theory checks of the winning-slice hypothesis (SliceFine §2, Lemma 2.1;
the checks themselves are our inference from the definitions).

- ``spectral_balance``: Lemma 2.1's claim that row (or column) groups of a pretrained weight have
  about the same mean eigenvalue of W_g W_gᵀ (= ‖W_g‖²_F / rows) and similar normalised decay.
- ``restricted_grad_ratio``: the slice's share of gradient energy per entry, relative to the whole
  matrix's (1 = a fair share, 0 = a dead slice).
- ``local_ticket_test``: the fraction of random slices on which one restricted SGD step lowers the
  loss (the empirical "local winning" rate).
- ``task_energy``: our proxy for "high task energy" (no formula was recovered): the share of the
  centred one-hot targets' energy in the span of the top-k singular directions of the features.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Literal

import numpy as np
import torch
from torch import nn


def spectral_balance(
    weight: torch.Tensor, k: int = 12, axis: Literal["row", "column"] = "row"
) -> dict[str, float]:
    """Energy and spectrum spread across ``k`` equal row (or column) groups of ``weight``.

    Source: Lemma 2.1 of the paper (spectral balance, as quoted by summaries); these two
    statistics are our inference.

    For each group g: e_g = ‖W_g‖²_F / rows_g and the eigenvalues of W_g W_gᵀ sorted descending and
    divided by the largest.

    Returns:
        ``{"cv_energy": std(e)/mean(e), "max_profile_gap": max_{g,g',i} |s_g[i] − s_g'[i]|}``.

    Raises:
        ValueError: if ``weight`` is not 2-D or ``k`` does not fit the chosen axis.
    """
    if weight.ndim != 2:
        raise ValueError(f"weight must be 2-D, got shape {tuple(weight.shape)}")
    if axis not in ("row", "column"):
        raise ValueError(f"axis must be 'row' or 'column', got {axis!r}")
    w = weight.detach().double()
    w = w if axis == "row" else w.T
    if not 2 <= k <= w.shape[0]:
        raise ValueError(f"k must satisfy 2 <= k <= {w.shape[0]}, got {k}")
    groups = torch.tensor_split(w, k, dim=0)
    energy = torch.stack([(g**2).sum() / g.shape[0] for g in groups])
    n_eig = min(g.shape[0] for g in groups)
    profiles = []
    for g in groups:
        s = torch.linalg.eigvalsh(g @ g.T).flip(0)[:n_eig]  # descending
        profiles.append(s / s[0].clamp_min(1e-30))
    prof = torch.stack(profiles)  # [k, n_eig]
    gap = (prof[:, None, :] - prof[None, :, :]).abs().max()
    return {
        "cv_energy": float(energy.std(unbiased=False) / energy.mean()),
        "max_profile_gap": float(gap),
    }


def restricted_grad_ratio(grad: torch.Tensor, mask: torch.Tensor) -> float:
    """ρ = (‖M ⊙ G‖²_F / |M|) / (‖G‖²_F / numel(G)).

    Source: our inference from the paper's local winning slice (restricted gradient ``M ⊙ ∇_W
    L``, via summaries).

    Raises:
        ValueError: on a shape mismatch or an empty mask.
    """
    if grad.shape != mask.shape:
        raise ValueError(f"grad and mask shapes differ: {tuple(grad.shape)} vs {tuple(mask.shape)}")
    m = mask.bool()
    if not m.any():
        raise ValueError("mask selects no entry")
    g2 = grad.detach().double() ** 2
    return float((g2[m].sum() / m.sum()) / (g2.sum() / g2.numel()).clamp_min(1e-300))


def local_ticket_test(
    linear: nn.Linear,
    loss_fn: Callable[[], torch.Tensor],
    r: int = 4,
    n_slices: int = 20,
    lr: float = 1e-2,
    orient: Literal["row", "column"] = "row",
    seed: int = 0,
) -> dict[str, float]:
    """One restricted gradient step on each of ``n_slices`` random slices of ``linear``.

    Source: our inference, an empirical check of the paper's local winning-slice definition
    (via summaries).

    Args:
        linear: the layer whose weight is probed (restored after each trial).
        loss_fn: recomputes the loss of a fixed batch through the model containing ``linear``.
        r, orient: slice width and orientation.
        n_slices: number of random slices tried.
        lr: the step size of the restricted step W ← W − lr · (M ⊙ ∇_W L).
        seed: seeds the slice positions.

    Returns:
        ``{"win_rate": fraction with ΔL < 0, "mean_delta_loss": mean ΔL}``.
    """
    w = linear.weight
    dim = w.shape[0] if orient == "row" else w.shape[1]
    if not 1 <= r <= dim:
        raise ValueError(f"r must satisfy 1 <= r <= {dim}, got {r}")
    rng = random.Random(seed)
    was = w.requires_grad
    w.requires_grad_(True)
    base_loss = loss_fn()
    (grad,) = torch.autograd.grad(base_loss, [w])
    deltas = []
    with torch.no_grad():
        for _ in range(n_slices):
            p = rng.randint(0, dim - r)
            mask = torch.zeros_like(w, dtype=torch.bool)
            if orient == "row":
                mask[p : p + r, :] = True
            else:
                mask[:, p : p + r] = True
            w0 = w.detach().clone()
            w -= lr * grad * mask
            deltas.append(float(loss_fn() - base_loss))
            w.copy_(w0)  # bit-exact restore ((w - s) + s can differ from w in the last ulp)
    w.requires_grad_(was)
    d = np.asarray(deltas)
    return {"win_rate": float((d < 0).mean()), "mean_delta_loss": float(d.mean())}


def task_energy(features: torch.Tensor, labels: torch.Tensor, k: int = 32) -> float:
    """τ_k = ‖Π_k Y‖²_F / ‖Y‖²_F for centred one-hot targets Y (our proxy; the paper's
    formula was not recovered).

    Source: our inference (the paper names high task energy; its formula was not
    recovered).

    Π_k projects onto the top-k left singular vectors of the centred features ``[n, p]``.

    Raises:
        ValueError: on mismatched lengths or ``k`` out of range.
    """
    if features.ndim != 2 or labels.ndim != 1 or features.shape[0] != labels.shape[0]:
        raise ValueError("features must be [n, p] and labels [n] with the same n")
    x = features.detach().double()
    x = x - x.mean(0)
    n_cls = int(labels.max()) + 1
    y = torch.nn.functional.one_hot(labels.long(), n_cls).double()
    y = y - y.mean(0)
    if not 1 <= k <= min(x.shape):
        raise ValueError(f"k must satisfy 1 <= k <= {min(x.shape)}, got {k}")
    u, _, _ = torch.linalg.svd(x, full_matrices=False)
    uk = u[:, :k]  # [n, k]
    proj = uk @ (uk.T @ y)
    return float((proj**2).sum() / (y**2).sum().clamp_min(1e-300))
