"""The Trainer configuration of KORE's paper stage (paper Table 6; official ``llava/train/train_v2.py``).

``KoreTrainingConfig`` is ``transformers.TrainingArguments`` plus the one knob KORE adds: the learning
rate of the multimodal projector, which the official LLaVA script trains beside the adapter's ``B``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import TrainingArguments

from common.config import CheckpointingNames


@dataclass
class KoreTrainingConfig(CheckpointingNames, TrainingArguments):
    """HF ``TrainingArguments`` for KORE; ``learning_rate`` is the rate of ``lora_B``."""

    projector_lr: float = field(
        default=2e-5,
        metadata={
            "help": "learning rate of the multimodal projector (official LLaVA script: 2e-5)"
        },
    )
    warmup_fraction: float = field(
        default=0.0,
        metadata={
            "help": "warm-up as a fraction of the training steps (paper Table 6: 0.03 LLaVA, 0.1 "
            "Qwen2.5-VL); when > 0 it is passed to transformers as warmup_steps (a float < 1 is a "
            "ratio there)"
        },
    )

    def __post_init__(self):
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ValueError(f"warmup_fraction must be in [0, 1), got {self.warmup_fraction}")
        if self.warmup_fraction > 0:
            self.warmup_steps = self.warmup_fraction
        super().__post_init__()
