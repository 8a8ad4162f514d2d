"""AutoQRA: Joint Optimization of Mixed-Precision Quantization and Low-rank Adapters (arXiv 2602.22268).

Searches a per-block bit-width q_ℓ and LoRA rank r_ℓ jointly under an analytic memory budget: Stage 1 is
an importance-warm-started, multi-fidelity NSGA-II evolution with budget repair and a surrogate that picks
which candidates get the expensive evaluation; Stage 2 is trust-region Bayesian optimisation on the Pareto
set for one accuracy/memory preference α.
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from .apply import build_quantized_lora_model, fake_quantize, held_bytes, quantize_groups
    from .evaluators import EvalResult, Evaluator, ProxyEvaluator
    from .importance import Importance, compute_adapt_sensitivity, compute_quant_sensitivity
    from .memory import PROJECTIONS, MemoryModel
    from .operators import (
        all_atomic_neighbors,
        atomic_distance,
        atomic_neighbors,
        cap_lowbit,
        crossover_uniform,
        jitter,
        mutate_coupled,
        mutate_importance_guided,
        repair_to_budget,
        warm_start,
    )
    from .paper import PaperEvaluator
    from .paper_data import load_alpaca, load_winogrande, winogrande_accuracy
    from .search import (
        AutoQRA,
        EvolutionConfig,
        MultiFidelityEvolution,
        ParetoResult,
        Record,
        Selection,
        constrained_fronts,
        crowding_distance,
        environmental_selection,
        evolutionary_search,
        expected_improvement,
        hypervolume_2d,
        trust_region_bo,
    )
    from .space import BudgetInfeasibleError, QRConfig, SearchSpace
    from .surrogate import FidelitySurrogate, surrogate_features

__all__ = [
    "PROJECTIONS",
    "AutoQRA",
    "BudgetInfeasibleError",
    "EvalResult",
    "Evaluator",
    "EvolutionConfig",
    "FidelitySurrogate",
    "Importance",
    "MemoryModel",
    "MultiFidelityEvolution",
    "PaperEvaluator",
    "ParetoResult",
    "ProxyEvaluator",
    "QRConfig",
    "Record",
    "SearchSpace",
    "Selection",
    "all_atomic_neighbors",
    "atomic_distance",
    "atomic_neighbors",
    "build_quantized_lora_model",
    "cap_lowbit",
    "compute_adapt_sensitivity",
    "compute_quant_sensitivity",
    "constrained_fronts",
    "crossover_uniform",
    "crowding_distance",
    "environmental_selection",
    "evolutionary_search",
    "expected_improvement",
    "fake_quantize",
    "held_bytes",
    "hypervolume_2d",
    "jitter",
    "load_alpaca",
    "load_winogrande",
    "mutate_coupled",
    "mutate_importance_guided",
    "quantize_groups",
    "repair_to_budget",
    "surrogate_features",
    "trust_region_bo",
    "warm_start",
    "winogrande_accuracy",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
