"""KORE's run-config schema (``method=kore``): the CPU toy, the paper's training stage and EVOKE.

Light on purpose (stdlib and :mod:`common.config` only): the CLI loads it to type-check a composed
config before any heavy import. The Trainer's knobs (learning rate, epochs, batch, schedule, bf16, the
projector's learning rate) are fields of :class:`methods.kore.trainer.KoreTrainingConfig` (a
``transformers.TrainingArguments``), passed as the ``trainer`` node of ``configs/experiment/kore_paper.yaml``;
the checkpoint comes from the ``model`` group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from common.config import MethodConfig

ARMS = ("full_ft", "lora", "kore", "kore_unfrozen_A", "kore_no_constraint", "kore_no_aug")
LLAVA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
EIGVECS = ("smallest", "largest")
INITS = ("kore", "lora_null_v1")
PROMPT_STYLES = ("vicuna", "chat")


@dataclass
class ToyConfig:
    """Toy settings; one learning rate and step budget shared by every injection arm."""

    arms: list[str] = field(default_factory=lambda: list(ARMS))
    n_old: int = 48
    n_new: int = 16
    n_values: int = 40
    n_relations: int = 4
    n_phrasings: int = 8
    aug_phrasings: list[int] = field(default_factory=lambda: [0, 1, 2, 3])
    heldout_phrasings: list[int] = field(default_factory=lambda: [6, 7])
    # phrasings whose word order is relation-before-entity ``[BOS, T_p, R, E] -> V``: phrasings then
    # differ in structure, not only in a marker token, so one phrasing need not transfer to the rest
    reversed_phrasings: list[int] = field(default_factory=lambda: [1, 3, 5, 7])
    hidden_size: int = 32
    intermediate_size: int = 86
    num_layers: int = 2
    num_heads: int = 4
    pretrain_steps: int = 300
    pretrain_lr: float = 3e-3
    pretrain_batch: int = 128
    inject_steps: int = 100
    lr: float = 1e-2
    batch_size: int = 64
    lora_rank: int = 4
    kore_rank: int = 0  # 0: matched to LoRA's trainable-parameter count
    n_calib: int = 64
    n_probe: int = 128
    normalize: str = "sample_max"
    seeds: list[int] = field(default_factory=lambda: [0])

    def __post_init__(self):
        bad = [a for a in self.arms if a not in ARMS]
        if bad:
            raise ValueError(f"method.toy.arms must be among {list(ARMS)}, got {bad}")
        for name in ("n_old", "n_new", "n_values", "inject_steps", "lora_rank"):
            if getattr(self, name) < 1:
                raise ValueError(f"method.toy.{name} must be >= 1, got {getattr(self, name)}")


@dataclass
class PaperConfig:
    """The KORE-specific settings of the ``paper`` stage (paper §3.2-3.3; repo scripts).

    Paths point at LLaVA-format JSON records (``conversations`` with ``from``/``value``, ``image``).
    """

    data_path: str = ""  # KORE-74K training JSON
    image_root: str = ""
    calib_path: str = ""  # calibration records (image + question); answers are ignored
    n_calib: int = 256  # paper §3.3
    rank: int = 235  # paper Table 6 (LLaVA-1.5)
    target_modules: list[str] = field(default_factory=lambda: list(LLAVA_TARGETS))
    freeze_A: bool = True  # paper §3.2; False = "w/o frozen A" (official --lora_null_v1 flag)
    sigma_fuse: str = "UV"  # official default
    eigvecs: str = "smallest"  # "largest": official --first_eigen ablation
    init: str = "kore"  # "lora_null_v1": official --singular_aware_2 (A = null basis, B = 0)
    normalize: str = "sample_max"  # official calib_cov_distribution
    denom: float = 256.0  # official
    max_len: int = 2048
    # "vicuna": LLaVA-1.5 USER/ASSISTANT prompt (official conv mode vicuna_v1); "chat": the
    # processor's chat template (Qwen2.5-VL through LLaMA-Factory's qwen2_vl template)
    prompt_style: str = "vicuna"
    # parameters trained at trainer.projector_lr besides lora_B (LLaVA: the multimodal projector)
    projector_keys: list[str] = field(default_factory=lambda: ["multi_modal_projector"])

    def __post_init__(self):
        if self.eigvecs not in EIGVECS:
            raise ValueError(f"method.paper.eigvecs must be one of {EIGVECS}, got {self.eigvecs!r}")
        if self.init not in INITS:
            raise ValueError(f"method.paper.init must be one of {INITS}, got {self.init!r}")
        if self.prompt_style not in PROMPT_STYLES:
            raise ValueError(
                f"method.paper.prompt_style must be one of {PROMPT_STYLES}, got {self.prompt_style!r}"
            )
        if self.rank < 1 or self.n_calib < 1:
            raise ValueError("method.paper.rank and method.paper.n_calib must be >= 1")


@dataclass
class EvokeConfig:
    """The ``evoke`` stage: greedy answers to the question files of ``benchmark`` (``evoke``), scored
    with CEM / F1.

    ``adapter_dir``: the ``kore/`` folder of a ``paper`` run (adapter + projector), None = the base.
    ``gold_file``: gold answers kept apart from the questions (a benchmark with one set only).
    ``answers_file``: score these answers (e.g. from vLLM) instead of generating (one set only).
    ``image_root``: the folder the questions' ``image`` paths are relative to.
    """

    adapter_dir: str | None = None
    gold_file: str | None = None
    image_root: str = ""
    prompt_style: str = "vicuna"  # official --conv-mode vicuna_v1; chat for Qwen2.5-VL
    max_new_tokens: int = 128  # official Qwen inference script
    answers_file: str | None = None

    def __post_init__(self):
        if self.prompt_style not in PROMPT_STYLES:
            raise ValueError(
                f"method.evoke.prompt_style must be one of {PROMPT_STYLES}, got {self.prompt_style!r}"
            )


@dataclass
class KoreRunConfig(MethodConfig):
    """``method=kore``: the CPU toy (``stage=toy``), KORE training (``paper``) and EVOKE (``evoke``).

    Attributes:
        toy: the toy's sizes and arms.
        paper: KORE settings of the training stage (covariances, rank, init, data paths).
        trainer: fields of :class:`methods.kore.trainer.KoreTrainingConfig` (HF TrainingArguments).
        evoke: the evaluation stage.
    """

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "synthetic fact injection into a tiny Llama: LoRA vs KORE and its ablations (CPU)",
        "paper": "covariances -> KORE init -> HF Trainer on B (+ projector) of `model`; LoRA export",
        "evoke": "greedy answers of `model` (+ a trained adapter) to EVOKE questions, CEM / F1",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("paper", "evoke")
    TRAINERS: ClassVar[dict[str, str]] = {"trainer": "methods.kore.trainer:KoreTrainingConfig"}
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ("vision_language",)
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ("evoke",)

    name: str = "kore"
    stage: str = "toy"
    toy: ToyConfig = field(default_factory=ToyConfig)
    paper: PaperConfig = field(default_factory=PaperConfig)
    trainer: dict[str, Any] = field(default_factory=dict)
    evoke: EvokeConfig = field(default_factory=EvokeConfig)
