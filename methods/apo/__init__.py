"""APO — Anchored Policy Optimization (arXiv 2602.05717, ICML 2026).

Anchored Policy Optimization: Mitigating Exploration Collapse via Support-Constrained
Rectification (Wang et al.). Idea: on negative-advantage tokens, replace the PPO ratio by
``λ·r_t − β·r_anchor,t`` so that pushing a wrong token down also pulls probability back onto the
reference model's Top-K tokens (the "safe manifold"), instead of shape-matching the reference with a
KL penalty; positive-advantage tokens keep the plain GRPO update.
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from methods.apo.loss import (
        ANCHOR_FORMS,
        ANCHOR_RATIO_TO,
        CLIP_MODES,
        aggregate_tokens,
        anchor_set_mask,
        apo_per_token_loss,
        apo_policy_loss,
        gather_policy_logps,
        grpo_clipped_loss,
        kl_on_wrong_penalty,
        virtual_anchor_ratio,
    )
    from methods.apo.metrics import safe_manifold_mass, topk_coverage
    from methods.apo.topk import reference_topk, topk_from_logits
    from methods.apo.trainer import APOConfig, APOTrainer

__all__ = [
    "ANCHOR_FORMS",
    "ANCHOR_RATIO_TO",
    "CLIP_MODES",
    "APOConfig",
    "APOTrainer",
    "aggregate_tokens",
    "anchor_set_mask",
    "apo_per_token_loss",
    "apo_policy_loss",
    "gather_policy_logps",
    "grpo_clipped_loss",
    "kl_on_wrong_penalty",
    "reference_topk",
    "safe_manifold_mass",
    "topk_coverage",
    "topk_from_logits",
    "virtual_anchor_ratio",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
