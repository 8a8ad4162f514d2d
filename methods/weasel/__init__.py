"""Weasel: importance–diversity trajectory-step selection for web-agent SFT.

Paper: *Weasel: Out-of-Domain Generalization for Web Agents via Importance-Diversity Data
Selection* (Pesaran Zadeh, Choi, Lù, Reddy, Kim; ICML 2026; arXiv 2605.20291).

Idea: per trajectory, keep a fixed number of steps that maximise goal relevance plus pairwise
state/response diversity (greedy max-sum diversification), and prune each kept accessibility tree to
a window around the gold action's target element before fine-tuning.
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from .data import (
        StepRecord,
        Trajectory,
        build_subset,
        parse_agentlab_prompt,
        parse_records,
        segment_by_goal,
    )
    from .pipeline import WeaselConfig, WeaselSelector
    from .pruning import (
        PruneStats,
        extract_target_bid,
        prune_axtree_centered,
        prune_axtree_prefix,
        prune_record,
    )
    from .reasoning import SynthesisConfig, SynthStats, synthesize_rationales
    from .scoring import (
        JaccardSimilarity,
        TextSimilarity,
        TokenMatchSimilarity,
        distance_matrix,
        importance,
    )
    from .select import (
        brute_force_select,
        compute_budget,
        greedy_select,
        greedy_select_many,
        greedy_select_naive,
        objective,
    )

__all__ = [
    "JaccardSimilarity",
    "PruneStats",
    "StepRecord",
    "SynthStats",
    "SynthesisConfig",
    "TextSimilarity",
    "TokenMatchSimilarity",
    "Trajectory",
    "WeaselConfig",
    "WeaselSelector",
    "brute_force_select",
    "build_subset",
    "compute_budget",
    "distance_matrix",
    "extract_target_bid",
    "greedy_select",
    "greedy_select_many",
    "greedy_select_naive",
    "importance",
    "objective",
    "parse_agentlab_prompt",
    "parse_records",
    "prune_axtree_centered",
    "prune_axtree_prefix",
    "prune_record",
    "segment_by_goal",
    "synthesize_rationales",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
