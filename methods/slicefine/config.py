"""SliceFine's run-config schema (``method=slicefine``): the CPU toy and the two paper stages.

Light on purpose (stdlib and :mod:`common.config` only): the CLI loads it to type-check a composed
config before any heavy import. The paper stages train with ``transformers.Trainer``: their
optimiser and schedule settings are ``TrainingArguments`` fields, passed as the ``trainer`` node of
``configs/experiment/slicefine_paper*.yaml`` (not mirrored here); the checkpoint comes from the model
group and the tasks from the benchmark group. Every numeric default is reconstructed: the paper's
hyper-parameter tables were not recoverable (see docs/methods/slicefine.md, deviations).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from common.config import MethodConfig

ARMS = ("head", "lora", "static", "slicefine", "slicefine_alt", "slicefine_random_init")
MODES = ("row", "column", "alternate")


@dataclass
class ToyConfig:
    """The toy's shared setting (one setting for every arm)."""

    arms: list[str] = field(default_factory=lambda: list(ARMS))
    r: int = 4  # slice width = LoRA rank
    switch_every: int = 25  # N, steps between slice moves
    targets: list[str] = field(default_factory=lambda: ["query", "value"])
    steps: int = 150
    batch_size: int = 16
    lr: float = 2e-3
    n_train: int = 1600
    n_test: int = 800
    seeds: list[int] = field(default_factory=lambda: [0])
    diagnostics: bool = True
    # Deviation: keep only the first layers of the pretrained MiniLM (still pretrained weights) so
    # that six arms fit the CPU budget; a full 6-layer step costs ~0.5 s on 2 cores. See the doc.
    encoder_layers: int = 3
    max_length: int = 16
    # Unknown in the paper; the authors' RoCoFT code (RoCoFT.py, bias=True) trains the target biases.
    train_bias: bool = False
    # Issue-43 diagnosis knobs (docs/methods/slicefine.md, "Diagnosis"); defaults keep today's toy.
    lora_r: int | None = None  # LoRA rank (alpha = 2 * rank); None: r, as today
    lr_by_arm: dict[str, float] = field(default_factory=dict)  # per-arm lr; others use lr
    n_val: int = 0  # validation sentences (their own seed); 0: no validation split

    def __post_init__(self) -> None:
        bad = [a for a in [*self.arms, *self.lr_by_arm] if a not in ARMS]
        if bad or not self.arms:
            raise ValueError(f"arms must be a non-empty subset of {ARMS}, got {self.arms}")
        if self.steps < 1 or self.batch_size < 1 or self.r < 1:
            raise ValueError("steps, batch_size and r must be >= 1")
        if (self.lora_r is not None and self.lora_r < 1) or self.n_val < 0:
            raise ValueError(f"lora_r must be >= 1 or null and n_val >= 0, got {self}")
        if any(v <= 0 for v in self.lr_by_arm.values()):
            raise ValueError(f"lr_by_arm values must be > 0, got {self.lr_by_arm}")


@dataclass
class SliceSettings:
    """The SliceFine knobs of the paper stages (paper Fig. 1; values reconstructed).

    Attributes:
        r: slice width (rows or columns).
        mode: ``row`` | ``column`` | ``alternate`` (row and column blocks in turn).
        switch_every: optimiser steps between slice moves; None keeps one static slice.
        targets: module-name suffixes of the linears that carry a slice.
        init_position: ``random`` (seeded, per layer; the paper's "randomly chosen slice") or
            ``zero`` (the first rows/columns, as LiME/RoCoFT).
        train_bias: also train the target layers' biases (unknown in the paper; the authors'
            RoCoFT code trains them by default).
    """

    r: int = 4
    mode: str = "row"
    switch_every: int | None = 100
    targets: list[str] = field(
        default_factory=lambda: ["query", "key", "value", "attention.output.dense"]
    )
    init_position: str = "random"
    train_bias: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"method.slice.mode must be one of {MODES}, got {self.mode!r}")
        if self.r < 1:
            raise ValueError(f"method.slice.r must be >= 1, got {self.r}")
        if self.switch_every is not None and self.switch_every < 1:
            raise ValueError(
                f"method.slice.switch_every must be >= 1 or null, got {self.switch_every}"
            )
        if self.init_position not in ("random", "zero"):
            raise ValueError(
                f"method.slice.init_position must be 'random' or 'zero', got {self.init_position!r}"
            )
        if not self.targets:
            raise ValueError("method.slice.targets must name at least one module")


@dataclass
class SliceFineRunConfig(MethodConfig):
    """``method=slicefine``: the toy (``stage=toy``) and the paper's GLUE / VTAB-1K stages.

    Attributes:
        toy: the CPU toy's setting.
        slice: SliceFine on the paper stages.
        tasks: the benchmark sets to run (empty: every set of ``benchmark``), each trained from the
            pretrained checkpoint and evaluated on its evaluation split.
        max_length: GLUE tokenisation length.
        warmup_ratio: linear warm-up as a share of the total steps.
        trainer: ``transformers.TrainingArguments`` fields of the paper stages.
    """

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "MiniLM toy: head / LoRA / static slice / SliceFine / alternate / random-init arms",
        "glue": "paper: SliceFine on every GLUE task of `benchmark` with `model` (HF Trainer)",
        "vision": "paper: SliceFine on every VTAB-1K task of `benchmark` with `model` (HF Trainer)",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("glue", "vision")
    TRAINERS: ClassVar[dict[str, str]] = {"trainer": "transformers:TrainingArguments"}
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ("sequence_classification", "image_classification")
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ("glue", "vtab1k")

    name: str = "slicefine"
    stage: str = "toy"
    toy: ToyConfig = field(default_factory=ToyConfig)
    slice: SliceSettings = field(default_factory=SliceSettings)
    tasks: list[str] = field(default_factory=list)
    max_length: int = 256
    # Passed as TrainingArguments.warmup_steps (a value < 1 is a ratio of the total steps there);
    # kept here because the trainer-node type check reads warmup_steps' int default and rejects
    # a float ratio (reported to the lead).
    warmup_ratio: float = 0.0
    trainer: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_length < 1:
            raise ValueError(f"method.max_length must be >= 1, got {self.max_length}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError(f"method.warmup_ratio must lie in [0, 1), got {self.warmup_ratio}")
