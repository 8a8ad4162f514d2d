"""KORE: knowledge injection into large multimodal models via knowledge-oriented controls.

Jiang et al., ICML 2026 (arXiv 2510.19316). KORE-Augmentation expands each new knowledge item into a
dialogue plus recognition / caption / VQA tasks; KORE-Constraint initialises LoRA adapters inside the
approximate null space of old-knowledge input covariances, freezes ``A`` and trains ``B`` only, so
updates barely touch the outputs on old-knowledge inputs.
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from methods.kore.augment import (
        AugmentationParseError,
        ImageRetriever,
        KnowledgeItem,
        LocalImageRetriever,
        build_caption,
        build_dialogue,
        build_knowledge_tree,
        build_recognition,
        build_vqa,
        parse_quadruplets,
        select_images,
    )
    from methods.kore.covariance import collect_input_covariances, default_llm_linear_filter
    from methods.kore.metrics import (
        avg_score,
        cover_exact_match,
        hars,
        knowledge_adaptation,
        token_f1,
    )
    from methods.kore.model import apply_kore, effective_weights, export_standard_lora
    from methods.kore.nullspace import (
        KoreFactors,
        check_covariance,
        kore_decompose,
        retention_bound,
        smallest_eigvecs,
    )

__all__ = [
    "AugmentationParseError",
    "ImageRetriever",
    "KnowledgeItem",
    "KoreFactors",
    "LocalImageRetriever",
    "apply_kore",
    "avg_score",
    "build_caption",
    "build_dialogue",
    "build_knowledge_tree",
    "build_recognition",
    "build_vqa",
    "check_covariance",
    "collect_input_covariances",
    "cover_exact_match",
    "default_llm_linear_filter",
    "effective_weights",
    "export_standard_lora",
    "hars",
    "knowledge_adaptation",
    "kore_decompose",
    "parse_quadruplets",
    "retention_bound",
    "select_images",
    "smallest_eigvecs",
    "token_f1",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
