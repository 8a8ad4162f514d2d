"""MaxRL's run-config schema (``method=maxrl``): the toys' sizes and the paper stages' settings.

Light on purpose (stdlib and :mod:`common.config` only): the CLI loads it to type-check a composed
config before any heavy import. Trainer knobs are not mirrored here: the paper's GRPO/MaxRL settings
are fields of :class:`methods.maxrl.trainer.MaxRLConfig` (a ``trl.GRPOConfig``), passed as the
``trainer`` node of ``configs/experiment/maxrl_paper.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from common.config import DatasetSpec, MethodConfig

TOY_METHODS = ("ce", "maxrl", "grpo", "reinforce")
QWEN3_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."  # repo
#: the system turn of the paper's Qwen3 prompt template (App. E.3); the official data scripts
#: (examples/maxrl_data_preprocess/polaris.py) have no system turn and append QWEN3_SUFFIX instead
PAPER_SYSTEM = "Please reason step by step and put the final answer in \\boxed{}."
GSM8K_SUFFIX = " Let's think step by step and output the final answer within \\boxed{}."  # App. E.2


@dataclass
class ClassificationToyConfig:
    """Toy T1 settings: the ImageNet experiment of App. D.2 scaled down to a CPU."""

    num_classes: int = 500  # initial pass rate 1/500, like ImageNet's ~0.1% start
    dim: int = 64
    noise: float = 0.5
    n_train: int = 50_000
    n_val: int = 5_000
    batch_size: int = 128
    steps: int = 800
    lr: float = 0.1  # one SGD learning rate shared by all methods
    eval_every: int = 50
    grad_corr_step: int = 200  # step at which per-example grad norm vs pass rate is measured
    grad_corr_examples: int = 1000
    ks: list[int] = field(default_factory=lambda: [1, 16, 128])

    def __post_init__(self):
        for name in ("num_classes", "dim", "n_train", "n_val", "batch_size", "steps", "eval_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {self.num_classes}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


@dataclass
class MazeToyConfig:
    """Toy T2 settings, scaled down from the 17×17 maze experiment (paper §6.2, App. E.1)."""

    size: int = 7
    sft_lr: float = 5e-4  # App. E.1.3
    sft_batch: int = 32  # App. E.1.3
    sft_max_steps: int = 400
    sft_check_every: int = 50
    sft_band: tuple[float, float] = (0.2, 0.5)  # stop SFT once held-out pass@1 lies here
    rl_steps: int = 150
    rl_prompts: int = 16
    num_generations: int = 16
    rl_lr: float = 1e-4  # App. E.1.3
    eval_mazes: int = 128
    eval_samples: int = 64
    eval_k: int = 16
    max_completion_length: int = 24
    hidden_size: int = 64

    def __post_init__(self):
        if self.size < 5 or self.size % 2 == 0:
            raise ValueError(f"size must be odd and >= 5, got {self.size}")
        if self.num_generations < 2:
            raise ValueError(f"num_generations must be >= 2, got {self.num_generations}")
        if not 1 <= self.eval_k <= self.eval_samples:
            raise ValueError(f"eval_k must lie in [1, eval_samples], got {self.eval_k}")


def _check_system_prompt(value: str | None, name: str) -> None:
    if value is not None and not value.strip():
        raise ValueError(f"{name} must be null (no system turn) or a non-empty text, got {value!r}")


@dataclass
class PaperEvalConfig:
    """Sampling of the ``eval`` stage (Table 6: T = 0.6, top-p 0.95; n up to 4096 in the paper).

    Attributes:
        n: samples per problem; pass@k is reported for k = 1, 2, 4, ..., n.
        n_by_set: per-set n, by ``benchmark.sets`` name, in place of ``n`` (the paper: 4096 for
            AIME25 / BeyondAIME, 2048 for MATH-500 / Minerva, Table 7); a name the benchmark
            does not have is an error. None: ``n`` for every set.
        system_prompt: the system turn (None: none, the official scripts' form).
        prompt_suffix: appended to each problem in the user turn.
    """

    n: int = 1024
    n_by_set: dict[str, int] | None = None
    temperature: float = 0.6  # Table 6
    top_p: float = 0.95  # Table 6
    max_new_tokens: int = 4096  # Table 6 (max response length)
    engine: str = "vllm"  # vllm | hf
    system_prompt: str | None = PAPER_SYSTEM  # App. E.3 template box
    prompt_suffix: str = ""  # App. E.3: the instruction is the system turn

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"method.eval.n must be >= 1, got {self.n}")
        bad = {k: v for k, v in (self.n_by_set or {}).items() if v < 1}
        if bad:
            raise ValueError(f"method.eval.n_by_set values must be >= 1, got {bad}")
        _check_system_prompt(self.system_prompt, "method.eval.system_prompt")
        if self.engine not in ("vllm", "hf"):
            raise ValueError(f"method.eval.engine must be 'vllm' or 'hf', got {self.engine!r}")


@dataclass
class MaxRLRunConfig(MethodConfig):
    """``method=maxrl``: toy T1 (``stage=toy``), toy T2 (``maze``) and the paper's stages.

    Attributes:
        methods: toy T1 arms (``ce`` is exact maximum likelihood, the others sample N rollouts).
        n_rollouts: toy T1 rollout counts N (App. D.2 uses 16 / 128 / 1024).
        t1: toy T1 sizes. t2: toy T2 sizes.
        train_data: the RL prompts of the ``train`` stage (POLARIS-53K; a local GSM8K/MATH-layout
            file through ``method.train_data.path``).
        system_prompt: the system turn of every training prompt (the paper's template, App. E.3;
            None: no system turn, as the official data scripts).
        prompt_suffix: appended to every training problem in the user turn (the official scripts
            append QWEN3_SUFFIX; the paper's template puts the instruction in the system turn).
        trainer: fields of :class:`methods.maxrl.trainer.MaxRLConfig` (TRL ``GRPOConfig``).
        eval: sampling of the ``eval`` stage, which scores ``model`` on ``benchmark``.
        compare_files: the two ``eval.json`` files of the ``compare`` stage (method, baseline).
    """

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "toy T1, linear policy on Gaussian classes: CE vs REINFORCE vs GRPO vs MaxRL",
        "maze": "toy T2, SFT then GRPO vs MaxRL on mazes (TRL, tiny Qwen2)",
        "train": "paper: MaxRLTrainer on `model` over train_data (accelerate, vLLM rollouts)",
        "eval": "paper: pass@k of `model` on every set of `benchmark`",
        "compare": "paper: test-time-scaling efficiency of two eval.json files (Fig. 5)",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("train", "eval", "compare")
    TRAINERS: ClassVar[dict[str, str]] = {"trainer": "methods.maxrl.trainer:MaxRLConfig"}
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ("causal_lm",)
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ("math",)

    name: str = "maxrl"
    stage: str = "toy"
    methods: list[str] = field(default_factory=lambda: list(TOY_METHODS))
    n_rollouts: list[int] = field(default_factory=lambda: [16, 128, 1024])
    t1: ClassificationToyConfig = field(default_factory=ClassificationToyConfig)
    t2: MazeToyConfig = field(default_factory=MazeToyConfig)
    train_data: DatasetSpec = field(
        default_factory=lambda: DatasetSpec(
            hub_id="POLARIS-Project/Polaris-Dataset-53K", split="train"
        )
    )
    system_prompt: str | None = PAPER_SYSTEM  # App. E.3 template box
    prompt_suffix: str = ""  # App. E.3 (official scripts: QWEN3_SUFFIX, no system turn)
    trainer: dict[str, Any] = field(default_factory=dict)
    eval: PaperEvalConfig = field(default_factory=PaperEvalConfig)
    compare_files: list[str] = field(default_factory=list)

    def __post_init__(self):
        bad = [m for m in self.methods if m not in TOY_METHODS]
        if bad:
            raise ValueError(f"method.methods has unknown names {bad}; valid: {list(TOY_METHODS)}")
        if not self.n_rollouts or min(self.n_rollouts) < 1:
            raise ValueError(f"method.n_rollouts must be positive counts, got {self.n_rollouts}")
        _check_system_prompt(self.system_prompt, "method.system_prompt")
