"""MaxRL — Maximum Likelihood Reinforcement Learning (Tajwar, Zeng et al., ICML 2026, arXiv:2602.02710).

Idea in one line: with binary rewards, divide the group-centred reward by the group's mean reward
(its pass rate) instead of its standard deviation; the resulting policy gradient is an unbiased
estimate of the gradient of the log pass rate truncated at order N−1 (maximum likelihood as N → ∞).
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from .advantages import (
        ADVANTAGE_ESTIMATORS,
        check_binary_rewards,
        differential_smoothing_advantages,
        grouped,
        grpo_advantages,
        maxrl_advantages,
        pkpo_advantages,
        reinforce_advantages,
        rloo_advantages,
        self_advantages,
    )
    from .classification import ClassificationToyConfig, make_gaussian_classes, train_classifier
    from .eval import majority_vote, pass_at_k, tts_efficiency
    from .theory import (
        K0_POLICIES,
        effective_order,
        exact_expected_gradient,
        truncated_objective,
        weight_fn,
    )
    from .trainer import MaxRLConfig, MaxRLTrainer, truncated_at_max_length

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "K0_POLICIES",
    "ClassificationToyConfig",
    "MaxRLConfig",
    "MaxRLTrainer",
    "check_binary_rewards",
    "differential_smoothing_advantages",
    "effective_order",
    "exact_expected_gradient",
    "grouped",
    "grpo_advantages",
    "majority_vote",
    "make_gaussian_classes",
    "maxrl_advantages",
    "pass_at_k",
    "pkpo_advantages",
    "reinforce_advantages",
    "rloo_advantages",
    "self_advantages",
    "train_classifier",
    "truncated_at_max_length",
    "truncated_objective",
    "tts_efficiency",
    "weight_fn",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
