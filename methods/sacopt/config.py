"""SAC-Opt's run-config schema (``method=sacopt``).

Light on purpose (stdlib and :mod:`common.config` only): the CLI loads it to check a composed config
before anything heavy is imported. The defaults are the official code's (github.com/Forrest-Stone/
SAC-Opt @ 464a40d, ``run.py``, ``execute_code.py``, ``model2data.py``); docs/methods/sacopt.md lists
every deviation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from common.config import MethodConfig

TOY_ARMS = ("single_pass", "debug_only", "sacopt_judge", "sacopt_minilm", "sacopt_judge_nofreeze")


@dataclass
class SACOptRunConfig(MethodConfig):
    """``method=sacopt``: the method's settings (official ``run.py`` defaults), the CPU toy's sizes
    (``stage=toy``) and the paper stage (``stage=paper``: every set of ``benchmark`` through an
    OpenAI-compatible endpoint, ``seeds`` runs). Also the library's config (``SACOptConfig``).

    The LLM is an API model (``llm_model`` at ``llm_base_url``), not a checkpoint, so the method
    selects no ``model`` group; ``benchmark`` (format ``or_clean``) names the seven cleaned sets.
    """

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "200 synthetic LPs, simulated error-prone coder: one pass vs debug vs SAC-Opt",
        "paper": "SAC-Opt on every set of `benchmark` via an OpenAI-compatible endpoint",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("paper",)
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ("or_clean",)

    name: str = "sacopt"
    stage: str = "toy"
    t_max: int = 5
    debug_tries: int = 3
    verifier: str = "llm_judge"  # llm_judge | minilm
    tau: float = 0.75
    verify_objective: bool = True
    freeze_verified: bool = True
    recon_reference: str = "anchor"  # anchor | all
    backend: str = "highspy"
    solver_fallback: bool = True  # gurobipy missing or licence-limited -> rerun on HiGHS
    timeout_s: float = 120.0
    mem_mb: int = 4096
    # Deviation: neither the official code nor LLM4OR states a tolerance; 1e-4 relative is inferred
    # (docs/methods/sacopt.md, deviations).
    rtol: float = 1e-4
    atol: float = 1e-6
    # official ERROR_CORRECTION = True (run.py): parameter / variable self-checks and the
    # per-constraint confidence check with keep / remove / modify
    self_check: bool = True
    constraint_check: bool = True
    judge_match: str = "exact"  # exact "YES" (official model2data.py) | lenient
    # official execute_code.py: infeasible / unbounded programs crash on model.objVal -> debugged
    debug_statuses: list[str] = field(
        default_factory=lambda: ["error", "infeasible", "unbounded", "infeasible_or_unbounded"]
    )
    # toy
    n_problems: int = 200
    p_err: float = 0.25
    p_syntax: float = 0.05
    judge_false_pass: float = 0.05
    judge_false_fail: float = 0.05
    toy_workers: int = 2
    arms: list[str] = field(default_factory=lambda: list(TOY_ARMS))
    detection_problems: int = 100
    # paper scale
    llm_model: str = "gpt-4o"
    llm_base_url: str | None = None
    llm_api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    llm_seed: int = 42
    data_root: str | None = None  # library use without a benchmark group (run_benchmark)
    datasets: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    workers: int = 8
    max_problems: int | None = None  # first k problems per dataset (smoke runs); None = all

    def __post_init__(self) -> None:
        if not isinstance(self.t_max, int) or self.t_max < 0:
            raise ValueError(f"t_max must be an int >= 0, got {self.t_max!r}")
        if not isinstance(self.debug_tries, int) or self.debug_tries < 0:
            raise ValueError(f"debug_tries must be an int >= 0, got {self.debug_tries!r}")
        if not 0 < self.tau <= 1:
            raise ValueError(f"tau must be in (0, 1], got {self.tau!r}")
        if self.verifier not in ("llm_judge", "minilm"):
            raise ValueError(f"verifier must be 'llm_judge' or 'minilm', got {self.verifier!r}")
        bad = [a for a in self.arms if a not in TOY_ARMS]
        if bad:
            raise ValueError(f"arms {bad} unknown; choose from {TOY_ARMS}")
        if self.judge_match not in ("exact", "lenient"):
            raise ValueError(f"judge_match must be 'exact' or 'lenient', got {self.judge_match!r}")
        if "error" not in self.debug_statuses:
            raise ValueError(f"debug_statuses must include 'error', got {self.debug_statuses!r}")
        if self.max_problems is not None and self.max_problems < 1:
            raise ValueError(f"max_problems must be >= 1 or null, got {self.max_problems!r}")
        if not isinstance(self.workers, int) or self.workers < 1:
            raise ValueError(f"workers must be an int >= 1, got {self.workers!r}")
        for n in ("p_err", "p_syntax", "judge_false_pass", "judge_false_fail"):
            if not 0 <= getattr(self, n) <= 1:
                raise ValueError(f"{n} must be in [0, 1], got {getattr(self, n)!r}")
