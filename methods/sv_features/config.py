"""The run-config schema of sv_features (``method=sv_features``): toys, synthetic, real-model stages.

Light on purpose (stdlib and :mod:`common.config` only): the CLI loads it to type-check a composed
config before any heavy import. The real-model stages take their checkpoint from the ``model`` group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from common.config import MethodConfig

TOYS = ("single", "multi", "closed_form", "sad")
ROPE_BASES = ("per_offset", "fixed")


@dataclass
class ToyConfig:
    """Toy hyper-parameters (paper §3.1). ``pairs``: ``[i, j, weight]`` entries of the template ``T``."""

    n_features: int = 20
    d_model: int = 10
    d_head: int = 10
    n_keys: int = 8
    feature_prob: float = 0.1
    importance_decay: float = 1.0
    lam: float = 1.0
    lr: float = 1e-3
    batch: int = 1024
    steps: int = 10_000
    logit_scale: float = 1.0
    attn_loss: str = "ce"
    recon_on_keys: bool = False
    lr_schedule: str = "constant"  # or "cosine" (decay to 0: separates near-degenerate sigma_k)
    pairs: list[list[float]] = field(default_factory=lambda: [[0, 1, 1.0]])
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("n_features", "d_model", "d_head", "batch"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.n_keys < 1:
            raise ValueError(f"n_keys must be >= 1, got {self.n_keys}")
        if not 0 < self.feature_prob <= 1:
            raise ValueError(f"feature_prob must be in (0, 1], got {self.feature_prob}")
        if self.lam < 0:
            raise ValueError(f"lam must be >= 0, got {self.lam}")
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")
        if self.lr_schedule not in ("constant", "cosine"):
            raise ValueError(
                f"lr_schedule must be 'constant' or 'cosine', got {self.lr_schedule!r}"
            )
        if self.attn_loss not in ("ce", "mse"):
            raise ValueError(f"attn_loss must be 'ce' or 'mse', got {self.attn_loss!r}")
        self.pairs = tuple(tuple(p) for p in self.pairs)


@dataclass
class MatchTaskConfig:
    """Sizes of the matching task and of the one-layer model."""

    n_classes: int = 8
    tokens_per_class: int = 6
    seq_len: int = 8
    d_model: int = 32
    n_heads: int = 2
    steps: int = 1500
    batch: int = 64
    lr: float = 3e-3
    n_eval: int = 128
    tau: float = 0.9
    seed: int = 0

    def __post_init__(self) -> None:
        if self.seq_len - 1 > self.n_classes:
            raise ValueError("seq_len - 1 must be <= n_classes (distinct classes before the query)")
        if self.seq_len < 3:
            raise ValueError(f"seq_len must be >= 3, got {self.seq_len}")


@dataclass
class MultiPairsConfig:
    """Toy B's template: pairs ``(i, i + offset)`` with weights falling linearly (paper §4)."""

    n_pairs: int = 20
    offset: int = 20
    w_max: float = 2.0
    w_min: float = 0.1


@dataclass
class ClosedFormConfig:
    """Toy C: the sampled least-squares fit against the closed form (paper §3.2)."""

    d: int = 6
    n: int = 10
    samples: int = 200_000
    a: int = 0
    b: int = 1


@dataclass
class RealConfig:
    """The real-model stages (paper §5): SAD of ``model`` on IOI prompts.

    Attributes:
        tokenizer: tokenizer id/path when it differs from the model's (a checkpoint sweep folder).
        n_prompts: IOI prompts (paper: 128).
        heads: ``[[layer, head], ...]`` for ``stage=ioi``; empty = every head.
        firing_thresh: minimum attention of an analysed edge (official SAD ``attn_thresh`` 0.5;
            the checkpoint stage uses 0 since untrained checkpoints have no firing edges).
        tau: ``N_recon`` fraction.
        checkpoints: revisions for ``stage=checkpoints`` (explicit list) ...
        n_checkpoints: ... or this many Pythia revisions (:func:`pythia_revisions`).
        head: ``[layer, head]`` of the checkpoint stage; empty = the head attending most from end to
            IO at the last revision.
        fold_ln: fold LayerNorm into the weights (TransformerLens default, the authors' pipeline).
        rope_basis: ``per_offset`` (exact SVD per offset) or ``fixed`` (the authors' tracer).
    """

    tokenizer: str | None = None
    n_prompts: int = 128
    heads: list[list[int]] = field(default_factory=list)
    firing_thresh: float = 0.5
    tau: float = 0.9
    checkpoints: list[str] = field(default_factory=list)
    n_checkpoints: int = 0
    head: list[int] = field(default_factory=list)
    fold_ln: bool = False
    rope_basis: str = "per_offset"

    def __post_init__(self) -> None:
        if self.rope_basis not in ROPE_BASES:
            raise ValueError(
                f"method.real.rope_basis must be one of {ROPE_BASES}, got {self.rope_basis!r}"
            )
        if self.n_prompts < 1:
            raise ValueError(f"method.real.n_prompts must be >= 1, got {self.n_prompts}")
        if self.head and len(self.head) != 2:
            raise ValueError(f"method.real.head must be [layer, head], got {self.head}")


@dataclass
class SVFeaturesRunConfig(MethodConfig):
    """``method=sv_features``: the CPU toys, the paper's synthetic experiments and real models."""

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "toys A-D at CPU sizes: alignment, rank vs weight, closed form, SAD emergence",
        "synthetic": "paper §4: the same toys at the paper's sizes (experiment=sv_features_paper)",
        "ioi": "paper §5: SAD of every head of `model` on IOI prompts (GPT-2 small)",
        "checkpoints": "paper §5: SAD of one IOI head of `model` over training checkpoints (Pythia)",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("synthetic", "ioi", "checkpoints")
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ("causal_lm",)

    name: str = "sv_features"
    stage: str = "toy"
    toys: list[str] = field(default_factory=lambda: list(TOYS))
    single: ToyConfig = field(default_factory=ToyConfig)
    multi: ToyConfig = field(
        default_factory=lambda: ToyConfig(n_features=100, d_model=50, d_head=50)
    )
    multi_pairs: MultiPairsConfig = field(default_factory=MultiPairsConfig)
    closed_form: ClosedFormConfig = field(default_factory=ClosedFormConfig)
    sad: MatchTaskConfig = field(default_factory=MatchTaskConfig)
    real: RealConfig = field(default_factory=RealConfig)
    log_every: int = 50
    plots: bool = True

    def __post_init__(self) -> None:
        bad = [t for t in self.toys if t not in TOYS]
        if bad:
            raise ValueError(f"method.toys has unknown toys {bad}; choose from {list(TOYS)}")
