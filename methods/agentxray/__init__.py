"""AgentXRay: White-Boxing Agentic Systems via Workflow Reconstruction (arXiv 2602.05353, ICML 2026).

Reconstructs an explicit linear workflow of agents and tools that reproduces a black-box agentic
system's outputs, by MCTS over chains whose expand-vs-descend choice is set by Red-Black pruning.
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from .costs import CostMeter, UsageOpenAIChat, charge_llm_call, count_tokens
    from .data import HUB_ID, item_to_pair, load_dataset, load_split, resolve_data_root
    from .executor import WorkflowExecutor, compiler_tool, empty_detect, syntax_check
    from .mcts import (
        AgentXRaySearch,
        MCTSConfig,
        Node,
        SearchResult,
        extract_workflow,
        load_workflow,
    )
    from .mcts import AgentXRaySearch as RedBlackMCTS  # our API name
    from .primitives import (
        LLMProfileGenerator,
        Primitive,
        PrimitiveSpace,
        ProfileGenerator,
        StaticProfileGenerator,
        generator_prompt,
        parse_profile,
        render_profile,
    )
    from .resume import SearchCheckpoint
    from .similarity import Similarity, codes_to_content, parse_project, sfe, tfidf_cosine

__all__ = [
    "HUB_ID",
    "AgentXRaySearch",
    "CostMeter",
    "LLMProfileGenerator",
    "MCTSConfig",
    "Node",
    "Primitive",
    "PrimitiveSpace",
    "ProfileGenerator",
    "RedBlackMCTS",
    "SearchCheckpoint",
    "SearchResult",
    "Similarity",
    "StaticProfileGenerator",
    "UsageOpenAIChat",
    "WorkflowExecutor",
    "charge_llm_call",
    "codes_to_content",
    "compiler_tool",
    "count_tokens",
    "empty_detect",
    "extract_workflow",
    "generator_prompt",
    "item_to_pair",
    "load_dataset",
    "load_split",
    "load_workflow",
    "parse_profile",
    "parse_project",
    "render_profile",
    "resolve_data_root",
    "sfe",
    "syntax_check",
    "tfidf_cosine",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
