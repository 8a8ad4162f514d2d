"""Know More, Know Clearer (KMKC): meta-cognitive knowledge augmentation (arXiv 2602.12996, ICML 2026).

Profile each question from K sampled answers, let the model place it in a mastered / confused / missing
region, expand knowledge with region-specific data (CGKE), then calibrate confidence against
correctness (CDKC). The calibration objective here is our proposal; the paper's is not public.
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from .augment import (
        AugmentConfig,
        augment_boundary_expansion,
        augment_epistemic_foundation,
        augment_structural_disambiguation,
        build_cgke_dataset,
    )
    from .cdkc import (
        CalibrationWeights,
        cdkc_entropy_loss,
        cdkc_rollout_weights,
        correctness_reward,
    )
    from .decay_law import DecayFit, bin_by_uncertainty, fit_structural_decay
    from .metrics import (
        expected_calibration_error,
        normalize_answer,
        qa_correct,
        self_knowledge_metrics,
    )
    from .profile import BehaviorProfile, SampleOut, build_profile
    from .regions import (
        REGIONS,
        RegionConfig,
        assign_regions,
        parse_region_reply,
        rule_region,
        self_evaluate_region,
    )
    from .signals import mean_token_entropy, sequence_confidence, sequence_nll
    from .trainer import CDKCConfig, CDKCTrainer

__all__ = [
    "REGIONS",
    "AugmentConfig",
    "BehaviorProfile",
    "CDKCConfig",
    "CDKCTrainer",
    "CalibrationWeights",
    "DecayFit",
    "RegionConfig",
    "SampleOut",
    "assign_regions",
    "augment_boundary_expansion",
    "augment_epistemic_foundation",
    "augment_structural_disambiguation",
    "bin_by_uncertainty",
    "build_cgke_dataset",
    "build_profile",
    "cdkc_entropy_loss",
    "cdkc_rollout_weights",
    "correctness_reward",
    "expected_calibration_error",
    "fit_structural_decay",
    "mean_token_entropy",
    "normalize_answer",
    "parse_region_reply",
    "qa_correct",
    "rule_region",
    "self_evaluate_region",
    "self_knowledge_metrics",
    "sequence_confidence",
    "sequence_nll",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
