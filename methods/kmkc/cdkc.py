"""Cognition-Driven Knowledge Calibration (CDKC) pieces (our proposal: the paper's objective is
not public; its method figure names a bidirectional, entropy-based calibration).

The paper's calibration objective is not public. We use GRPO plus a signed,
region-weighted entropy term: minimising λ[g, s]·s·H̄ lowers the entropy of correct rollouts
(s = +1) and raises it on wrong ones (s = −1); confused questions only move rollouts that lie
outside a band [h_lo, h_hi] ("stabilise"). Shapes: b rollouts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .metrics import qa_correct
from .regions import REGIONS


def correctness_reward(
    prompts: Sequence, completions: Sequence, golds: Sequence[list[str]], **kwargs
) -> list[float]:
    """TRL reward function: 1.0 if the completion cover-matches a gold alias, else 0.0 (E5).

    Source: our inference (the paper's GRPO reward is implied, not given; cover match as FlashRAG).

    Completions may be strings or chat message lists (the last message's content is scored).
    """
    if len(completions) != len(golds):
        raise ValueError(f"golds: expected {len(completions)} gold lists, got {len(golds)}")
    out = []
    for c, g in zip(completions, golds, strict=True):
        text = c[-1]["content"] if isinstance(c, list) else c
        out.append(1.0 if qa_correct(text, list(g)) else 0.0)
    return out


@dataclass
class CalibrationWeights:
    """λ[g, s] of Eq. (E7) as (correct, wrong) per region, and the confused-region band."""

    mastered: tuple[float, float] = (1e-2, 1e-3)
    confused: tuple[float, float] = (3e-3, 3e-3)
    missing: tuple[float, float] = (1e-3, 1e-2)
    band: tuple[float, float] | None = None  # (h_lo, h_hi); None disables the confused gate
    region_adaptive: bool = True
    shared: tuple[float, float] = field(default=(3e-3, 3e-3))  # used when region_adaptive=False


def cdkc_rollout_weights(
    entropy: torch.Tensor,
    correct: torch.Tensor,
    regions: Sequence[str],
    weights: CalibrationWeights | None = None,
) -> torch.Tensor:
    """The per-rollout factors λ[g_i, s_i]·s_i of (E7), ``[b]``, with the confused-region gate.

    Source: our inference (the official method figure ``assets/method.png`` names region-adaptive
    bidirectional entropy; the formula is not public).

    s = +1 (correct) / −1 (wrong). For the confused region with a band (h_lo, h_hi): a correct
    rollout gets a factor only if H̄ > h_hi and a wrong one only if H̄ < h_lo, else 0.

    Args:
        entropy: ``[b]`` mean token signals H̄ (read, detached, for the band gate only).
        correct: ``[b]`` bool.
        regions: b region labels.
        weights: λ table and band.

    Returns:
        ``[b]`` factors on ``entropy``'s device and dtype (no gradient).
    """
    w = weights or CalibrationWeights()
    if entropy.dim() != 1 or correct.shape != entropy.shape or len(regions) != entropy.numel():
        raise ValueError(
            f"entropy, correct and regions must all have length b; got {tuple(entropy.shape)}, "
            f"{tuple(correct.shape)}, {len(regions)}"
        )
    bad = sorted({r for r in regions if r not in REGIONS})
    if bad and w.region_adaptive:
        raise ValueError(f"regions: unknown labels {bad}; valid: {REGIONS}")
    correct = correct.bool()
    factors = []
    for r, c, h in zip(regions, correct.tolist(), entropy.detach().tolist(), strict=True):
        pair = getattr(w, r) if w.region_adaptive else w.shared
        lam_i = pair[0] if c else pair[1]
        if w.region_adaptive and r == "confused" and w.band is not None:
            lo, hi = w.band
            if (c and h <= hi) or (not c and h >= lo):
                lam_i = 0.0
        factors.append(lam_i if c else -lam_i)
    # device/dtype from the input (issue 29: built on the CPU before, failing on GPU batches)
    return torch.tensor(factors, dtype=entropy.dtype, device=entropy.device)  # [b]


def cdkc_entropy_loss(
    entropy: torch.Tensor,
    correct: torch.Tensor,
    regions: Sequence[str],
    weights: CalibrationWeights | None = None,
) -> torch.Tensor:
    """L_ent = (1/b) Σ_i λ[g_i, s_i]·s_i·H̄_i with s = +1 (correct) / −1 (wrong) (Eq. E7).

    The sequence-level form; :class:`methods.kmkc.trainer.CDKCTrainer` builds the per-token form
    ``λ_i s_i H_{i,t}`` and reduces it with :func:`common.rl.reduce_token_loss` (``grpo`` rule),
    which equals this. See :func:`cdkc_rollout_weights` for λ and the confused-region band gate.

    Args:
        entropy: ``[b]`` mean token entropies H̄ (differentiable).
        correct: ``[b]`` bool.
        regions: b region labels.
        weights: λ table and band.

    Returns:
        Scalar loss to add to the GRPO loss (Eq. E8).
    """
    factors = cdkc_rollout_weights(entropy, correct, regions, weights)
    return (factors * entropy).mean()
