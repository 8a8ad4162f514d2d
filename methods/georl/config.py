"""Geo-RL's run-config schema (``method=georl``): the toy's sizes, its reward and the paper stage.

Light on purpose (stdlib and :mod:`common.config` only): the CLI loads it to type-check a composed
config before any heavy import. The reward knobs of the paper stage are fields of
:class:`methods.georl.trainer.GeoRLGRPOConfig` (a ``trl.GRPOConfig``, saved with the run), passed as
the ``trainer`` node of ``configs/experiment/georl_paper.yaml``; the toy, which trains without TRL,
takes the same knobs as :class:`GeoRLConfig` in ``method.reward``.

No paper value is known for Geo-RL (its text was not found): every default is our reconstruction
from the abstract (see docs/methods/georl.md, deviations).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from common.config import DatasetSpec, MethodConfig

ARM_NAMES = ("sft", "grounding", "georl", "georl_noq", "georl_minilm")


@dataclass
class GeoRLConfig:
    """Hyper-parameters of the Geo-RL reward (all reconstructed, no paper values known).

    Attributes:
        n: Descriptions sampled per image (the DPP group size N).
        gamma: Quality exponent in ``L = diag(q^gamma) S diag(q^gamma) + jitter I``.
        jitter: Diagonal ridge delta; an exact duplicate earns about ``log(2 delta)``.
        q_min: Floor for grounding quality (keeps ``log q`` finite).
        advantage_mode: ``"raw"`` LOO gains (unbiased) or ``"normalized"`` (GRPO-style ablation).
        grounding_weight: lambda_g of the optional extra reward ``lambda_g * q_i``.
        repetition_threshold: Captions whose 3-gram repetition rate exceeds this get ``q_min``.
        unit: What one DPP item is: a whole rollout (only ``"rollout"`` is implemented; the
            sentence-level alternative is listed in the doc).
    """

    n: int = 8
    gamma: float = 2.0
    jitter: float = 1e-3
    q_min: float = 0.05
    advantage_mode: str = "raw"  # raw | normalized
    grounding_weight: float = 0.0
    repetition_threshold: float = 0.5
    unit: str = "rollout"

    def __post_init__(self) -> None:
        if self.n < 2:
            raise ValueError(f"n must be >= 2 (leave-one-out needs two descriptions), got {self.n}")
        if self.gamma < 0:
            raise ValueError(f"gamma must be >= 0, got {self.gamma}")
        if self.jitter < 0:
            raise ValueError(f"jitter must be >= 0, got {self.jitter}")
        if not 0 < self.q_min <= 1:
            raise ValueError(f"q_min must lie in (0, 1], got {self.q_min}")
        if self.advantage_mode not in ("raw", "normalized"):
            raise ValueError(
                f"advantage_mode must be 'raw' or 'normalized', got {self.advantage_mode!r}"
            )
        if self.unit != "rollout":
            raise ValueError(
                f"unit must be 'rollout' (sentence-level is not implemented), got {self.unit!r}"
            )


@dataclass
class ToyConfig:
    """Sizes and optimiser settings of toy G1 (the fact-slot captioner); shared by every arm."""

    n_facts: int = 30
    n_images: int = 300
    facts_per_image: int = 6
    slots: int = 3
    warm_steps: int = 3000
    warm_lr: float = 0.5
    rl_steps: int = 1500
    rl_lr: float = 0.3
    images_per_step: int = 8
    eval_samples: int = 8
    generic_quality: float = 0.2
    toy_advantage: str = "normalized"  # group-normalised REINFORCE for every arm (pilot choice)
    minilm_steps: int = 200
    arms: list[str] = field(default_factory=lambda: list(ARM_NAMES))


@dataclass
class ClipGraderConfig:
    """The CLIP checkpoint that grades each sentence against its image (the grounding ``q``).

    Attributes:
        name: transformers CLIP hub id.
        path: a local folder to load instead (same weights, or a tiny stand-in in tests).
        tau: cosine offset of ``q = mean_s sigmoid((cos(v, s) − tau) / T)``; calibrate it to the
            median CLIP cosine of true captions.
    """

    name: str = "openai/clip-vit-large-patch14"
    path: str | None = None
    tau: float = 0.25


@dataclass
class GeoRLRunConfig(MethodConfig):
    """``method=georl``: toy G1 (``stage=toy``) and the paper stage (``stage=paper``).

    Attributes:
        reward: the toy's reward knobs (the paper stage reads them from ``trainer``).
        toy: toy G1 sizes and arms.
        embedder: sentence-transformers id or path for the semantic space; None = offline MiniLM.
        embedder_cache_size: distinct texts the embedder memoises (LRU; 0 = none).
        train_data: the image-description prompts of the paper stage (an ``image`` column; a local
            ``save_to_disk`` folder or data files through ``train_data.path``).
        text_scenes: > 0 trains a text model on this many generated scenes with keyword grounding
            instead of images (the text stand-in of the CPU check; ``model.kind=causal_lm``).
        clip: the CLIP grader of the image path.
        lora_r: LoRA rank of the paper stage; 0 = full fine-tuning.
        trainer: fields of :class:`methods.georl.trainer.GeoRLGRPOConfig` (TRL ``GRPOConfig``).
    """

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "toy G1: fact-slot captioner, SFT vs grounding-only RL vs Geo-RL (bag of facts, MiniLM)",
        "paper": "GeoRLTrainer on `model` over train_data (images, CLIP grounding; vLLM rollouts)",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("paper",)
    TRAINERS: ClassVar[dict[str, str]] = {"trainer": "methods.georl.trainer:GeoRLGRPOConfig"}
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ("vision_language", "causal_lm")
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ()

    name: str = "georl"
    stage: str = "toy"
    reward: GeoRLConfig = field(default_factory=GeoRLConfig)
    toy: ToyConfig = field(default_factory=ToyConfig)
    embedder: str | None = None
    embedder_cache_size: int = 4096
    train_data: DatasetSpec = field(
        default_factory=lambda: DatasetSpec(hub_id="google/docci", split="train")
    )
    text_scenes: int = 0
    clip: ClipGraderConfig = field(default_factory=ClipGraderConfig)
    lora_r: int = 0
    trainer: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.text_scenes < 0 or self.lora_r < 0 or self.embedder_cache_size < 0:
            raise ValueError(
                "method.text_scenes, method.lora_r and method.embedder_cache_size must be >= 0"
            )


__all__ = ["ClipGraderConfig", "GeoRLConfig", "GeoRLRunConfig", "ToyConfig"]
