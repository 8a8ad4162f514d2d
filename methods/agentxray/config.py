"""AgentXRay's run-config schema (``method=agentxray``): the search, the toy's sizes, the paper stage.

Light on purpose (stdlib and :mod:`common.config` only): the CLI loads it to type-check a composed
config before any heavy import. The paper stage reads its datasets from the benchmark group
(``configs/benchmark/agentxray.yaml``: one set per AgentXRay subset, by hub id or local folder) and
calls an OpenAI-compatible chat endpoint (hosted, or ``vllm serve``) for the profile generator and
every agent; it loads no checkpoint itself, so there is no model group. No training, no trainer node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from common.config import MethodConfig

ARMS = ("red_black", "no_coloring", "pure_random", "direct_random")
PAPER_ARMS = ("red_black", "no_coloring", "pure_random")
SIMILARITY_NAMES = ("sfe", "tfidf")
PAPER_TOOLS = ("compiler", "syntax_error_checker", "empty_detect")
HIDDEN_CHAIN: tuple[str, ...] = (
    "Coder",
    "LoopImplementer",
    "ErrorHandler",
    "ClassWrapper",
    "Tester",
)
# A longer, harder black box for the "is the toy too easy?" check: six steps, two of them
# (Docstringer, Serializer) with near-miss distractors available (TypeHinter, ConfigWriter).
HIDDEN_CHAIN_LONG: tuple[str, ...] = (
    "Coder",
    "LoopImplementer",
    "ErrorHandler",
    "Docstringer",
    "ClassWrapper",
    "Serializer",
)


@dataclass
class MCTSConfig:
    """Search settings (defaults: official code ``search/tree.py``, ``config/config.yaml``)."""

    iterations: int = 20  # repo CLI default
    max_children: int = 16  # M, repo configs
    max_depth: int = 6  # L_max, repo
    beta: float = 0.5  # quantile β, repo
    c_ucb: float = 1.4  # C_p, repo hard-coded
    coloring: bool = True  # False = unpruned MCTS ablation (all black)
    min_agent_ratio: float = 0.4  # repo
    max_tools_per_node: int = 10  # repo
    sim_agent_bias: float = 0.55  # repo rollout tool/agent bias
    early_stop: float = 0.8  # repo hard-coded
    min_workflow_len: int = 2  # repo
    pure_random: bool = False  # random tree policy ablation
    potential_bonus: bool = False  # Deviation: repo's always-on enhanced UCB is off (our choice)
    full_profile_quota: bool = True  # repo: each expansion generates A − #agents profiles
    zero_score_black: bool = (
        False  # ours (issue 43): score 0 is never red; repo: red iff score ≥ θ_β
    )
    seed: int = 0

    def __post_init__(self) -> None:
        if self.iterations < 0:
            raise ValueError(f"iterations must be >= 0, got {self.iterations}")
        if self.max_children < 1:
            raise ValueError(f"max_children must be >= 1, got {self.max_children}")
        if self.max_depth < 2:
            raise ValueError(
                f"max_depth must be >= 2 (a workflow needs 2 steps), got {self.max_depth}"
            )
        if not 0.0 < self.beta <= 1.0:
            raise ValueError(f"beta must be in (0, 1], got {self.beta}")
        if self.c_ucb < 0:
            raise ValueError(f"c_ucb must be >= 0, got {self.c_ucb}")
        if not 0.0 <= self.min_agent_ratio <= 1.0:
            raise ValueError(f"min_agent_ratio must be in [0, 1], got {self.min_agent_ratio}")
        if self.potential_bonus:
            raise ValueError(
                "potential_bonus=True (repo enhanced UCB) is not implemented; use False"
            )

    @property
    def agent_quota(self) -> int:
        """A = max(1, ⌊M·min_agent_ratio⌋) agent children per node (official code ``search/tree.py``)."""
        return max(1, math.floor(self.max_children * self.min_agent_ratio))

    @property
    def tool_quota(self) -> int:
        """Tq = min(M − A, max_tools_per_node) tool children per node (official code ``search/tree.py``)."""
        return max(0, min(self.max_children - self.agent_quota, self.max_tools_per_node))


@dataclass
class AgentXRayRunConfig(MethodConfig):
    """``method=agentxray``: the toy (``stage=toy``) and the paper's search (``stage=paper``).

    Attributes:
        search: the MCTS settings shared by both stages (official ``search/tree.py`` defaults).
        similarity: ``sfe`` (code) or ``tfidf`` (text); ``similarity_by_set`` overrides it per
            benchmark set (the paper's text domain).
        arms: which searches to run (toy: all four; paper: the first three are available).
        iterations, seeds, noise: toy budgets N, seeds and black-box noise rates.
        n_train, n_test, data_seed, hidden_chain, n_distractors, random_budget,
        tokens_per_profile: toy sizes and cost model.
        landscape, landscape_alpha: the toy's reward (issue-43 diagnosis): ``output`` (default)
            scores outputs with ``similarity``; ``chain`` scores the agents a chain ran,
            (1 − α)·Jaccard of the agent sets + α·(longest correct prefix / L) (``landscape.py``).
        sets: which sets of the benchmark the paper stage runs ([] = all of them).
        train_samples, test_samples: caps on the pairs per set (None = all).
        hub_revision, hub_cache_dir: hub snapshot settings for sets given by hub id.
        llm_model, base_url, llm_api_key_env, model_menu, default_model: the chat endpoint.
        tools: tool primitives of the paper stage. compiler_timeout: seconds per compiler run.
        compiler_isolation: ``bwrap`` (bubblewrap sandbox) or ``unsafe-no-sandbox`` (named
            explicitly: limits and a clean environment only).
        checkpoint_dir: where every MCTS search (toy and paper) saves its state after each
            iteration and journals its LLM calls and tool runs; rerunning the same command
            resumes, a folder made with other settings is refused naming the setting.
    """

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "XRayBench-lite: hidden chain of code-transforming agents, 4 arms at N = 20/60",
        "paper": "Red-Black vs unpruned MCTS on the benchmark's AgentXRay subsets, OpenAI-compatible LLM",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("paper",)
    TRAINERS: ClassVar[dict[str, str]] = {}
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ()
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ("agentxray",)

    name: str = "agentxray"
    stage: str = "toy"
    search: MCTSConfig = field(default_factory=MCTSConfig)
    similarity: str = "sfe"  # sfe | tfidf (text domains, our choice per domain)
    similarity_by_set: dict[str, str] = field(default_factory=dict)
    arms: list[str] = field(default_factory=lambda: list(ARMS))
    # toy
    iterations: list[int] = field(default_factory=lambda: [20, 60])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    noise: list[float] = field(default_factory=lambda: [0.0, 0.1])
    n_train: int = 8
    n_test: int = 8
    data_seed: int = 0
    hidden_chain: list[str] = field(default_factory=lambda: list(HIDDEN_CHAIN))
    n_distractors: int = 0  # near-miss agents added to Ω (0–12)
    random_budget: str = "executions"  # direct_random: executions (red_black's) | iterations
    tokens_per_profile: int | None = None  # None: tokenizer count of the generator call; int: fixed
    landscape: str = (
        "output"  # output: `similarity` on outputs (today) | chain: Sim_α (landscape.py)
    )
    landscape_alpha: float = 0.0  # chain: α of (1 − α)·presence-Jaccard + α·correct-prefix/L
    # paper
    sets: list[str] = field(default_factory=list)
    train_samples: int | None = None
    test_samples: int | None = None
    hub_revision: str | None = None
    hub_cache_dir: str | None = None
    llm_api_key_env: str = "OPENAI_API_KEY"
    llm_model: str = "gpt-4o-mini"
    base_url: str | None = None
    model_menu: list[str] = field(default_factory=lambda: ["gpt-4o-mini", "gpt-3.5-turbo"])
    default_model: str = "gpt-4o-mini"
    tools: list[str] = field(default_factory=lambda: list(PAPER_TOOLS))
    compiler_timeout: float = 30.0  # official tools/compiler.py
    compiler_isolation: str = "bwrap"
    checkpoint_dir: str | None = None  # per-search checkpoints + call journals; a rerun resumes

    def __post_init__(self) -> None:
        bad = [a for a in self.arms if a not in ARMS]
        if bad:
            raise ValueError(f"method.arms must be drawn from {ARMS}, got {bad}")
        sims = [self.similarity, *self.similarity_by_set.values()]
        if any(s not in SIMILARITY_NAMES for s in sims):
            raise ValueError(
                f"method.similarity / similarity_by_set must be one of {SIMILARITY_NAMES}, "
                f"got {sims}"
            )
        if any(n < 0 for n in self.iterations):
            raise ValueError(f"method.iterations must be >= 0, got {self.iterations}")
        if self.random_budget not in ("executions", "iterations"):
            raise ValueError(
                "method.random_budget must be 'executions' or 'iterations', "
                f"got {self.random_budget!r}"
            )
        if self.landscape not in ("output", "chain"):
            raise ValueError(
                f"method.landscape must be 'output' or 'chain', got {self.landscape!r}"
            )
        if not 0.0 <= self.landscape_alpha <= 1.0:
            raise ValueError(
                f"method.landscape_alpha must be in [0, 1], got {self.landscape_alpha}"
            )
        if not self.hidden_chain:
            raise ValueError("method.hidden_chain must name at least one toy agent")
        if any(not 0.0 <= r < 1.0 for r in self.noise):
            raise ValueError(f"method.noise rates must be in [0, 1), got {self.noise}")
        unknown = [t for t in self.tools if t not in PAPER_TOOLS]
        if unknown:
            raise ValueError(f"method.tools {unknown} not implemented; choose from {PAPER_TOOLS}")
        if self.compiler_isolation not in ("bwrap", "unsafe-no-sandbox"):
            raise ValueError(
                "method.compiler_isolation must be 'bwrap' or 'unsafe-no-sandbox', "
                f"got {self.compiler_isolation!r}"
            )
        if self.compiler_timeout <= 0:
            raise ValueError(f"method.compiler_timeout must be > 0, got {self.compiler_timeout}")
