"""KMKC's run-config schema (``method=kmkc``): the fact-world toy and the paper pipeline's settings.

Light on purpose (stdlib and :mod:`common.config` only): the CLI loads it to type-check a composed
config before any heavy import. The SFT and CDKC training knobs are fields of ``trl.SFTConfig`` and
:class:`methods.kmkc.trainer.CDKCConfig` (a ``trl.GRPOConfig``), passed as the ``sft`` and ``cdkc``
trainer nodes of ``configs/experiment/kmkc_paper.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from common.config import DatasetSpec, MethodConfig

TOY_ARMS: tuple[str, ...] = ("vanilla_sft", "cgke", "grpo", "cdkc")
# cgke_plain: CGKE's items (its per-region counts) as plain (question, gold) pairs (issue 43)
VALID_TOY_ARMS: tuple[str, ...] = (*TOY_ARMS, "cgke_plain")
EVAL_TEMPLATES: tuple[str, ...] = ("qa", "reversed", "statement")
FLASHRAG_HUB = "RUC-NLPIR/FlashRAG_datasets"


@dataclass
class ToyConfig:
    """Sizes of the fact-world toy (our design; counts scaled to the CPU budget)."""

    n_per_tier: int = 100
    n_relations: int = 4
    n_objects: int = 100
    reps_seen: int = 20  # tier A: right object, reps_seen times
    reps_conflict_right: int = 6  # tier B: right object ...
    reps_conflict_wrong: int = 4  # ... and one distractor
    hidden: int = 64
    layers: int = 2
    heads: int = 2
    pretrain_steps: int = 1500
    batch_size: int = 64
    lr: float = 3e-3
    k: int = 8  # samples per question (paper: 16)
    temperature: float = 1.0
    n_bins: int = 10
    mastered_threshold: float = 0.75
    stable_kappa: float = 0.5
    n_mastered: int = 1
    n_confused: int = 3
    n_missing: int = 3
    sft_steps: int = 40
    sft_lr: float = 3e-3
    # Issue-43 diagnosis knobs (methods/kmkc/toy_sft.py); the defaults keep today's toy.
    sft_items_per_fact: float = (
        0.0  # > 0: every SFT arm gets round(x * #facts) items; 0: CGKE's pool size
    )
    sft_epochs: float = 0.0  # > 0: ceil(epochs * items / batch) SFT steps instead of sft_steps
    uniform_draw: str = "replacement"  # replacement | cover (every fact once per shuffled round)
    eval_template: str = "qa"  # qa "<q> R S <a>" | reversed "<q> S R <a>" | statement "<q> S R is"
    # Calibration stage: GRPO vs CDKC from a CGKE checkpoint that withheld a share
    # of tier C, so those questions stay unanswerable.
    withhold_c: float = 0.5  # share of tier-C facts left out of the calibration stage's CGKE SFT
    grpo_steps: int = 80
    grpo_lr: float = 1e-3
    grpo_generations: int = 8  # G
    grpo_prompts_per_step: int = 8
    grpo_beta: float = 0.0
    cdkc_mode: str = "loss"  # loss | reward
    cdkc_signal: str = "entropy"  # entropy (paper method figure) | nll (paper Eq. 24)
    cdkc_scale: float = 1.0  # multiplies every λ of the default table
    seeds: list[int] = field(default_factory=lambda: [0])

    def __post_init__(self) -> None:
        if self.uniform_draw not in ("replacement", "cover"):
            raise ValueError(
                f"toy.uniform_draw must be replacement|cover, got {self.uniform_draw!r}"
            )
        if self.eval_template not in EVAL_TEMPLATES:
            raise ValueError(f"toy.eval_template must be one of {EVAL_TEMPLATES}")
        if self.sft_items_per_fact < 0 or self.sft_epochs < 0:
            raise ValueError("toy.sft_items_per_fact and toy.sft_epochs must be >= 0")


def _train_set(name: str, n: int) -> DatasetSpec:
    return DatasetSpec(hub_id=FLASHRAG_HUB, config=name, split="train", limit=n)


@dataclass
class PaperSettings:
    """The paper pipeline's knobs besides the two trainers (values inferred unless a source is named).

    Attributes:
        engine: ``"hf"`` or ``"vllm"`` for profiling and evaluation.
        vllm_kwargs: engine keyword arguments for ``VLLMGenerator``.
        batch_size: prompts per ``generate`` call of the HF engine.
        samples: profiling samples K per question (paper §2: K = 16).
        temperature: profiling temperature.
        max_new_tokens: generation length for profiling and evaluation.
        prompt: the QA instruction; ``{question}`` is substituted.
        self_evaluate: ask the model for its region (paper Fig. 2), with the rule as fallback.
        regions: fields of :class:`methods.kmkc.regions.RegionConfig`.
        augment: fields of :class:`methods.kmkc.augment.AugmentConfig`.
        cdkc_init: ``"cgke"`` (calibrate the SFT model) or ``"base"``.
        rounds: expansion-calibration rounds (paper Table 1: 1 and "w/ 2 round").
        refuse_threshold: τ on the confidence for the answer/refuse decision.
        profiles_path: the ``profile.jsonl`` that ``stage=sft`` and ``stage=cdkc`` read (written by
            ``stage=profile``); empty = ``<run_dir>/paper/profile.jsonl``.
    """

    engine: str = "vllm"
    vllm_kwargs: dict[str, Any] = field(default_factory=dict)
    batch_size: int = 16
    samples: int = 16
    temperature: float = 1.0
    max_new_tokens: int = 256
    prompt: str = (
        "Answer the following question. End with a line 'Answer: <short answer>'.\n"
        "Question: {question}"
    )
    self_evaluate: bool = True
    regions: dict[str, Any] = field(default_factory=dict)
    augment: dict[str, Any] = field(default_factory=dict)
    cdkc_init: str = "cgke"
    rounds: int = 1
    refuse_threshold: float = 0.5
    profiles_path: str = ""

    def __post_init__(self) -> None:
        if self.engine not in ("hf", "vllm"):
            raise ValueError(f"method.paper.engine must be 'hf' or 'vllm', got {self.engine!r}")
        if self.cdkc_init not in ("cgke", "base"):
            raise ValueError(
                f"method.paper.cdkc_init must be 'cgke' or 'base', got {self.cdkc_init!r}"
            )
        if self.samples < 1 or self.rounds < 1:
            raise ValueError(
                f"method.paper.samples and rounds must be >= 1, got {self.samples}, {self.rounds}"
            )
        if "{question}" not in self.prompt:
            raise ValueError("method.paper.prompt must contain '{question}'")


@dataclass
class KMKCRunConfig(MethodConfig):
    """``method=kmkc``: the fact-world toy (``stage=toy``) and the paper pipeline (``stage=paper``).

    Attributes:
        toy: the toy's sizes and CDKC settings.
        arms: the toy's arms (``vanilla_sft``, ``cgke``, ``grpo``, ``cdkc``; also ``cgke_plain``).
        train_sets: the seed sets the pipeline profiles and trains on (paper App. B: 50K NQ, 30K
            HotpotQA, 30K 2WikiMultihopQA under the key `twowiki`: Hydra keys cannot start with a
            digit), FlashRAG layout; ``path`` a local ``.jsonl`` (``limit`` items are
            sampled with the run's seed).
        paper: the pipeline's other knobs.
        sft: fields of ``trl.SFTConfig`` (CGKE fine-tuning).
        cdkc: fields of :class:`methods.kmkc.trainer.CDKCConfig` (calibration).
    """

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "fact world + tiny GPT-2: decay law, regions, CGKE vs SFT, GRPO vs CDKC (CPU)",
        "profile": "paper: K samples per seed question, profiles and regions of `model`",
        "sft": "paper: CGKE augmentations of the profiled questions, then SFT of `model`",
        "cdkc": "paper: CDKC calibration (GRPO + region-weighted term) of `model` on the profiles",
        "eval": "paper: accuracy, ECE and self-knowledge of `model` on `benchmark`",
        "paper": "paper: profile -> regions -> CGKE SFT -> CDKC per round, then `benchmark`",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("paper",)
    TRAINERS: ClassVar[dict[str, str]] = {
        "sft": "trl:SFTConfig",
        "cdkc": "methods.kmkc.trainer:CDKCConfig",
    }
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ("causal_lm",)
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ("flashrag",)

    name: str = "kmkc"
    stage: str = "toy"
    toy: ToyConfig = field(default_factory=ToyConfig)
    arms: list[str] = field(default_factory=lambda: list(TOY_ARMS))
    train_sets: dict[str, DatasetSpec] = field(
        default_factory=lambda: {
            "nq": _train_set("nq", 50000),
            "hotpotqa": _train_set("hotpotqa", 30000),
            "twowiki": _train_set("2wikimultihopqa", 30000),
        }
    )
    paper: PaperSettings = field(default_factory=PaperSettings)
    sft: dict[str, Any] = field(default_factory=dict)
    cdkc: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = sorted(set(self.arms) - set(VALID_TOY_ARMS))
        if bad:
            raise ValueError(f"method.arms: unknown {bad}; valid: {list(VALID_TOY_ARMS)}")
        if not self.train_sets:
            raise ValueError("method.train_sets must name at least one seed set")
