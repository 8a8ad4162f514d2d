"""AutoQRA search, both stages (official autoqra_runner.py): Stage 1 multi-fidelity evolution
(``evolution.py``, official search/phase2_evolution.py) then Stage 2 trust-region BO (``bo.py``, official
search/phase3_bo.py), with one checkpoint folder bound to the settings (``state.py``).

The names of the former single module stay importable from here.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

from common.checkpoint import CheckpointMismatch, check_settings

from .bo import Selection, embed, expected_improvement, trust_region, trust_region_bo
from .evolution import (
    OFFSPRING_OPS,
    EvolutionConfig,
    MultiFidelityEvolution,
    ParetoResult,
    Record,
    evolutionary_search,
)
from .nsga import constrained_fronts, crowding_distance, environmental_selection, hypervolume_2d
from .state import BO_PREFIX, EvaluationCache, search_settings

__all__ = [
    "BO_PREFIX",
    "OFFSPRING_OPS",
    "AutoQRA",
    "CheckpointMismatch",
    "EvaluationCache",
    "EvolutionConfig",
    "MultiFidelityEvolution",
    "ParetoResult",
    "Record",
    "Selection",
    "constrained_fronts",
    "crowding_distance",
    "embed",
    "environmental_selection",
    "evolutionary_search",
    "expected_improvement",
    "hypervolume_2d",
    "search_settings",
    "trust_region",
    "trust_region_bo",
]

logger = logging.getLogger(__name__)

EPS_EI = 1e-4  # Eq. 13 stopping threshold (official phase3_bo.py)


# ----------------------------------------------------------------------------- both stages
class AutoQRA:
    """Stage 1 + Stage 2 end to end; ``run(outdir)`` writes the repo's three JSON files.

    Source: official ``autoqra_runner.py`` (Stage 1 then Stage 2 on the Pareto front).

    Args:
        space, memory, importance, evaluator, budget: as for ``MultiFidelityEvolution``.
        evo: ``EvolutionConfig``. alpha: utility preference (0.6). bo_iters: BO iterations (3).
        k_bo: neighbours per centre in Ω (5). seed: RNG seed.
    """

    def __init__(
        self,
        space,
        memory,
        importance,
        evaluator,
        budget,
        evo=None,
        alpha=0.6,
        bo_iters=3,
        k_bo=5,
        seed=0,
    ):
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        self.space, self.memory, self.importance = space, memory, importance
        self.evaluator, self.budget, self.evo = evaluator, budget, evo or EvolutionConfig()
        self.alpha, self.bo_iters, self.k_bo, self.seed = alpha, bo_iters, k_bo, seed

    def settings(self) -> dict:
        """The flat settings ``run(outdir)`` binds ``outdir`` to (``state.search_settings``).

        Source: engineering (checkpoint binding), not in the paper.
        """
        return search_settings(
            self.space, self.memory, self.importance, self.evaluator, self.budget, self.evo,
            self.seed, alpha=self.alpha, bo_iters=self.bo_iters, k_bo=self.k_bo, eps_ei=EPS_EI,
        )  # fmt: skip

    def run(self, outdir: str | Path | None = None) -> tuple[ParetoResult, Selection]:
        """Run (or resume from ``outdir``) both stages; ``outdir`` made with other settings is refused
        (``CheckpointMismatch`` naming each differing key).

        Source: official ``autoqra_runner.py`` (Stage 1 then Stage 2).
        """
        t0 = time.perf_counter()
        ckpt = None
        if outdir:
            Path(outdir).mkdir(parents=True, exist_ok=True)
            check_settings(outdir, self.settings())
            ckpt = Path(outdir) / "phase2_checkpoint.json"
        evo = MultiFidelityEvolution(
            self.space, self.memory, self.importance, self.evaluator, self.budget, self.evo,
            self.seed, ckpt,
        )  # fmt: skip
        stage1 = evo.run()
        sel = trust_region_bo(
            stage1.pareto, self.space, self.memory, self.importance, self.evaluator, self.budget,
            self.alpha, self.bo_iters, self.k_bo, EPS_EI, seed=self.seed, cache=evo.cache,
        )  # fmt: skip
        logger.info("AutoQRA search finished in %.1fs", time.perf_counter() - t0)
        if outdir:
            out = Path(outdir)
            keep = ("q", "r", "plow", "phigh", "mem")
            pareto = [{k: v for k, v in asdict(r).items() if k in keep} for r in stage1.pareto]
            (out / "phase2_pareto.json").write_text(json.dumps(pareto, indent=1))
            d = asdict(sel)
            hist = d.pop("history")
            (out / "phase3_selected.json").write_text(json.dumps(d, indent=1))
            (out / "phase3_history.json").write_text(json.dumps(hist, indent=1))
        return stage1, sel
