"""SALO: Tracing the Dynamics of Refusal — Latent Refusal Trajectories for Robust Jailbreak Detection.

Hu, Wang, Lim, Gao, Chen, ICML 2026, arXiv:2605.02958 (official code: Exbilar/SALO). Refusal is built along a
sparse layer × token trajectory upstream of the last token; attacks (GCG suffixes, prefilling) suppress the
terminal signal but not that trajectory. SALO is a small CNN over the hidden-state volume of a window of
middle layers with global max pooling, trained on plain harmful/benign prompts and thresholded at a fixed
false-positive rate on safe calibration prompts (XSTest).
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from methods.salo.baselines import LastTokenProbe, MeanPoolMLP, RepEDirection, refusal_score
    from methods.salo.calibrate import auroc, calibrate_threshold, detection_rate
    from methods.salo.monitor import SALOMonitor
    from methods.salo.operator import SALO, load_detector, save_detector
    from methods.salo.tracing import causal_trace
    from methods.salo.train import (
        SALOConfig,
        TrainConfig,
        score_detector,
        train_detector,
        train_salo,
    )
    from methods.salo.volume import (
        build_chat,
        check_window,
        collect_volumes,
        extract_volume,
        pad_collate,
    )

__all__ = [
    "SALO",
    "LastTokenProbe",
    "MeanPoolMLP",
    "RepEDirection",
    "SALOConfig",
    "SALOMonitor",
    "TrainConfig",
    "auroc",
    "build_chat",
    "calibrate_threshold",
    "causal_trace",
    "check_window",
    "collect_volumes",
    "detection_rate",
    "extract_volume",
    "load_detector",
    "pad_collate",
    "refusal_score",
    "save_detector",
    "score_detector",
    "train_detector",
    "train_salo",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
