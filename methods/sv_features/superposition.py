"""The feature-observable toy: superposition autoencoder + trained attention head (paper §3.1).

Sparse features ``f`` (each ``0`` w.p. ``1 - p``, else ``U[0, 1]``) are embedded as ``r = W f`` and
reconstructed as ``ReLU(W^T r + b)`` (tied weights, Elhage et al. 2022). An attention head
``Omega = W_Q W_K^T`` scores keys ``s_j = W f^(s_j)`` for query ``r`` and is trained so that
``softmax_j(r^T Omega s_j)`` matches ``softmax_j(f_r^T T f_(s_j))`` for a feature-pair template ``T``.
Loss: ``L_recon + lam * CE(p_target, p_head)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import torch
from torch import nn

from common.metrics import spearman
from common.train_loop import train_steps
from methods.sv_features.alignment import (
    feature_sv_cosines,
    match_pairs_to_ranks,
    orthogonality_gap,
)
from methods.sv_features.config import ToyConfig

logger = logging.getLogger(__name__)


def pair_template(n_features: int, pairs: Sequence[Sequence[float]]) -> torch.Tensor:
    """``T [N, N]`` with ``T[i, j] = weight`` for each ``(i, j, weight)``.

    Source: the paper's feature-pair target (via explainers); the template form is
    our inference.

    Raises:
        ValueError: on empty ``pairs``, out-of-range indices or a zero template.
    """
    if not pairs:
        raise ValueError("pairs must be non-empty (no target pairs)")
    T = torch.zeros(n_features, n_features)
    for p in pairs:
        if len(p) != 3:
            raise ValueError(f"each pair must be (i, j, weight), got {p}")
        i, j, w = int(p[0]), int(p[1]), float(p[2])
        if not (0 <= i < n_features and 0 <= j < n_features):
            raise ValueError(f"pair {(i, j)} out of range for n_features={n_features}")
        T[i, j] = w
    if not T.abs().sum() > 0:
        raise ValueError("the template is all zeros")
    return T


def multi_pair_pairs(n_pairs: int, offset: int, w_max: float, w_min: float) -> list[list[float]]:
    """Pairs ``(i, i + offset)`` with weights linearly decreasing from ``w_max`` to ``w_min``.

    Source: the paper's multi-pair setting (via explainers: ``T[i, i+20]`` linearly decreasing);
    endpoints are our choice.
    """
    if n_pairs < 1:
        raise ValueError(f"n_pairs must be >= 1, got {n_pairs}")
    ws = torch.linspace(w_max, w_min, n_pairs).tolist()
    return [[i, i + offset, w] for i, w in enumerate(ws)]


def sample_features(
    batch: int, n_keys: int, n_features: int, p: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bernoulli-uniform features: ``f_r [B, N]``, ``f_s [B, m, N]``.

    Source: the paper's Bernoulli-uniform features (via explainers), as the precursor
    ``mark/toy_xformer.ipynb``; p = 0.1 is our choice.
    """
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")

    def draw(*shape):
        on = torch.rand(*shape, generator=generator) < p
        return on * torch.rand(*shape, generator=generator)

    return draw(batch, n_features), draw(batch, n_keys, n_features)


class ToyAttentionAutoencoder(nn.Module):
    """Tied-weight autoencoder ``W [D, N], b [N]`` plus one attention head ``W_Q, W_K [D, H]``.

    Source: the paper's toy model (via explainers), as the precursor ``mark/toy_xformer.ipynb``.
    """

    def __init__(self, cfg: ToyConfig) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(cfg.seed)
        D, N, H = cfg.d_model, cfg.n_features, cfg.d_head
        std = (2.0 / (D + N)) ** 0.5  # Xavier normal (repo-toy)
        self.W = nn.Parameter(torch.randn(D, N, generator=g) * std)
        self.b = nn.Parameter(torch.zeros(N))
        s2 = (2.0 / (D + H)) ** 0.5
        self.W_Q = nn.Parameter(torch.randn(D, H, generator=g) * s2)
        self.W_K = nn.Parameter(torch.randn(D, H, generator=g) * s2)
        self.cfg = cfg
        self.register_buffer("importance", cfg.importance_decay ** torch.arange(N).float())

    def omega(self) -> torch.Tensor:
        """``W_Q W_K^T [D, D]``.

        The QK matrix of the toy head, whose SVD Theorem 1 is about (paper via explainers).
        """
        return self.W_Q @ self.W_K.T

    def losses(
        self, f_r: torch.Tensor, f_s: torch.Tensor, T: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """``{"recon", "attn", "total"}`` for queries ``f_r [B, N]``, keys ``f_s [B, m, N]``.

        Source: the paper's toy (via explainers; ``L_recon + λ CE``); the softmax target is
        our inference, the MSE option as ``mark/toy_xformer.ipynb``.
        """
        N = self.W.shape[1]
        if T.shape != (N, N):
            raise ValueError(f"T must have shape {(N, N)}, got {tuple(T.shape)}")
        r = f_r @ self.W.T  # [B, D]
        s = f_s @ self.W.T  # [B, m, D]
        rec = torch.relu(r @ self.W + self.b)
        recon = ((f_r - rec) ** 2 * self.importance).sum(-1).mean()
        if self.cfg.recon_on_keys:
            rec_s = torch.relu(s @ self.W + self.b)
            recon = recon + ((f_s - rec_s) ** 2 * self.importance).sum(-1).mean()
        logit = self.cfg.logit_scale * torch.einsum("bd,de,bme->bm", r, self.omega(), s)
        target = torch.einsum("bn,nk,bmk->bm", f_r, T, f_s)
        if self.cfg.attn_loss == "ce":
            attn = -(torch.softmax(target, -1) * torch.log_softmax(logit, -1)).sum(-1).mean()
            attn = attn + (torch.softmax(target, -1) * torch.log_softmax(target, -1)).sum(-1).mean()
        else:
            attn = ((logit - target) ** 2).mean()
        return {"recon": recon, "attn": attn, "total": recon + self.cfg.lam * attn}


def toy_metrics(model: ToyAttentionAutoencoder) -> dict[str, float]:
    """Alignment of the template pairs with the singular vectors of ``Omega``.

    Source: the paper's toy measurement and Theorem 1's whitened directions (via explainers).
    """
    with torch.no_grad():
        U, S, Vh = torch.linalg.svd(model.omega())
        C_U, C_V = feature_sv_cosines(model.W, U, Vh)
        pairs = [(int(p[0]), int(p[1])) for p in model.cfg.pairs]
        match = match_pairs_to_ranks(C_U, C_V, pairs)
        scores = torch.tensor([m[2] for m in match])
        i0, j0 = pairs[0]
        attended = sorted({i for p in pairs for i in p})
        out = {
            "align_top": float(min(C_U[i0, 0], C_V[j0, 0])),
            "align_matched_median": float(scores.median()),
            "align_matched_mean": float(scores.mean()),
            "sigma_ratio_12": float(S[0] / S[1].clamp_min(1e-12)) if len(S) > 1 else float("inf"),
            "ortho_gap": orthogonality_gap(model.W, attended),
        }
        # Theorem 1's whitened directions Sigma^-1 w_i (Sigma = W W^T): what U, V should align with
        # while the features are still in superposition (non-orthogonal)
        Wt = torch.linalg.pinv(model.W @ model.W.T, hermitian=True) @ model.W
        Cw_U, Cw_V = feature_sv_cosines(Wt, U, Vh)
        w_scores = torch.tensor([m[2] for m in match_pairs_to_ranks(Cw_U, Cw_V, pairs)])
        out["align_whitened_median"] = float(w_scores.median())
        if len(pairs) > 2:
            w = torch.tensor([float(p[2]) for p in model.cfg.pairs])
            ranks = torch.tensor([float(m[1]) for m in match])
            sig = torch.tensor([float(S[m[1]]) if m[1] >= 0 else 0.0 for m in match])
            out["spearman_sigma_weight"] = spearman(sig.numpy(), w.numpy())
            out["spearman_rank_weight"] = -spearman(ranks.numpy(), w.numpy())
        return out


def train_toy(
    cfg: ToyConfig,
    T: torch.Tensor | None = None,
    log_every: int = 100,
    callbacks: Sequence[Callable[[int, ToyAttentionAutoencoder], None]] = (),
) -> tuple[ToyAttentionAutoencoder, list[dict[str, float]]]:
    """Trains the toy with AdamW; deterministic for a fixed ``cfg.seed``.

    Source: the paper's toy training (via explainers), as the precursor ``mark/toy_xformer.ipynb``;
    AdamW settings are our choice.

    Args:
        cfg: the config; ``T`` defaults to ``pair_template(cfg.n_features, cfg.pairs)``.
        T: optional explicit template ``[N, N]``.
        log_every: steps between history entries (losses + :func:`toy_metrics`).
        callbacks: called as ``cb(step, model)`` at each log step.

    Returns:
        ``(model, history)``; history rows hold ``step``, losses and alignment metrics.
    """
    if log_every < 1:
        raise ValueError(f"log_every must be >= 1, got {log_every}")
    if T is None:
        T = pair_template(cfg.n_features, cfg.pairs)
    if T.shape != (cfg.n_features, cfg.n_features):
        raise ValueError(f"T must have shape {(cfg.n_features,) * 2}, got {tuple(T.shape)}")
    if len(cfg.pairs) > cfg.d_head:
        logger.warning("more pairs (%d) than head dims (%d)", len(cfg.pairs), cfg.d_head)
    model = ToyAttentionAutoencoder(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    sched = (
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(cfg.steps, 1))
        if cfg.lr_schedule == "cosine"
        else None
    )
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    history: list[dict[str, float]] = []

    def step_losses(step: int) -> dict[str, torch.Tensor]:
        """The losses of a fresh batch; logs them with the toy metrics on logged steps (before
        that step's update)."""
        f_r, f_s = sample_features(cfg.batch, cfg.n_keys, cfg.n_features, cfg.feature_prob, gen)
        losses = model.losses(f_r, f_s, T)
        if step % log_every == 0 or step == cfg.steps:
            row = {"step": float(step), **{k: float(v.detach()) for k, v in losses.items()}}
            row.update(toy_metrics(model))
            history.append(row)
            for cb in callbacks:
                cb(step, model)
        return losses

    train_steps(
        model,
        lambda step: step_losses(step)["total"],
        cfg.steps,
        optimizer=opt,
        scheduler=sched,
        desc="sv_features train",
    )
    step_losses(cfg.steps)  # the last row: a fresh batch on the trained model, no update
    return model, history
