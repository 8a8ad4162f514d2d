"""MCCE's run-config schema (``method=mcce``): the search, the toy's sizes, the paper stage.

Light on purpose (stdlib and :mod:`common.config` only): the CLI loads it to type-check a composed
config before any heavy import. The preference round's settings are not mirrored here: they are
fields of the TRL configs in :mod:`methods.mcce.train` (``MCCEDPOConfig``, ``MCCESFTConfig``,
``MCCEGRPOConfig``), passed as the ``dpo`` / ``sft`` / ``grpo`` trainer nodes of the presets. The
paper stage loads its local model through the model group (``model=qwen2_5_7b_instruct``) and calls
the API model through an OpenAI-compatible endpoint; its problem data (initial population, TDC oracle
files) are paths of the run config, since the molecule task is not an evaluation suite.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from common.config import MethodConfig

MODES = (
    "single_api",
    "single_local",
    "coevolve_frozen",
    "coevolve_dpo",
    "coevolve_sft",
    "coevolve_rl",
)
ARM_MODES = {
    "explorer_only": "single_api",
    "local_only": "single_local",
    "coevolve_frozen": "coevolve_frozen",
    "coevolve_dpo": "coevolve_dpo",
    "coevolve_sft": "coevolve_sft",
    "coevolve_rl": "coevolve_rl",
}


@dataclass
class MCCEConfig:
    """Search settings (defaults: the official molecule config, `problem/molecules/config.yaml`,
    `algorithm/MOO.py`). The training round's settings are a TRL config (`methods.mcce.train`)."""

    mode: str = "coevolve_dpo"
    pop_size: int = 50  # repo config
    n_off: int = 2  # repo --num_offspring
    budget: int = 5000  # unique valid molecules, initial population included
    crossover_prob: float = 0.8  # repo config
    mutation_prob: float = 0.2  # repo config
    explore_prob: float = 0.0  # repo config
    experience_prob: float = 0.5  # repo config
    first_model: str = "local"  # "local" | "api"; repo: the first generation uses the local model
    train_every: int = 1  # rounds of each model between preference rounds (repo: 1)
    n_pairs_max: int = 128  # repo: latest 128 trajectory records
    alpha_top: float = 0.3  # repo makerldata_dpov3
    alpha_ext: float = 0.5
    alpha_bottom: float = 0.3
    bands: list[float] = field(default_factory=lambda: [0.7, 0.6, 0.5])
    s_max: float = 0.8
    min_archive_for_training: int = 10  # bad-input rule
    conversational: bool = True  # our choice; False = repo_compat raw strings
    prompt_style: str = "chat"
    response_sep: str = "\n"
    hv_ref: float = 1.1
    hv_top: int = 100
    auc_freq: int = 100
    max_llm_failures: int = 3
    max_stall_generations: int = 50  # stop when no new molecule appears for this many generations
    repo_compat: bool = False
    # generation 1 mates within: "all" valid initial molecules (official MOO.run: population =
    # evaluate(initial)) | "select" (the best pop_size by nsga2_so_select, our earlier rule)
    initial_population: str = "all"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.pop_size < 2:
            raise ValueError(f"pop_size must be >= 2 (two parents per call), got {self.pop_size}")
        if self.n_off < 1:
            raise ValueError(f"n_off must be >= 1, got {self.n_off}")
        probs = (self.crossover_prob, self.mutation_prob, self.explore_prob)
        if min(probs) < 0 or sum(probs) <= 0:
            raise ValueError(
                f"operator probabilities must be >= 0 with a positive sum, got {probs}"
            )
        if not 0.0 <= self.experience_prob <= 1.0:
            raise ValueError(f"experience_prob must be in [0, 1], got {self.experience_prob}")
        if self.initial_population not in ("all", "select"):
            raise ValueError(
                f"initial_population must be 'all' or 'select', got {self.initial_population!r}"
            )
        if self.first_model not in ("local", "api"):
            raise ValueError(f"first_model must be 'local' or 'api', got {self.first_model!r}")


@dataclass
class MCCERunConfig(MethodConfig):
    """``method=mcce``: the CPU toy (``stage=toy``) and the paper's run (``stage=paper``).

    Attributes:
        arms: toy arms (``ARM_MODES``); the paper stage runs ``search.mode``.
        seeds: toy seeds (offset by the run's ``seed``).
        search: the co-evolution loop's settings.
        dpo, sft, grpo: trainer nodes, fields of ``MCCEDPOConfig`` / ``MCCESFTConfig`` /
            ``MCCEGRPOConfig`` (the round of ``coevolve_dpo`` / ``_sft`` / ``_rl``).
        warmup_*, max_parent_tokens, n_positions, explorer_max_edits, init_max_f: toy sizes.
        local_temperature, local_top_p, local_max_new_tokens: the local model's sampling
            (official ``model/LLM.py``: T = 0.7, top-p 0.95, 128 new tokens).
        api_model, api_base_url, api_key_env: the frozen explorer's OpenAI-compatible endpoint.
        init_file: the paper's initial population (SMILES file; official ZINC ``random1``, 100).
        oracle_dir: folder of the TDC oracle model files (``drd2_current.pkl``, ...).
        checkpoint_dir: per-generation state (a rerun resumes); None = the run folder.
        use_vllm, vllm_gpu_memory_utilization: the local model's generation engine.
    """

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "3 RDKit objectives, SELFIES explorer vs tiny GPT, 4 arms (CPU, minutes)",
        "paper": "GPT-4o + `model` (Qwen2.5-7B-Instruct), 5 objectives, DPO rounds, budget 5000",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("paper",)
    TRAINERS: ClassVar[dict[str, str]] = {
        "dpo": "methods.mcce.train:MCCEDPOConfig",
        "sft": "methods.mcce.train:MCCESFTConfig",
        "grpo": "methods.mcce.train:MCCEGRPOConfig",
    }
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ("causal_lm",)
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ()

    name: str = "mcce"
    stage: str = "toy"
    arms: list[str] = field(
        default_factory=lambda: ["explorer_only", "local_only", "coevolve_frozen", "coevolve_dpo"]
    )
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    search: MCCEConfig = field(default_factory=MCCEConfig)
    dpo: dict[str, Any] = field(default_factory=dict)
    sft: dict[str, Any] = field(default_factory=dict)
    grpo: dict[str, Any] = field(default_factory=dict)
    # toy: local model warm-up and sampling (our CPU toy)
    warmup_steps: int = 80
    warmup_batch: int = 16
    warmup_lr: float = 3e-3
    warmup_pairs: int = 2000
    warmup_molecules: int = 5000  # NCI molecules used for the vocabulary and warm-up parents
    max_parent_tokens: int = 24
    n_positions: int = 256
    local_temperature: float = 0.7  # official LLM.py: T = 0.7, top_p = 0.95
    local_top_p: float = 0.95
    local_max_new_tokens: int = 80  # official: 128 (the paper preset sets it)
    explorer_max_edits: int = 3
    init_max_f: float | None = None  # toy: keep only seeds with F below this (room to improve)
    # paper
    api_model: str = "gpt-4o-2024-05-13"  # official problem/molecules/config.yaml
    api_base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    init_file: str | None = None
    oracle_dir: str = "oracle"
    checkpoint_dir: str | None = None
    use_vllm: bool = True  # paper scale: vLLM generation, engine rebuilt after each round
    vllm_gpu_memory_utilization: float = 0.3  # vLLM shares the GPU with policy + reference

    def __post_init__(self) -> None:
        bad = [a for a in self.arms if a not in ARM_MODES]
        if bad:
            raise ValueError(f"method.arms must be among {sorted(ARM_MODES)}, got {bad}")
        if not self.seeds:
            raise ValueError("method.seeds must list at least one seed")
