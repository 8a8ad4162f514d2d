"""The Geo-RL group reward and its configuration.

``GeoRLGroupReward`` turns the N sampled descriptions of one image into per-description rewards:
embed (``phi``), score grounding (``q``), build the quality-weighted L-ensemble, and return the
closed-form leave-one-out gains plus the group log-volume. :func:`score_groups` does the same for
pre-computed embeddings of many groups at once (used by the trainer after the cross-process
gather), and :func:`regroup_by_prompt` restores groups whose members arrive interleaved.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch
from torch import Tensor

from methods.georl.config import GeoRLConfig
from methods.georl.dpp import l_ensemble, log_volume, loo_advantages, loo_gains
from methods.georl.embed import TextEmbedder
from methods.georl.grounding import repetition_rate

logger = logging.getLogger(__name__)

__all__ = [
    "GeoRLConfig",
    "GeoRLGroupReward",
    "regroup_by_prompt",
    "score_groups",
]  # GeoRLConfig: re-exported from config


def score_groups(emb: Tensor, quality: Tensor, cfg: GeoRLConfig) -> dict[str, Tensor]:
    """Geo-RL rewards of ``B`` groups from their embeddings and qualities.

    The abstract's closed-form leave-one-out marginal reward of a DPP volume over the sampled
    descriptions; kernel, log-det and advantage forms are our inference (:mod:`methods.georl.dpp`).

    Args:
        emb: ``[B, N, d]`` embeddings (re-normalised inside).
        quality: ``[B, N]`` grounding quality (floored at ``cfg.q_min``).
        cfg: Reward configuration.

    Returns:
        ``r`` ``[B, N]`` LOO gains, ``advantages`` ``[B, N]`` (``advantage_mode`` applied, plus
        ``grounding_weight * q``), ``logvol`` ``[B]``, ``q`` ``[B, N]`` (floored) and
        ``cos_mean`` ``[B]`` (mean off-diagonal cosine).
    """
    if emb.dim() != 3 or quality.shape != emb.shape[:2]:
        raise ValueError(
            f"emb must be [B, N, d] and quality [B, N], got {tuple(emb.shape)} and "
            f"{tuple(quality.shape)}"
        )
    q = torch.nan_to_num(quality.double(), nan=cfg.q_min).clamp(min=cfg.q_min)
    L = l_ensemble(emb, q, gamma=cfg.gamma, jitter=cfg.jitter, q_min=cfg.q_min)  # [B, N, N]
    r = loo_gains(L)  # [B, N]
    adv = loo_advantages(r, cfg.advantage_mode) + cfg.grounding_weight * q
    phi = torch.nn.functional.normalize(emb.double(), dim=-1)
    cos = phi @ phi.transpose(-1, -2)  # [B, N, N]
    n = emb.shape[1]
    cos_mean = (cos.sum((-1, -2)) - cos.diagonal(dim1=-2, dim2=-1).sum(-1)) / (n * (n - 1))
    return {"r": r, "advantages": adv, "logvol": log_volume(L), "q": q, "cos_mean": cos_mean}


def regroup_by_prompt(prompt_ids: Sequence[Hashable], n: int) -> Tensor:
    """Indices ``[B, N]`` that gather a flat, possibly interleaved list into prompt groups.

    Source: engineering (TRL gather layout), not in the paper.

    Bookkeeping of ours (docs/methods/georl.md, Deviations: "Trainer grouping").

    Members keep their relative order; a prompt that occurs ``k * n`` times (the same prompt drawn
    twice) forms ``k`` consecutive groups. Groups are ordered by first appearance.

    Raises:
        ValueError: if some prompt does not have a multiple of ``n`` members (wrong
            ``num_generations`` / batch arithmetic).
    """
    buckets: dict[Hashable, list[int]] = {}
    for i, pid in enumerate(prompt_ids):
        buckets.setdefault(pid, []).append(i)
    bad = {k: len(v) for k, v in buckets.items() if len(v) % n}
    if bad:
        raise ValueError(
            f"every prompt must have a multiple of n={n} completions after the gather; got "
            f"counts {bad} (check num_generations and the batch arithmetic)"
        )
    rows = [v[j : j + n] for v in buckets.values() for j in range(0, len(v), n)]
    return torch.tensor(rows, dtype=torch.long).view(-1, n)


class GeoRLGroupReward:
    """Per-description Geo-RL reward for one group of ``N`` texts.

    Embeds the group, grades its grounding and scores it with :func:`score_groups` (the
    abstract's LOO reward; the empty/repetitive-text guards are ours, docs/methods/georl.md,
    Deviations).

    Args:
        embedder: Text embedder (unit-norm rows; empty texts -> a fixed ``EMPTY`` vector).
        grounding: ``grounding(texts, context) -> Tensor[N]`` quality in (0, 1] (for real images
            ``context`` is the image; for the toy, the true facts).
        cfg: Reward configuration.
    """

    def __init__(
        self,
        embedder: TextEmbedder,
        grounding: Callable[[list[str], Any], Tensor],
        cfg: GeoRLConfig | None = None,
    ) -> None:
        self.embedder, self.grounding = embedder, grounding
        self.cfg = cfg or GeoRLConfig()
        self.n_guarded = 0  # captions forced to q_min by the empty/repetition guards

    def __call__(self, texts: Sequence[str], context: Any) -> dict[str, Any]:
        """Returns ``{"r": [N], "advantages": [N], "logvol": float, "q": [N], "cos_mean": float}``."""
        texts = list(texts)
        if len(texts) < 2:
            raise ValueError(f"texts must hold N >= 2 descriptions, got {len(texts)}")
        emb = self.embedder.encode(texts)  # [N, d]
        q = torch.as_tensor(self.grounding(texts, context), dtype=torch.float64).reshape(-1)
        if q.shape[0] != len(texts):
            raise ValueError(f"grounding returned {q.shape[0]} values for {len(texts)} texts")
        if (q > 1 + 1e-9).any():
            raise ValueError(f"grounding quality must lie in (0, 1], got max {q.max().item():.4g}")
        guard = torch.tensor(
            [not t.strip() or repetition_rate(t) > self.cfg.repetition_threshold for t in texts]
        )
        self.n_guarded += int(guard.sum())
        q = torch.where(guard, torch.full_like(q, self.cfg.q_min), q)
        out = score_groups(emb[None], q[None], self.cfg)
        return {
            "r": out["r"][0],
            "advantages": out["advantages"][0],
            "logvol": out["logvol"][0].item(),
            "q": out["q"][0],
            "cos_mean": out["cos_mean"][0].item(),
        }
