"""Toy T1: "ImageNet in miniature", where exact maximum likelihood is available.

Mirrors the ImageNet experiment of arXiv:2602.02710 (§6.1, App. D): a classifier is trained only
from binary feedback on labels it samples itself (reward 1{ŷ = y}), and compared with cross-entropy,
which is exact maximum likelihood here. Synthetic data: C class means μ_c ~ N(0, I_D), inputs
x = μ_c + σ·N(0, I_D). Policy: a zero-initialised linear softmax head W ∈ R^{D×C}, so the initial
pass rate is exactly 1/C. Surrogate per input: −(1/N) Σ_j A_j log π(y_j | x) with the group
advantages of :mod:`methods.maxrl.advantages` (App. D, P4). Plain SGD with one shared learning rate.

The gradient of the surrogate with respect to the logits is computed in closed form:
∂/∂z [−(1/N) Σ_j A_j log π(y_j)] = −(1/N) Σ_j A_j (e_{y_j} − π) (no autograd needed).

Shapes: B batch, N samples per input, C classes, D input dimension.
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor

from .advantages import grpo_advantages, maxrl_advantages, reinforce_advantages
from .config import ClassificationToyConfig

logger = logging.getLogger(__name__)

__all__ = ["ClassificationToyConfig", "make_gaussian_classes", "train_classifier"]

_SAMPLED = {
    "maxrl": lambda r: maxrl_advantages(r, eps=1e-6),
    "grpo": lambda r: grpo_advantages(r, eps=1e-6, ddof=0),  # ImageNet code: population std
    "reinforce": reinforce_advantages,
}
METHODS = ("ce", *_SAMPLED)


def make_gaussian_classes(cfg: ClassificationToyConfig, seed: int = 0):
    """Generate (x_train [n,D], y_train [n], x_val, y_val) from class means μ_c ~ N(0, I).

    Source: our choice, a CPU stand-in for the paper's ImageNet experiment (App. D).
    """
    g = torch.Generator().manual_seed(seed)
    means = torch.randn(cfg.num_classes, cfg.dim, generator=g)  # [C, D]

    def draw(n):
        y = torch.randint(cfg.num_classes, (n,), generator=g)
        x = means[y] + cfg.noise * torch.randn(n, cfg.dim, generator=g)  # [n, D]
        return x, y

    return (*draw(cfg.n_train), *draw(cfg.n_val))


def _logit_grad(method: str, probs: Tensor, y: Tensor, n: int, g: torch.Generator) -> Tensor:
    """Per-example gradient of the method's loss w.r.t. the logits, ``[B, C]``."""
    if method == "ce":
        return probs - torch.nn.functional.one_hot(y, probs.size(1)).to(probs)
    samples = torch.multinomial(probs, n, replacement=True, generator=g)  # [B, N]
    rewards = (samples == y[:, None]).to(probs)  # [B, N]
    adv = _SAMPLED[method](rewards)  # [B, N]
    counts = torch.zeros_like(probs).scatter_add_(1, samples, adv)  # [B, C]: Σ_j A_j e_{y_j}
    return -(counts - adv.sum(1, keepdim=True) * probs) / n  # [B, C]


@torch.no_grad()
def _evaluate(w: Tensor, x: Tensor, y: Tensor, ks: list[int]) -> dict[str, float]:
    probs = torch.softmax(x @ w, dim=1)  # [n, C]
    p = probs.gather(1, y[:, None]).squeeze(1).double()  # [n] exact pass rate
    out = {f"pass@{k}": float((-torch.expm1(k * torch.log1p(-p))).mean()) for k in ks}
    out["top1_acc"] = float((probs.argmax(1) == y).float().mean())
    out["mean_log_p"] = float(torch.log(p.clamp_min(1e-300)).mean())
    return out


def train_classifier(
    method: str,
    n_rollouts: int,
    cfg: ClassificationToyConfig,
    data: tuple[Tensor, Tensor, Tensor, Tensor],
    seed: int = 0,
) -> dict:
    """Train the linear policy with one method; return final metrics, curve and grad correlation.

    Source: paper App. D (exact-likelihood classification check), scaled down; the linear policy is
    our choice.

    Args:
        method: ``"ce"`` (exact ML), ``"maxrl"``, ``"grpo"`` or ``"reinforce"``.
        n_rollouts: N samples per input (ignored for ``"ce"``).
        cfg: Toy settings.
        data: Output of :func:`make_gaussian_classes`.
        seed: Seeds batch order and sampling.

    Returns:
        ``{"final": {metric: value}, "curve": [(step, pass@1), ...], "grad_corr": float}``.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method != "ce" and n_rollouts < 2:
        raise ValueError(f"n_rollouts must be >= 2 for sampled methods, got {n_rollouts}")
    x_tr, y_tr, x_va, y_va = data
    g = torch.Generator().manual_seed(seed)
    w = torch.zeros(cfg.dim, cfg.num_classes)  # [D, C]
    curve = [(0, _evaluate(w, x_va, y_va, [1])["pass@1"])]
    grad_corr = float("nan")
    for step in range(1, cfg.steps + 1):
        idx = torch.randint(x_tr.size(0), (cfg.batch_size,), generator=g)
        x, y = x_tr[idx], y_tr[idx]  # [B, D], [B]
        probs = torch.softmax(x @ w, dim=1)  # [B, C]
        dz = _logit_grad(method, probs, y, n_rollouts, g)  # [B, C]
        w -= cfg.lr * (x.T @ dz) / cfg.batch_size  # [D, C]
        if step == min(cfg.grad_corr_step, cfg.steps):
            grad_corr = _grad_norm_correlation(method, w, x_va, y_va, n_rollouts, cfg, g)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            curve.append((step, _evaluate(w, x_va, y_va, [1])["pass@1"]))
    return {"final": _evaluate(w, x_va, y_va, cfg.ks), "curve": curve, "grad_corr": grad_corr}


def _grad_norm_correlation(method, w, x, y, n, cfg, g) -> float:
    """Pearson correlation of per-example gradient norm ``‖x‖·‖∂z‖`` with the pass rate (Fig. 6)."""
    x, y = x[: cfg.grad_corr_examples], y[: cfg.grad_corr_examples]
    probs = torch.softmax(x @ w, dim=1)  # [n, C]
    dz = _logit_grad(method, probs, y, n, g)  # [n, C]
    norms = x.norm(dim=1) * dz.norm(dim=1)  # outer-product norm, [n]
    p = probs.gather(1, y[:, None]).squeeze(1)  # [n]
    return float(torch.corrcoef(torch.stack([norms, p]))[0, 1])
