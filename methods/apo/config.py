"""APO's run-config schema (``method=apo``): the bandit toy's sizes and arms, the paper stage's data
and evaluation settings.

Light on purpose (stdlib and :mod:`common.config` only): the CLI loads it to type-check a composed
config before any heavy import. The trainer knobs (λ, β, K, clipping, anchor ratio, and every TRL
setting) are fields of :class:`methods.apo.trainer.APOConfig` (a ``trl.GRPOConfig``), passed as the
``trainer`` node of ``configs/experiment/apo_paper.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from common.config import DatasetSpec, MethodConfig

CLIP_MODE_NAMES: tuple[str, ...] = ("rectified", "token_only", "none")
"""How the rectified ratio is clipped (:data:`methods.apo.CLIP_MODES`)."""
ANCHOR_FORM_NAMES: tuple[str, ...] = ("paper_linear", "log", "ref_xent")
"""The anchor forms (:data:`methods.apo.ANCHOR_FORMS`)."""
ANCHOR_RATIO_NAMES: tuple[str, ...] = ("ref", "old")
"""The policy the virtual anchor ratio is taken against (:data:`methods.apo.ANCHOR_RATIO_TO`)."""
HARD_RANK_BANDS: dict[str, tuple[int, int]] = {"top": (0, 2), "current": (2, 8), "rare": (5, 8)}
"""Where a hard prompt's one valid action sits in the reference ranking (0-based [lo, hi)): ``top``
ranks 1-2, ``current`` ranks 3-8 (the toy's default), ``rare`` ranks 6-8 (our diagnosis knob)."""
TRAINER_ARMS: tuple[str, ...] = ("apo", "grpo", "grpo_kl", "kl_on_wrong")
BOXED_INSTRUCTION = "\nPlease reason step by step, and put your final answer within \\boxed{}."


@dataclass
class BanditConfig:
    """Toy A1 sizes and training settings (our toy design: a 16-armed shared-parameter bandit).

    Attributes:
        n_actions: A, the vocabulary of the bandit.
        n_prompts: P.
        emb_dim: D; prompt embeddings are N(0, 1/D).
        frac_easy: share of easy prompts.
        steps: SGD steps per arm.
        prompts_per_step: B.
        group_size: G samples per prompt.
        lr: SGD step size on (s, W).
        kl_coef: coefficient of the exact KL for ``grpo_kl`` and ``kl_on_wrong``.
        adv_eps: ε in A = (R − mean) / (std + ε) (std with Bessel's correction).
        eval_every: steps between evaluations (curves).
        pass_ks: the k of the exact Pass@k metrics.
        hard_rank_band: a key of :data:`HARD_RANK_BANDS`: the reference ranks a hard prompt's valid
            action is drawn from (``current``, ranks 3-8, is the toy as documented).
        grad_probe: at every evaluation, also log where the step moves the hard actions (the
            anchor, KL and policy-gradient parts of the first-order change of mean hard
            log p_valid, and the anchor's share of the hard action's logit gradient); costs a few
            extra backward passes, changes no trained number.
    """

    n_actions: int = 16
    n_prompts: int = 200
    emb_dim: int = 8
    frac_easy: float = 0.7
    steps: int = 600
    prompts_per_step: int = 32
    group_size: int = 8
    lr: float = 0.5
    kl_coef: float = 0.05
    adv_eps: float = 1e-6
    eval_every: int = 25
    pass_ks: list[int] = field(default_factory=lambda: [1, 8, 64])
    hard_rank_band: str = "current"
    grad_probe: bool = False

    def __post_init__(self) -> None:
        if self.hard_rank_band not in HARD_RANK_BANDS:
            raise ValueError(
                f"hard_rank_band must be one of {list(HARD_RANK_BANDS)}, got {self.hard_rank_band!r}"
            )
        if self.n_actions < 9:
            raise ValueError(f"n_actions must be >= 9 (ranks 2-8 must exist), got {self.n_actions}")
        if not 0 < self.frac_easy < 1:
            raise ValueError(f"frac_easy must be in (0, 1), got {self.frac_easy}")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (group std), got {self.group_size}")
        if self.prompts_per_step > self.n_prompts:
            raise ValueError(
                f"prompts_per_step ({self.prompts_per_step}) must be <= n_prompts ({self.n_prompts})"
            )


@dataclass
class BanditArm:
    """One training arm: the loss settings for :func:`run_bandit_arm`.

    Attributes:
        name: the arm's label in tables and plots.
        lam: push coefficient λ (1.0 and ``beta=0`` give GRPO).
        beta: pull coefficient β.
        k: safe-manifold size K.
        kl: ``"none"``, ``"all"`` (GRPO+KL) or ``"wrong"`` (KL-on-Wrong).
        clip_mode: one of :data:`CLIP_MODE_NAMES`.
        anchor_form: one of :data:`ANCHOR_FORM_NAMES` (``paper_linear`` is the paper's).
        anchor_ratio_to: ``ref`` or ``old`` (:data:`ANCHOR_RATIO_NAMES`): the policy the
            virtual anchor ratio is taken against (the source is ambiguous; both are offered).
        kl_coef: this arm's KL coefficient; None takes :attr:`BanditConfig.kl_coef`.
    """

    name: str
    lam: float = 1.0
    beta: float = 0.0
    k: int = 8
    kl: str = "none"
    clip_mode: str = "rectified"
    anchor_form: str = "paper_linear"
    anchor_ratio_to: str = "ref"
    kl_coef: float | None = None

    def __post_init__(self) -> None:
        if self.kl_coef is not None and self.kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0 or None, got {self.kl_coef}")
        if self.anchor_ratio_to not in ANCHOR_RATIO_NAMES:
            raise ValueError(
                f"anchor_ratio_to must be one of {list(ANCHOR_RATIO_NAMES)}, got "
                f"{self.anchor_ratio_to!r}"
            )
        if self.kl not in ("none", "all", "wrong"):
            raise ValueError(f"kl must be 'none', 'all' or 'wrong', got {self.kl!r}")
        if self.clip_mode not in CLIP_MODE_NAMES:
            raise ValueError(
                f"clip_mode must be one of {list(CLIP_MODE_NAMES)}, got {self.clip_mode!r}"
            )
        if self.anchor_form not in ANCHOR_FORM_NAMES:
            raise ValueError(
                f"anchor_form must be one of {list(ANCHOR_FORM_NAMES)}, got {self.anchor_form!r}"
            )


@dataclass
class PaperEvalConfig:
    """Sampling of the evaluation after each arm: unbiased Pass@k for k = 1, 2, 4, ..., n (inferred)."""

    n: int = 64
    temperature: float = 0.6
    max_new_tokens: int = 3072

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"method.eval.n must be >= 1, got {self.n}")
        if self.max_new_tokens < 1:
            raise ValueError(f"method.eval.max_new_tokens must be >= 1, got {self.max_new_tokens}")

    @property
    def ks(self) -> list[int]:
        """The k of Pass@k: powers of two up to ``n``."""
        return [2**i for i in range(self.n.bit_length()) if 2**i <= self.n]


@dataclass
class APORunConfig(MethodConfig):
    """``method=apo``: the bandit toy (``stage=toy``) and the paper stage (``stage=paper``).

    Attributes:
        seeds: toy seeds (one bandit instance and sampling stream per seed).
        threads: torch CPU threads for the toy (1 is fastest for these tiny tensors).
        toy: toy sizes.
        apo_arm: the toy's APO arm (paper λ, β, K; the other main arms are GRPO, GRPO+KL and
            KL-on-Wrong with the same K).
        extra_arms: more labelled toy arms (β sweeps, the π_old anchor ratio, diagnostic forms).
        arms: the arms of the paper stage, each a fresh copy of ``model`` with the same trainer
            node: ``apo`` (the trainer node as given), ``grpo`` (λ = 1, β = 0), ``grpo_kl`` and
            ``kl_on_wrong`` (GRPO plus a k3 KL of coefficient ``kl_coef``).
        kl_coef: the KL coefficient of the ``grpo_kl`` / ``kl_on_wrong`` arms.
        train_data: the RL prompts (DAPO-Math-17k by hub id, or a local MATH-layout file).
        prompt_suffix: appended to every training and evaluation problem.
        trainer: fields of :class:`methods.apo.trainer.APOConfig` (TRL ``GRPOConfig``).
        eval: Pass@k sampling on every set of ``benchmark``.
    """

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "bandit toy A1: GRPO, GRPO+KL, KL-on-Wrong and APO from one reference (CPU)",
        "train": "paper: APOTrainer arms on `model` over train_data; checkpoints per arm",
        "eval": "paper: Pass@k of `model` (e.g. model.path=<checkpoint>) on `benchmark`",
        "paper": "paper: base Pass@k, then train + Pass@k of every arm (train and eval in one run)",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("paper",)
    TRAINERS: ClassVar[dict[str, str]] = {"trainer": "methods.apo.trainer:APOConfig"}
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ("causal_lm",)
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ("math",)

    name: str = "apo"
    stage: str = "toy"
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    threads: int = 1
    toy: BanditConfig = field(default_factory=BanditConfig)
    apo_arm: BanditArm = field(
        default_factory=lambda: BanditArm(name="apo", lam=1.05, beta=0.1, k=8)
    )
    extra_arms: list[BanditArm] = field(default_factory=list)
    arms: list[str] = field(default_factory=lambda: list(TRAINER_ARMS))
    kl_coef: float = 0.001
    train_data: DatasetSpec = field(
        default_factory=lambda: DatasetSpec(hub_id="BytedTsinghua-SIA/DAPO-Math-17k", split="train")
    )
    prompt_suffix: str = BOXED_INSTRUCTION
    trainer: dict[str, Any] = field(default_factory=dict)
    eval: PaperEvalConfig = field(default_factory=PaperEvalConfig)

    def __post_init__(self) -> None:
        bad = sorted(set(self.arms) - set(TRAINER_ARMS))
        if bad or not self.arms:
            raise ValueError(
                f"method.arms must be a non-empty subset of {list(TRAINER_ARMS)}, got {self.arms}"
            )
        if self.kl_coef < 0:
            raise ValueError(f"method.kl_coef must be >= 0, got {self.kl_coef}")
        if not self.seeds:
            raise ValueError("method.seeds must not be empty")
        names = ["grpo", "grpo_kl", "kl_on_wrong", self.apo_arm.name] + [
            a.name for a in self.extra_arms
        ]
        if len(set(names)) != len(names):
            raise ValueError(f"toy arm names must be unique, got {names}")
