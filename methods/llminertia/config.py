"""LLMInertia's run-config schema (``method=llminertia``): toys, paper evaluation and induction.

Light on purpose (stdlib and :mod:`common.config` only): the CLI loads it to type-check a composed
config before any heavy import. The backbone comes from the ``model`` group; the induction stage's
Trainer knobs are fields of :class:`methods.llminertia.induction_train.InductionConfig` (a
``transformers.TrainingArguments``), passed as the ``trainer`` node of
``configs/experiment/llminertia_induce.yaml``. Pipeline defaults follow the official code
(THUMLP/LLMInertia ``scripts/vllm_infer_evidence_*.py``, ``evaluation/eval_overthink.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from common.config import MethodConfig

ARMS = ("plain", "generic", "llminertia")
MATCHERS = ("substring", "word_boundary", "fuzzy")
BACKENDS = ("openai", "vllm", "hf")


@dataclass
class TrainedToyConfig:
    """Sizes and schedules of the trained toy."""

    n_known: int = 16  # world-knowledge pairs (co-occur in stage 0)
    n_test: int = 16  # designated induction pairs
    n_filler_words: int = 16
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    base_steps: int = 500
    base_batch: int = 64
    base_lr: float = 3e-3
    answer_weight: float = 5.0  # loss weight of each stage-0 line's last (answer) token
    ratios: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])
    induce_steps: int = 100
    induce_batch: int = 16
    induce_lr: float = 3e-3
    step_checkpoints: list[int] = field(default_factory=lambda: [25, 50, 100])
    n_test_templates: int = 2
    k: int = 3
    seed: int = 0
    # issue-43 diagnosis knobs (defaults = today's toy): share of stage-0 explicit known-pair items
    # with B stated absent whose label follows the association ("yes") instead of the evidence, and
    # distractor statements (other entities, random status) added to every explicit item
    leak_share: float = 0.0
    n_distractors: int = 0

    def __post_init__(self):
        if not 0.0 <= self.leak_share <= 1.0:
            raise ValueError(f"trained.leak_share must be in [0, 1], got {self.leak_share}")
        if not 0 <= self.n_distractors <= 4:
            raise ValueError(f"trained.n_distractors must be in 0..4, got {self.n_distractors}")


@dataclass
class PaperDataset:
    """One evaluation set of the paper stage, built from a ``benchmark`` set by
    :func:`methods.llminertia.paper.benchmark_datasets` (formats in :mod:`.paper_data`)."""

    name: str = "medical"
    kind: str = "induction"  # induction (repo JSONL) | halueval
    path: str = ""
    task: str | None = None  # HaluEval task: qa | dialogue | summarization | general
    prompt_set: str = "medical"
    max_items: int | None = None


@dataclass
class LLMInertiaRunConfig(MethodConfig):
    """``method=llminertia``: pipeline settings (official defaults), toys, paper stages.

    Attributes:
        k, matcher, min_len, stopwords, dedup, yes_no_rule, plain_input: the pipeline (defaults =
            the official code; ``min_len=3, stopwords=true, dedup=true, yes_no_rule=lenient,
            plain_input=template`` is this repository's earlier behaviour).
        trained: the trained toy (``stage=toy``); the simulator fields are for ``stage=sim``.
        engine, base_url, pre_model, ...: the paper stage's backbone access (the model itself is
            ``model``).
        corpus_path, trainer: the induction stage (continued pre-training of ``model``).
    """

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "trained toy: a tiny GPT-2 learns evidence QA, is induced, then answered by 3 arms",
        "sim": "simulated inert LLM: probe / match / remind mechanics and call budget (seconds)",
        "paper": "plain vs generic note vs LLMInertia of `model` on the induction + HaluEval sets",
        "induce": "continued pre-training of `model` on a co-occurrence corpus (official recipe)",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("paper", "induce")
    TRAINERS: ClassVar[dict[str, str]] = {
        "trainer": "methods.llminertia.induction_train:InductionConfig"
    }
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ("causal_lm",)
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ("inertia",)

    name: str = "llminertia"
    stage: str = "toy"
    prompt_set: str = "medical"  # medical | synthetic | generic
    k: int = 3  # associations per entity, official
    matcher: str = "substring"  # official find_entity_pairs_in_input
    min_len: int = 0  # official: no length filter (ours earlier: 3)
    stopwords: bool = False  # official: no stopword filter (ours earlier: True)
    dedup: bool = False  # official: repeated pairs/sentences kept (ours earlier: True)
    yes_no_rule: str = "official"  # official map_result | lenient (ours earlier)
    plain_input: str = "bare"  # official plain baseline: bare input | template (ours earlier)
    max_pairs: int | None = None
    batch_size: int = 8  # official
    temperature: float = 0.0  # official
    max_tokens: int = 512  # official
    # simulated toy (stage=sim)
    family: str = "medical"  # medical | synthetic pairs
    ratios: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])
    n_test_templates: int = 4
    exposure_tau: float = 3.0  # strength = 1 - exp(-count / tau)
    generic_damping: float = 0.2  # simulator assumption
    pair_damping: float = 0.9  # simulator assumption
    base_error: float = 0.02  # base model's wrong-yes rate without induction
    # trained toy (stage=toy)
    trained: TrainedToyConfig = field(default_factory=TrainedToyConfig)
    # paper stage
    engine: str = "openai"  # openai (any compatible server) | vllm | hf
    base_url: str | None = None
    pre_model: str | None = None  # base (non-induced) model for the induction metrics
    pre_base_url: str | None = None
    tensor_parallel_size: int = 1
    max_model_len: int = 2560  # official: 2048 + 512
    max_items: int | None = None  # per set, on top of benchmark.sets.<set>.limit
    # induce stage
    corpus_path: str | None = None
    trainer: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.matcher not in MATCHERS:
            raise ValueError(f"method.matcher must be one of {MATCHERS}, got {self.matcher!r}")
        if self.engine not in BACKENDS:
            raise ValueError(f"method.engine must be one of {BACKENDS}, got {self.engine!r}")
        if self.yes_no_rule not in ("official", "lenient"):
            raise ValueError(
                f"method.yes_no_rule must be 'official' or 'lenient', got {self.yes_no_rule!r}"
            )
        if self.plain_input not in ("bare", "template"):
            raise ValueError(
                f"method.plain_input must be 'bare' or 'template', got {self.plain_input!r}"
            )
        if self.min_len < 0:
            raise ValueError(f"method.min_len must be >= 0, got {self.min_len}")
