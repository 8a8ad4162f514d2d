"""AutoQRA's run-config schema (``method=autoqra``): the search knobs, the CPU toy's sizes and the
paper stage's settings.

Light on purpose (stdlib and :mod:`common.config` only): the CLI loads it to check a composed config
before anything heavy is imported. Defaults are the official code's (github.com/harrysyz99/autoqra @
66a5de5: ``configs/*.yaml``, ``autoqra/search/phase2_evolution.py``, the real-task script).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from common.config import DatasetSpec, MethodConfig

TOY_ARMS = ("fp_lora", "uniform4", "uniform3_hi_rank", "sequential", "random_search", "autoqra")


@dataclass
class ToyConfig:
    """Sizes of the CPU toy "AutoQRA-tiny" (shrunk for a 2-core machine; see the doc's deviations)."""

    num_layers: int = 4
    hidden_size: int = 32
    intermediate_size: int = 96
    vocab: int = 32
    seq_len: int = 24
    markov_order: int = 2  # 2nd order, so the blocks (attention) carry the knowledge
    markov_support: int = 2  # successors per context (sparse: learnable in a few hundred steps)
    pretrain_steps: int = 400
    pretrain_batch: int = 16
    n_train: int = 1024
    n_heldout: int = 256
    task_shift: float = 0.3  # fraction of transition rows redrawn for S_task
    inject_outliers: bool = True
    outlier_blocks: list[int] = field(default_factory=lambda: [1])
    outlier_mode: str = "input"  # "input": RMSNorm-compensated input-channel outliers; "mlp"
    outlier_channels: int = 2
    outlier_factor: float = 32.0
    lf_steps: int = 6
    lf_n: int = 256
    hf_steps: int = 24
    hf_n: int = 1024
    final_steps: int = 40
    final_seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    lr: float = 3e-3
    batch: int = 16
    random_search: bool = True
    arms: list[str] = field(default_factory=lambda: list(TOY_ARMS))  # fine-tuned at the end

    def __post_init__(self) -> None:
        bad = sorted(set(self.arms) - set(TOY_ARMS))
        if bad:
            raise ValueError(f"method.toy.arms has unknown arms {bad}; choose from {TOY_ARMS}")
        if self.outlier_mode not in ("input", "mlp"):
            raise ValueError(
                f"method.toy.outlier_mode must be 'input' or 'mlp', got {self.outlier_mode!r}"
            )


@dataclass
class PaperConfig:
    """The ``paper`` stage: the official real-task evaluator (``autoqra/evaluation/real_task.py``):
    quantise + LoRA (r, α = 2r, dropout 0.05), Alpaca SFT at two fidelities, WinoGrande 0-shot.

    Attributes:
        sft_data: the Alpaca instruction data (hub id, or a local JSON / JSONL file through ``path``).
        quant_engine: ``hqq`` (the official backend, GPU) or ``fake`` (round-to-nearest, CPU tests).
        lf_ratio, lf_epochs / hf_ratio, hf_epochs: the two fidelities (data fraction, epochs).
        lr, batch, grad_accumulation, max_len, lora_dropout: the SFT of every evaluation.
        n_train, n_eval: first-k Alpaca examples / WinoGrande items (None = all).
        importance: JSON of precomputed priors (``Importance.from_json``); None computes them.
        dtype: the base model's dtype on GPU.
    """

    sft_data: DatasetSpec = field(
        default_factory=lambda: DatasetSpec(hub_id="tatsu-lab/alpaca", split="train")
    )
    quant_engine: str = "hqq"
    lf_ratio: float = 0.05
    lf_epochs: float = 0.1
    hf_ratio: float = 0.2
    hf_epochs: float = 0.5
    lr: float = 2e-4
    batch: int = 4
    grad_accumulation: int = 4
    max_len: int = 512
    lora_dropout: float = 0.05
    n_train: int | None = None
    n_eval: int | None = None
    importance: str | None = None

    def __post_init__(self) -> None:
        if self.quant_engine not in ("hqq", "fake"):
            raise ValueError(
                f"method.paper.quant_engine must be 'hqq' or 'fake', got {self.quant_engine!r}"
            )
        for n in ("lf_ratio", "hf_ratio"):
            if not 0 < getattr(self, n) <= 1:
                raise ValueError(f"method.paper.{n} must be in (0, 1], got {getattr(self, n)}")


@dataclass
class AutoQRARunConfig(MethodConfig):
    """``method=autoqra``: search-space and search knobs (official configs), ``toy`` sizes and the
    ``paper`` stage (the official real-task search on ``model``, scored on ``benchmark``).

    ``checkpoint_dir``: the search's checkpoint folder (both stages; a rerun resumes, a folder made with
    other settings is refused); None = ``run_dir/search``.
    """

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "AutoQRA-tiny: joint (bits, rank) search vs fixed allocations on a tiny Llama (CPU)",
        "paper": "AutoQRA search on `model`: HQQ + LoRA, Alpaca SFT at two fidelities, WinoGrande",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("paper",)
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ("causal_lm",)
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ("winogrande",)

    name: str = "autoqra"
    stage: str = "toy"
    Q: list[int] = field(default_factory=lambda: [2, 3, 4, 8])
    R: list[int] = field(default_factory=lambda: [4, 8, 16])
    budget_bits: int = 4  # budget = M(uniform budget_bits, budget_rank)·(1+slack)
    budget_rank: int = 8
    budget_slack: float = 0.0
    group_size: int = 128
    lora_bits: int = 16
    meta_bits: int = 16
    pop: int = 40
    gens: int = 12
    promote_k: int = 6
    k_neighbors: int = 5
    gamma: float = 1.5
    hv_eps: float = 1e-3
    hv_window: int = 3
    max_lowbit_fraction: float = 0.5
    offspring_ops: list[str] = field(default_factory=lambda: ["crossover", "mutation", "neighbors"])
    surrogate_training: str = "official"  # official warm refit per pair | scratch
    jitter_mode: str = "official"  # official 4 resets, a check after each | single_check
    init_promotion: str = "first"  # official first k | surrogate
    hv_include_init: bool = False  # official: HV history from generation 1
    alpha: float = 0.6
    bo_iters: int = 3
    k_bo: int = 5
    checkpoint_dir: str | None = None
    toy: ToyConfig = field(default_factory=ToyConfig)
    paper: PaperConfig = field(default_factory=PaperConfig)
