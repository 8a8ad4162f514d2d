"""Configuration of Swordsman: the decoder (official code defaults) and the run-config schema.

``SwordsmanConfig`` holds every knob of the decoder: the entropy-driven partition (official
``determine_next_block_length``), the dynamic parallel-unmasking threshold
(``get_dynamic_threshold_by_entropy``) and the cache mode. The Fast-dLLM fixed-block baseline is the
degenerate setting ``min_block_len == max_block_len`` with ``tau_min == tau_max``.
``SwordsmanRunConfig`` is the ``method=swordsman`` schema (toy and paper stages). Light on purpose
(stdlib and :mod:`common.config` only): the CLI loads this file before any heavy import.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import ClassVar

from common.config import MethodConfig

logger = logging.getLogger(__name__)

METRICS = ("entropy", "confidence", "varentropy", "gap", "gini", "topk_entropy")
CACHE_MODES = ("none", "prefix", "dual")
CONFIDENCE_DTYPES = ("float64", "float32")
# names of methods.swordsman.threshold.SCHEDULES (official names + the earlier aliases)
SCHEDULE_NAMES = (
    "power_decay", "linear", "square", "cubic", "sqrt", "sigmoid", "step", "sine", "elliptical",
    "exp", "log", "cosine", "circular", "exponential", "logarithmic",
)  # fmt: skip
THRESHOLD_RULES = ("official", "unscaled")
FAMILIES = ("auto", "llada", "dream", "masked_lm")
ENGINES = ("lm_eval", "local")


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
        if self.schedule not in SCHEDULE_NAMES:
            raise ValueError(
                f"schedule must be one of {sorted(SCHEDULE_NAMES)}, got {self.schedule!r}"
            )
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


@dataclass
class ToyConfig:
    """Sizes of the CPU toy."""

    gen_length: int = 32
    max_phrases: int = 6
    typo_prob: float = 0.15
    hidden_size: int = 64
    num_layers: int = 2
    train_steps: int = 800
    batch_size: int = 32
    lr: float = 3e-3
    weighting: str = (
        "elbo"  # "elbo" = LLaDA's 1/t-weighted loss; "mean" = mean CE over masked tokens
    )
    n_eval: int = 100
    block_len: int = 8  # fixed-block baseline size = M_max of the adaptive partition
    stress_tau_min: float = 0.3
    n_oracle: int = 100  # prompts decoded with the exact grammar posterior (0 = skip)


@dataclass
class EvalConfig:
    """The paper stage: accuracy and TPS / latency / NFE of ``model`` (the paper's Table 2, as
    reproduced in the authors' rebuttal.md Table 5).

    Attributes:
        engine: ``lm_eval`` (lm-evaluation-harness on ``tasks``, as the official code) or ``local``
            (the ``benchmark`` sets decoded here, 0-shot, last-number match; a CPU-sized check).
        tasks: lm-eval task -> few-shot count (official ``llada/test.sh``: GSM8K 5, MATH 4,
            HumanEval 0, MBPP 3).
        limit: examples per task / set (None = all).
        family: ``auto`` (Dream if the id contains "dream", else LLaDA), ``llada``, ``dream`` or
            ``masked_lm`` (any ``*ForMaskedLM``, e.g. the tiny test model).
        baseline: also run the Fast-dLLM baseline (fixed blocks of ``baseline_block_len``, τ =
            ``baseline_tau``) on the same inputs.
    """

    engine: str = "lm_eval"
    tasks: dict[str, int] = field(
        default_factory=lambda: {"gsm8k": 5, "minerva_math": 4, "humaneval": 0, "mbpp": 3}
    )
    limit: int | None = None
    family: str = "auto"
    baseline: bool = True
    baseline_block_len: int = 32  # official Fast-dLLM comparison
    baseline_tau: float = 0.9

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise ValueError(f"method.eval.engine must be one of {ENGINES}, got {self.engine!r}")
        if self.family not in FAMILIES:
            raise ValueError(f"method.eval.family must be one of {FAMILIES}, got {self.family!r}")


@dataclass
class SwordsmanRunConfig(MethodConfig):
    """``method=swordsman``: the CPU toy (``stage=toy``) and the paper evaluation (``paper``).

    Attributes:
        decoder: the decoder (:class:`SwordsmanConfig`; official LLaDA defaults).
        toy: the toy's sizes.
        eval: the paper stage.
    """

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "tiny masked-diffusion LM on a phrase grammar: fixed vs adaptive blocks, +/- DPU",
        "paper": "accuracy + TPS / latency / NFE of `model` with Swordsman and Fast-dLLM",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("paper",)
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ("masked_diffusion",)
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ("math",)

    name: str = "swordsman"
    stage: str = "toy"
    decoder: SwordsmanConfig = field(default_factory=SwordsmanConfig)
    toy: ToyConfig = field(default_factory=ToyConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def decoder_config(self, **overrides) -> SwordsmanConfig:
        import dataclasses

        return dataclasses.replace(self.decoder, **overrides)
