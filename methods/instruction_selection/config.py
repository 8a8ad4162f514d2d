"""The run-config schema of targeted instruction selection (``method=instruction_selection``).

Light on purpose (stdlib and :mod:`common.config` only): the CLI loads it to type-check a composed
config before any heavy import. The paper's two HF ``Trainer`` runs (the LESS LoRA warm-up and the
full fine-tuning on a selected subset) take their settings from the ``warmup`` and ``finetune``
trainer nodes (fields of ``paper.TuluTrainingArguments``, a ``transformers.TrainingArguments``); nothing here mirrors them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from common.config import DatasetSpec, MethodConfig

REPRESENTATIONS = ("rds", "embed", "less")
SELECTOR_NAMES = ("rr", "dg", "uot", "knn_uniform")
TIE_BREAKS = ("official", "stable")
GRAD_MODES = ("train", "eval")
TARGET_TASKS = ("bbh", "codex", "gsm8k", "tydiqa", "mmlu_pro")


@dataclass
class InstructionSelectionConfig(MethodConfig):
    """``method=instruction_selection``: the toy (``stage=toy``) and the paper's stages.

    Attributes:
        representations, selectors, selector_representation, budgets, random_seeds: the arms.
        tie_break: DG / UOT order of exactly tied scores (``official``: numpy's default argsort,
            as ``selection/doubly_greedy.py``; ``stable``: smaller index first).
        uot_eps, uot_reg_m, knn_*: selector settings (official defaults).
        embed_model, embed_path: the EMBED sentence encoder (hub id, or a local folder that wins;
            both None: the offline MiniLM).
        lora_*: the LESS warm-up adapter (official ``training/train_sft.py``: r 128, α 512, 0.1).
        warmup_n, warmup_epochs, warmup_lr, warmup_batch: the toy's plain warm-up loop (and
            ``warmup_n``: the toy's random warm-up rows).
        warmup_trainer: run the LESS warm-up through HF ``Trainer`` with the ``warmup`` node
            (paper) instead of the toy loop.
        proj_dim, proj_seed, less_*: LESS features (official ``compute_less_embeds.py``).
        pool, warmup_data, queries: the paper's data (a hub id, or a local JSON/JSONL ``path``);
            ``queries.config`` is the target task.
        near_grades, near_frac: toy diagnosis (docs "Diagnosis"): graded near-target families
            ``add~q`` (pool-phrased additions whose answer is right with probability ``q``), each
            ``near_frac`` of the pool; ``[]`` keeps the original pool.
        train_epochs: toy fine-tuning length in epochs of the subset (0: ``train_steps`` steps).
        subset_file: the ``finetune`` stage's subset (a JSON list of pool ids from ``select``).
        warmup, finetune: ``transformers.TrainingArguments`` fields of the two paper trainings.
    """

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "synthetic pool + addition queries: RDS+/EMBED/LESS x RR/DG/UOT/KNN vs random",
        "select": "paper: representations + selection on the pool; writes subsets/<arm>_B<B>.json",
        "finetune": "paper: full fine-tuning of `model` on one subset_file, then the query loss",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("select", "finetune")
    TRAINERS: ClassVar[dict[str, str]] = {
        "warmup": "methods.instruction_selection.training:TuluTrainingArguments",
        "finetune": "methods.instruction_selection.training:TuluTrainingArguments",
    }
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ("causal_lm",)
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ()

    name: str = "instruction_selection"
    stage: str = "toy"
    representations: list[str] = field(default_factory=lambda: list(REPRESENTATIONS))
    selectors: list[str] = field(default_factory=lambda: list(SELECTOR_NAMES))
    selector_representation: str = "less"  # the paper compares selectors on LESS
    budgets: list[int] = field(default_factory=lambda: [500, 1000, 2500, 5000, 10000])
    random_seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    tie_break: str = "official"
    uot_eps: float = 0.01  # repo selection/uot.py
    uot_reg_m: list[float] = field(default_factory=lambda: [math.inf, 1e-4])  # repo
    knn_L: int = 5000  # repo tsds_subset.py
    knn_alpha: float = 0.01  # repo
    knn_C: float = 5.0  # repo
    embed_model: str | None = "sentence-transformers/gtr-t5-base"  # repo
    embed_path: str | None = None  # a local copy of the EMBED encoder (wins over embed_model)
    lora_r: int = 128  # repo training/train_sft.py
    lora_alpha: int = 512  # repo
    lora_dropout: float = 0.1  # repo
    lora_targets: list[str] = field(default_factory=lambda: ["all-linear"])
    warmup_n: int = 10000
    warmup_epochs: int = 4
    warmup_lr: float = 2e-5
    warmup_batch: int = 128
    warmup_trainer: bool = True
    proj_dim: int = 8192  # repo
    proj_seed: int = 0  # repo
    less_grad_mode: str = "train"  # official collect_grads: train mode, LoRA dropout on
    less_add_special_tokens: bool = True  # official tokenization keeps the tokenizer's BOS
    less_feature_dtype: str | None = None  # None: the model dtype (official projector)
    n_quantiles: int = 10
    per_quantile: int = 500
    max_length: int = 2048  # repo
    # toy only
    pool_size: int = 3000
    target_frac: float = 0.03
    n_queries: int = 16
    n_test: int = 200
    pretrain_steps: int = 300
    train_steps: int = 150
    train_batch: int = 16
    train_lr: float = 5e-4
    near_grades: list[float] = field(default_factory=list)  # [] = today's pool (no graded families)
    near_frac: float = 0.05  # pool share of each graded near-target family
    train_epochs: float = 0.0  # 0 = fixed ``train_steps``; > 0 = this many epochs of the subset
    # paper only
    pool: DatasetSpec = field(
        default_factory=lambda: DatasetSpec(
            hub_id="Harvard-DCML/tulu-v2-197K-processed", split="train"
        )
    )
    warmup_data: DatasetSpec = field(
        default_factory=lambda: DatasetSpec(
            hub_id="Harvard-DCML/tulu-v2-10K-warmup-processed", split="train"
        )
    )
    queries: DatasetSpec = field(
        default_factory=lambda: DatasetSpec(
            hub_id="Harvard-DCML/targeted-query-set-processed", config="bbh", split="dev"
        )
    )
    subset_file: str | None = None
    warmup: dict[str, Any] = field(default_factory=dict)
    finetune: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = set(self.representations) - set(REPRESENTATIONS)
        if bad:
            raise ValueError(
                f"method.representations must be among {REPRESENTATIONS}; got {sorted(bad)}"
            )
        bad = set(self.selectors) - set(SELECTOR_NAMES)
        if bad:
            raise ValueError(f"method.selectors must be among {SELECTOR_NAMES}; got {sorted(bad)}")
        if not self.budgets or min(self.budgets) < 1:
            raise ValueError(f"method.budgets must be positive, got {self.budgets}")
        if self.tie_break not in TIE_BREAKS:
            raise ValueError(
                f"method.tie_break must be one of {TIE_BREAKS}, got {self.tie_break!r}"
            )
        if self.less_grad_mode not in GRAD_MODES:
            raise ValueError(
                f"method.less_grad_mode must be one of {GRAD_MODES}, got {self.less_grad_mode!r}"
            )
        if any(not 0.0 <= q <= 1.0 for q in self.near_grades) or not 0 < self.near_frac < 0.5:
            raise ValueError(
                f"method.near_grades must lie in [0, 1] and 0 < near_frac < 0.5, got "
                f"{self.near_grades}, {self.near_frac}"
            )
        if self.train_epochs < 0:
            raise ValueError(f"method.train_epochs must be >= 0, got {self.train_epochs}")
        if self.queries.config not in TARGET_TASKS:
            raise ValueError(
                f"method.queries.config must be one of {TARGET_TASKS}, got {self.queries.config!r}"
            )
