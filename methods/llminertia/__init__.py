"""LLMInertia: adaptive counter-inertial reasoning for evidence faithfulness (ICML 2026).

Extract the entities of an input, probe the model for the entities it associates with each, and
where a probed pair occurs in the input, inject a reminder that the two are not necessarily
related before the model answers. Also: the co-occurrence induction data and metrics.
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from .core import (
        InertiaRecord,
        LLMInertiaPipeline,
        answer_plain,
        build_note,
        extract_entities,
        match_pairs,
        probe_associations,
    )
    from .induction_data import (
        COOCCURRENCE_TEMPLATES,
        MEDICAL_PAIRS,
        NEGATIVE_TEMPLATES,
        SYNTHETIC_PAIRS,
        fill_template,
        make_cooccurrence_corpus,
        make_negative_evidence_tests,
    )
    from .induction_train import InductionConfig, continued_pretrain
    from .metrics import Pred, induction_metrics
    from .parse import parse_entity_list, parse_pairs, parse_yes_no
    from .prompts import GENERIC, MEDICAL, PROMPT_SETS, SYNTHETIC, PromptSet

__all__ = [
    "COOCCURRENCE_TEMPLATES",
    "GENERIC",
    "MEDICAL",
    "MEDICAL_PAIRS",
    "NEGATIVE_TEMPLATES",
    "PROMPT_SETS",
    "SYNTHETIC",
    "SYNTHETIC_PAIRS",
    "InductionConfig",
    "InertiaRecord",
    "LLMInertiaPipeline",
    "Pred",
    "PromptSet",
    "answer_plain",
    "build_note",
    "continued_pretrain",
    "extract_entities",
    "fill_template",
    "induction_metrics",
    "make_cooccurrence_corpus",
    "make_negative_evidence_tests",
    "match_pairs",
    "parse_entity_list",
    "parse_pairs",
    "parse_yes_no",
    "probe_associations",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
