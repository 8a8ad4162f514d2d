"""Configuration of Swordsman decoding.

One dataclass holds every knob of the decoder: the entropy-driven partition (§3.2), the dynamic
parallel-unmasking threshold (§3.3) and the cache mode (§3.4). The Fast-dLLM fixed-block baseline is the
degenerate setting ``min_block_len == max_block_len`` with ``tau_min == tau_max``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

logger = logging.getLogger(__name__)

METRICS = ("entropy", "confidence", "varentropy", "gap", "gini", "topk_entropy")
CACHE_MODES = ("none", "prefix", "dual")
CONFIDENCE_DTYPES = ("float64", "float32")


@dataclass
class SwordsmanConfig:
    """Hyper-parameters of Swordsman decoding.

    Partition:
        min_block_len: smallest block length ``m_min`` (repo default 1).
        max_block_len: largest block length ``M_max`` (repo default 32).
        min_jump: smallest entropy increase ``δ`` that counts as a boundary (repo default 0.01).
        metric: uncertainty used for the partition; ``"entropy"`` in the paper.

    Dynamic threshold:
        tau_max: threshold at the start of a block (``base_threshold`` = 0.9).
        tau_min: floor the threshold decays to (0.7 LLaDA, 0.0 Dream in the repo).
        gamma: exponent/shape of the schedule (effective 1.0 on LLaDA, 0.5 on Dream; see docs).
        schedule: shape ``g`` of the decay, ``"power_decay"`` (``r**gamma``) by default.
        pivot: ``"initial"`` (block's step-0 masked entropy) or a number (Dream-cached parity: 4.0).
        threshold_rule: ``"official"`` (γ > 1 rescales the ratio for every schedule but
            ``power_decay``; ``exp``/``log`` use ``k = max(γ, 0.1)``) or ``"unscaled"`` (earlier rule).
        confidence_dtype: ``"float64"`` (official LLaDA ``get_transfer_index``) or ``"float32"``;
            decides near-ties of the commit confidences.

    Decoding:
        gen_length: number of generated positions ``G`` (512 in the paper).
        cache: ``"none"``, ``"prefix"`` or ``"dual"`` KV cache.
        temperature: 0 = greedy (the evaluated setting).
        dream_first_token_greedy: commit a block's first token from the full pass (Dream cached path).
    """

    min_block_len: int = 1
    max_block_len: int = 32
    min_jump: float = 0.01
    metric: str = "entropy"
    tau_max: float = 0.9
    tau_min: float = 0.7
    gamma: float = 1.0
    schedule: str = "power_decay"
    pivot: str | float = "initial"
    threshold_rule: str = "official"
    confidence_dtype: str = "float64"
    cache: str = "none"
    temperature: float = 0.0
    gen_length: int = 512
    dream_first_token_greedy: bool = False

    def __post_init__(self) -> None:
        from methods.swordsman.threshold import SCHEDULES, THRESHOLD_RULES

        if int(self.min_block_len) < 1:
            raise ValueError(f"min_block_len must be >= 1, got {self.min_block_len}")
        if self.max_block_len < self.min_block_len:
            raise ValueError(
                f"min_block_len ({self.min_block_len}) must be <= max_block_len "
                f"({self.max_block_len})"
            )
        if self.min_jump < 0:
            raise ValueError(f"min_jump must be >= 0, got {self.min_jump}")
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {self.metric!r}")
        if not 0.0 < self.tau_max <= 1.0:
            raise ValueError(f"tau_max must be in (0, 1], got {self.tau_max}")
        if not 0.0 <= self.tau_min <= 1.0:
            raise ValueError(f"tau_min must be in [0, 1], got {self.tau_min}")
        if self.tau_min > self.tau_max:
            raise ValueError(f"tau_min ({self.tau_min}) must be <= tau_max ({self.tau_max})")
        if self.gamma <= 0:
            raise ValueError(f"gamma must be > 0, got {self.gamma}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {sorted(SCHEDULES)}, got {self.schedule!r}")
        if self.threshold_rule not in THRESHOLD_RULES:
            raise ValueError(
                f"threshold_rule must be one of {THRESHOLD_RULES}, got {self.threshold_rule!r}"
            )
        if self.confidence_dtype not in CONFIDENCE_DTYPES:
            raise ValueError(
                f"confidence_dtype must be one of {CONFIDENCE_DTYPES}, got {self.confidence_dtype!r}"
            )
        if self.pivot != "initial":
            try:
                pivot = float(self.pivot)
            except (TypeError, ValueError):
                raise ValueError(
                    f"pivot must be 'initial' or a positive number, got {self.pivot!r}"
                ) from None
            if pivot <= 0:
                raise ValueError(f"pivot must be positive, got {self.pivot}")
        if self.cache not in CACHE_MODES:
            raise ValueError(f"cache must be one of {CACHE_MODES}, got {self.cache!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.temperature > 0:
            logger.warning(
                "temperature=%s > 0: the paper evaluates greedy decoding (temperature 0)",
                self.temperature,
            )
        if int(self.gen_length) <= 0:
            raise ValueError(f"gen_length must be > 0, got {self.gen_length}")
        if self.max_block_len > self.gen_length:
            logger.warning(
                "max_block_len=%d > gen_length=%d: blocks are clipped to the sequence end",
                self.max_block_len,
                self.gen_length,
            )
