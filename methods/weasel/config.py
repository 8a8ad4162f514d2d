"""Weasel's run-config schema (``method=weasel``): selection settings, the toy's sizes, paper stages.

Light on purpose (stdlib and :mod:`common.config` only): the CLI loads it to type-check a composed
config before any heavy import. The SFT knobs are not mirrored here: they are fields of
:class:`methods.weasel.sft.WeaselSFTConfig` (a ``trl.SFTConfig``), passed as the ``trainer`` node of
``configs/experiment/weasel_paper.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from common.config import MethodConfig

ARMS = ("full", "random", "weasel", "importance_only", "diversity_only")
BUDGET_MODES = ("fixed", "percentage")
NORMALIZE = ("minmax", "raw", "increment")
COMBINE = ("max", "mean", "state", "response")
SCORERS = ("minilm", "jaccard")
POLICY_ARCHS = ("gpt2", "llama")


@dataclass
class WeaselConfig:
    """Selection settings; defaults are the official code's (``weasel/select_greedy.py``,
    ``prune_axtree.py``, ``postprocess_dataset.py``)."""

    lam: float = 1.0  # repo default λ
    budget_mode: str = "fixed"  # fixed | percentage (repo)
    budget_fixed: int = 3  # repo: 3 steps per trajectory
    budget_pct: float = 0.25
    normalize: str = "minmax"  # minmax | raw | increment; repo default
    combine: str = "max"  # max | mean | state | response; paper and repo
    importance_off: bool = False  # diversity-only ablation (Φ ≡ 0)
    prune: bool = True
    window: int = 60  # repo w
    fallback: int = 120  # repo F
    compat_repo_regex: bool = False
    max_user_chars: int = 40000  # repo
    max_examples: int = 10000  # repo
    seed: int = 0
    allow_missing_goal: bool = False

    def __post_init__(self) -> None:
        if self.lam < 0:
            raise ValueError(f"lam must be >= 0, got {self.lam}")
        for name, value, options in (
            ("budget_mode", self.budget_mode, BUDGET_MODES),
            ("normalize", self.normalize, NORMALIZE),
            ("combine", self.combine, COMBINE),
        ):
            if value not in options:
                raise ValueError(f"{name} must be one of {options}, got {value!r}")
        if self.budget_mode == "fixed" and self.budget_fixed < 1:
            raise ValueError(f"budget_fixed must be >= 1, got {self.budget_fixed}")
        if self.budget_mode == "percentage" and not 0 < self.budget_pct <= 1:
            raise ValueError(f"budget_pct must lie in (0, 1], got {self.budget_pct}")


@dataclass
class WeaselRunConfig(MethodConfig):
    """``method=weasel``: the SynthWeb toy (``stage=toy``) and the paper's ``select`` / ``sft``.

    Attributes:
        arms, seeds: toy arms and SFT seeds (added to the top-level ``seed``).
        selection: the Weasel selection settings (every stage).
        scorer, scorer_model, scorer_path, num_layers, max_length: the BERTScore-style scorer
            (``minilm``: token matching on ``scorer_path`` or else ``scorer_model``, both None for
            the offline MiniLM; ``jaccard``: a fast stand-in).
        n_train_traj ... name_first_tree: the toy's corpus, policy and SFT sizes.
        data_path: the AgentLab-format JSON of the ``select`` stage.
        output_path: the selected subset (``select`` writes it, ``sft`` reads it); None: the run dir.
        trainer: fields of :class:`methods.weasel.sft.WeaselSFTConfig` (TRL ``SFTConfig`` + LoRA).
    """

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "SynthWeb toy: Full / Random / Weasel / ablations, tiny policy SFT, per-field accuracy",
        "select": "paper: prune + score + greedy-select AgentLab records (data_path -> output_path)",
        "sft": "paper: LoRA SFT of `model` on the selected subset (TRL SFTTrainer + PEFT)",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("select", "sft")
    TRAINERS: ClassVar[dict[str, str]] = {"trainer": "methods.weasel.sft:WeaselSFTConfig"}
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ("causal_lm",)
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ()

    name: str = "weasel"
    stage: str = "toy"
    arms: list[str] = field(default_factory=lambda: list(ARMS))
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    selection: WeaselConfig = field(default_factory=WeaselConfig)
    scorer: str = "minilm"
    scorer_model: str | None = None
    scorer_path: str | None = None  # a local copy of the scorer encoder (wins over scorer_model)
    num_layers: int = 4
    max_length: int = 64
    # toy
    n_train_traj: int = 150
    n_test_steps: int = 200
    data_seed: int = 0
    epochs: float = 2.0
    lr: float = 1.0e-3
    batch_size: int = 16
    n_embd: int = 64
    arch: str = "gpt2"  # toy policy: gpt2 | llama (common.tiny)
    induction_steps: int = 0  # random-token lookup warm-up (common.tiny), once per seed, all arms
    name_first_tree: bool = False  # toy prompt: tree lines as "name role [bid]"
    # paper
    data_path: str | None = None
    output_path: str | None = None
    max_seq_length: int = 12288  # SFT truncation (tokens); the AgentLab prompts are long
    trainer: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = [a for a in self.arms if a not in ARMS]
        if bad:
            raise ValueError(f"method.arms must be drawn from {ARMS}, got {bad}")
        if self.scorer not in SCORERS:
            raise ValueError(f"method.scorer must be one of {SCORERS}, got {self.scorer!r}")
        if self.arch not in POLICY_ARCHS:
            raise ValueError(f"method.arch must be one of {POLICY_ARCHS}, got {self.arch!r}")
        if self.induction_steps < 0:
            raise ValueError(f"method.induction_steps must be >= 0, got {self.induction_steps}")
