"""EpiCache: Episodic KV Cache Management for Long-Term Conversation (Kim et al., arXiv 2509.17396, ICML 2026).

Idea: prefill a long conversation block by block, evicting back to a fixed budget after each block
(bounded peak memory); build one compressed cache per topical *episode* (k-means over segment
embeddings), each scored by attention from that episode's most central segments; at question time load
the cache of the episode closest to the question. Layer budgets follow key-state sensitivity.
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from .budget import allocate_layer_budgets, block_attention_mask, profile_layer_sensitivity
    from .cache import EpiCache, epicache_forward
    from .data import QA, Conversation, load_locomo, load_longmemeval, load_realtalk
    from .decode import greedy_decode
    from .episodes import Episodes, build_patched_prompt, cluster_segments, match_episode
    from .metrics import llm_judge_score, normalize_answer, token_f1
    from .pipeline import (
        AnswerRecord,
        EpiCacheConfig,
        EpiCacheSession,
        baseline_prefix_ids,
        scoring_prompt_ids,
    )
    from .prefill import blockwise_prefill, peak_tokens_per_head, select_keep
    from .scoring import SCORERS, keydiff_scores, patched_prompt_scores, streaming_scores
    from .segmentation import Segment, Utterance, segment_utterances

__all__ = [
    "QA",
    "SCORERS",
    "AnswerRecord",
    "Conversation",
    "EpiCache",
    "EpiCacheConfig",
    "EpiCacheSession",
    "Episodes",
    "Segment",
    "Utterance",
    "allocate_layer_budgets",
    "baseline_prefix_ids",
    "block_attention_mask",
    "blockwise_prefill",
    "build_patched_prompt",
    "cluster_segments",
    "epicache_forward",
    "greedy_decode",
    "keydiff_scores",
    "llm_judge_score",
    "load_locomo",
    "load_longmemeval",
    "load_realtalk",
    "match_episode",
    "normalize_answer",
    "patched_prompt_scores",
    "peak_tokens_per_head",
    "profile_layer_sensitivity",
    "scoring_prompt_ids",
    "segment_utterances",
    "select_keep",
    "streaming_scores",
    "token_f1",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
