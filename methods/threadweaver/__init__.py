"""ThreadWeaver: Adaptive Threading for Efficient Parallel Reasoning in Language Models.

Lian et al., ICML 2026, arXiv:2512.07843. A reasoning model forks its chain of thought into
independent ``<Thread>`` s and joins them with plain-text tags; a client-side orchestrator turns each
fork into concurrent ordinary completion requests, training packs every request of a trajectory into
one trie with an ancestor-only mask and depth positions, and P-GRPO rewards a shorter critical path.
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from .config import ThreadWeaverConfig, ThreadWeaverRunConfig
    from .data_pipeline import PipelineReport, convert_trace
    from .engines import CompletionEngine, EngineCompletion, HFGenerateEngine, VLLMEngine
    from .format import (
        CONCLUSION_TAGS,
        JOIN_SUFFIX,
        TAGS,
        FormatError,
        FormatReport,
        ParallelBlock,
        Trajectory,
        parse,
        serialize,
        thread_header,
        validate,
    )
    from .metrics import Stats, parallel_stats, speedup_report
    from .orchestrator import OrchestratorConfig, ParallelOrchestrator, Rollout, tag_ids
    from .pgrpo import extract_last_boxed, group_advantages, is_correct, pgrpo_loss, pgrpo_reward
    from .pgrpo_trainer import OrchestratedRollout, PGRPOConfig, PGRPOReward, PGRPOTrainer
    from .sft import TrieSFTConfig, TrieSFTTrainer, packed_dataset, trie_sft_config
    from .special_tokens import add_threadweaver_tokens
    from .trie import (
        Packed,
        TrieCollator,
        Unit,
        ancestor_mask,
        build_packed,
        extract_units,
        flex_block_mask,
        packed_forward,
        parent_gather_loss,
        response_pieces,
    )

__all__ = [
    "CONCLUSION_TAGS",
    "JOIN_SUFFIX",
    "TAGS",
    "CompletionEngine",
    "EngineCompletion",
    "FormatError",
    "FormatReport",
    "HFGenerateEngine",
    "OrchestratedRollout",
    "OrchestratorConfig",
    "PGRPOConfig",
    "PGRPOReward",
    "PGRPOTrainer",
    "Packed",
    "ParallelBlock",
    "ParallelOrchestrator",
    "PipelineReport",
    "Rollout",
    "Stats",
    "ThreadWeaverConfig",
    "ThreadWeaverRunConfig",
    "Trajectory",
    "TrieCollator",
    "TrieSFTConfig",
    "TrieSFTTrainer",
    "Unit",
    "VLLMEngine",
    "add_threadweaver_tokens",
    "ancestor_mask",
    "build_packed",
    "convert_trace",
    "extract_last_boxed",
    "extract_units",
    "flex_block_mask",
    "group_advantages",
    "is_correct",
    "packed_dataset",
    "packed_forward",
    "parallel_stats",
    "parent_gather_loss",
    "parse",
    "pgrpo_loss",
    "pgrpo_reward",
    "response_pieces",
    "serialize",
    "speedup_report",
    "tag_ids",
    "thread_header",
    "trie_sft_config",
    "validate",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
