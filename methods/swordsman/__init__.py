"""Swordsman: Entropy-Driven Adaptive Block Partition for Efficient Diffusion Language Models.

Zhang et al., ICML 2026, arXiv:2602.04399. Training-free semi-autoregressive decoding for masked-diffusion
LMs (LLaDA, Dream): each block ends where the model's predictive entropy jumps between adjacent masked
positions (so blocks follow constituents), and inside a block the parallel-unmasking threshold falls as the
block's remaining entropy drops relative to its start.
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from methods.swordsman.adapters import (
        DLMAdapter,
        DreamAdapter,
        HFDiffusionAdapter,
        HFMaskedLMAdapter,
        LLaDAAdapter,
    )
    from methods.swordsman.alignment import boundary_alignment
    from methods.swordsman.config import SwordsmanConfig
    from methods.swordsman.decoder import (
        DecodeResult,
        fixed_block_generate,
        swordsman_generate,
        vanilla_generate,
    )
    from methods.swordsman.partition import next_block_length
    from methods.swordsman.threshold import SCHEDULES, dynamic_threshold
    from methods.swordsman.toy_world import GrammarPosteriorLM, PhraseGrammar, tiny_mdm, train_mdm
    from methods.swordsman.uncertainty import token_entropy, uncertainty
    from methods.swordsman.unmask import select_transfer

__all__ = [
    "SCHEDULES",
    "DLMAdapter",
    "DecodeResult",
    "DreamAdapter",
    "GrammarPosteriorLM",
    "HFDiffusionAdapter",
    "HFMaskedLMAdapter",
    "LLaDAAdapter",
    "PhraseGrammar",
    "SwordsmanConfig",
    "boundary_alignment",
    "dynamic_threshold",
    "fixed_block_generate",
    "next_block_length",
    "select_transfer",
    "swordsman_generate",
    "tiny_mdm",
    "token_entropy",
    "train_mdm",
    "uncertainty",
    "vanilla_generate",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
