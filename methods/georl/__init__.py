"""Geo-RL: geometric-coverage reinforcement learning for exhaustive visual description.

ICML 2026 (title, authors and arXiv id not found; reconstructed from the abstract). Idea: sample N
descriptions of one image, embed them, and reward the group for the log-volume of the DPP
L-ensemble they span (quality-weighted Gram determinant); each description is credited with its
closed-form leave-one-out marginal ``-log (L^{-1})_ii``, an unbiased per-sample policy-gradient signal.
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from methods.georl.config import GeoRLConfig, GeoRLRunConfig
    from methods.georl.dpp import (
        l_ensemble,
        log_volume,
        loo_advantages,
        loo_gains,
        loo_gains_bruteforce,
    )
    from methods.georl.embed import (
        BagOfFactsEmbedder,
        MiniLMEmbedder,
        TextEmbedder,
        split_sentences,
    )
    from methods.georl.grounding import (
        ClipSentenceGrounding,
        FactPrecision,
        KeywordGrounding,
        repetition_rate,
    )
    from methods.georl.reward import GeoRLGroupReward, regroup_by_prompt, score_groups
    from methods.georl.toy import FactSlotToy, ToyConfig, synthetic_scenes
    from methods.georl.trainer import GeoRLGRPOConfig, GeoRLTrainer, completion_text

__all__ = [
    "BagOfFactsEmbedder",
    "ClipSentenceGrounding",
    "FactPrecision",
    "FactSlotToy",
    "GeoRLConfig",
    "GeoRLGRPOConfig",
    "GeoRLGroupReward",
    "GeoRLRunConfig",
    "GeoRLTrainer",
    "KeywordGrounding",
    "MiniLMEmbedder",
    "TextEmbedder",
    "ToyConfig",
    "completion_text",
    "l_ensemble",
    "log_volume",
    "loo_advantages",
    "loo_gains",
    "loo_gains_bruteforce",
    "regroup_by_prompt",
    "repetition_rate",
    "score_groups",
    "split_sentences",
    "synthetic_scenes",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
