"""AutoQRA Stage 1: multi-fidelity evolution (official search/phase2_evolution.py).

Stage 1 warm-starts a population from the importance priors (Eq. 6), makes offspring with the paper's
operators (uniform crossover, importance-guided and coupled mutation) and the repo's atomic neighbours
(Eq. 11), repairs every candidate to the memory budget (Eqs. 4-5), evaluates all at low fidelity, promotes
the surrogate's (Eq. 7) top ``promote_k`` to high fidelity and keeps an NSGA-II population over ``(-P, M)``
with Deb's constrained domination. Every generation is checkpointed (records, population, RNG state) and
every evaluation is cached (``state.EvaluationCache``), so a killed run resumes without repeating or
losing an evaluation; the folder is bound to the run's settings (``state.search_settings``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from common.checkpoint import atomic_write_json, check_settings

from .evaluators import EvalResult, Evaluator
from .importance import Importance
from .memory import MemoryModel
from .nsga import constrained_fronts, environmental_selection, hypervolume_2d
from .operators import (
    atomic_neighbors,
    cap_lowbit,
    crossover_uniform,
    jitter,
    mutate_coupled,
    mutate_importance_guided,
    repair_to_budget,
    warm_start,
)
from .space import QRConfig, SearchSpace
from .state import EvaluationCache, search_settings
from .surrogate import FidelitySurrogate, surrogate_features

logger = logging.getLogger(__name__)

OFFSPRING_OPS = ("crossover", "mutation", "neighbors")


@dataclass
class EvolutionConfig:
    """Stage 1 knobs (repo configs: pop 40, gens 12, promote 6, k 5, γ 1.5, HV ε 1e-3 / window 3)."""

    pop: int = 40
    gens: int = 12
    promote_k: int = 6
    k_neighbors: int = 5
    gamma: float = 1.5
    hv_eps: float = 1e-3
    hv_window: int = 3
    max_lowbit_fraction: float = 1.0
    offspring_ops: tuple[str, ...] = OFFSPRING_OPS  # ("neighbors",) reproduces the repo's loop
    n_crossover: int | None = (
        None  # default: pop // 2 children by crossover (+ mutation) per generation
    )
    surrogate_min_samples: int = 10
    # Official-code behaviour by default (autoqra/search/phase2_evolution.py @ 66a5de5); the earlier
    # choices of this repository stay available as options (docs/methods/autoqra.md, deviations).
    surrogate_training: str = "official"  # "official" (warm refit per pair) | "scratch"
    jitter_mode: str = (
        "official"  # "official" (4 resets, a budget check after each) | "single_check"
    )
    init_promotion: str = (
        "first"  # "first" k members (official) | "surrogate" (top-k by prediction)
    )
    hv_include_init: bool = False  # official: the HV history starts at the first generation

    def __post_init__(self) -> None:
        self.offspring_ops = tuple(self.offspring_ops)
        if self.pop < 2:
            raise ValueError(f"pop must be >= 2, got {self.pop}")
        if not 1 <= self.promote_k <= self.pop:
            raise ValueError(f"promote_k must be in [1, pop={self.pop}], got {self.promote_k}")
        if self.k_neighbors < 1:
            raise ValueError(f"k_neighbors must be >= 1, got {self.k_neighbors}")
        if self.gens < 0:
            raise ValueError(f"gens must be >= 0, got {self.gens}")
        for name, val, ok in (
            ("surrogate_training", self.surrogate_training, ("official", "scratch")),
            ("jitter_mode", self.jitter_mode, ("official", "single_check")),
            ("init_promotion", self.init_promotion, ("first", "surrogate")),
        ):
            if val not in ok:
                raise ValueError(f"{name} must be one of {ok}, got {val!r}")
        bad = [o for o in self.offspring_ops if o not in OFFSPRING_OPS]
        if bad or not self.offspring_ops:
            raise ValueError(
                f"offspring_ops must be a non-empty subset of {OFFSPRING_OPS}, got {bad}"
            )


@dataclass
class Record:
    """One evaluated configuration: ``{q, r, plow, phigh?, mem}`` (the repo's record schema)."""

    q: list[int]
    r: list[int]
    plow: float
    mem: float
    phigh: float | None = None
    gen: int = 0
    origin: str = "init"

    @property
    def cfg(self) -> QRConfig:
        """The record's configuration as a :class:`QRConfig`; engineering,
        not in the paper.
        """
        return QRConfig(tuple(self.q), tuple(self.r))


@dataclass
class ParetoResult:
    """Stage 1 output: the feasible first front among HF-evaluated records, all records, HV history."""

    pareto: list[Record]
    records: list[Record]
    hv_history: list[float]
    op_counts: dict[str, int] = field(default_factory=dict)
    n_evals: dict[str, int] = field(default_factory=dict)


# ----------------------------------------------------------------------------- Stage 1
class MultiFidelityEvolution:
    """Stage 1 (official search/phase2_evolution.py) with checkpoint/resume.

    Args:
        space, memory, importance: the search space, Eq. 1 and the priors.
        evaluator: ``evaluate(cfg, "low"|"high") -> EvalResult``.
        budget: ``B_max`` in bytes (no stage returns or promotes a configuration above it).
        cfg: ``EvolutionConfig``.
        seed: RNG seed. checkpoint: JSON path written every generation (``None``: no checkpoint); its
            folder is bound to the settings (``<stem>.settings.json``) and holds the evaluation cache
            (``<stem>.cache.json``). A resume with other settings raises ``CheckpointMismatch``.
    """

    def __init__(
        self,
        space: SearchSpace,
        memory: MemoryModel,
        importance: Importance,
        evaluator: Evaluator,
        budget: float,
        cfg: EvolutionConfig | None = None,
        seed: int = 0,
        checkpoint: str | Path | None = None,
    ) -> None:
        importance.check_length(space.num_layers)
        if memory.num_layers != space.num_layers:
            raise ValueError(f"memory has {memory.num_layers} layers, space has {space.num_layers}")
        memory.check_budget(budget, space.minimum())
        self.space, self.memory, self.importance = space, memory, importance
        self.evaluator, self.budget = evaluator, float(budget)
        self.cfg = cfg or EvolutionConfig()
        self.seed = int(seed)
        self.checkpoint = Path(checkpoint) if checkpoint else None
        self.rng = np.random.default_rng(self.seed)
        self.cache = EvaluationCache(None)
        if self.checkpoint is not None:
            check_settings(
                self.checkpoint.parent,
                search_settings(space, memory, importance, evaluator, budget, self.cfg, self.seed),
                name=f"{self.checkpoint.stem}.settings.json",
            )
            self.cache = EvaluationCache(self.checkpoint.with_suffix(".cache.json"))
        self.records: dict[str, Record] = {}
        self.population: list[str] = []
        self.hv_history: list[float] = []
        self.hv_ref: np.ndarray | None = None
        self.op_counts = {"crossover": 0, "mutation": 0, "coupled": 0, "neighbors": 0, "jitter": 0}
        self.surrogate = FidelitySurrogate(
            min_samples=self.cfg.surrogate_min_samples,
            seed=self.seed,
            training=self.cfg.surrogate_training,
        )
        self.surrogate_keys: list[str] = []
        self.next_gen = 0

    # -- evaluation cache and checkpoint
    def _evaluate(self, c: QRConfig, fidelity: str) -> EvalResult:
        return self.cache.evaluate(self.evaluator, c, fidelity)

    @property
    def n_evals(self) -> dict[str, int]:
        """Evaluations run per fidelity, from the cache keys (exact across resumes).

        Source: engineering (resume bookkeeping), not in the paper.
        """
        return {"low": 0, "high": 0, **self.cache.counts()}

    def _save_state(self) -> None:
        if self.checkpoint is None:
            return
        state = {
            "next_gen": self.next_gen,
            "records": [asdict(r) for r in self.records.values()],
            "population": self.population,
            "hv_history": self.hv_history,
            "hv_ref": None if self.hv_ref is None else self.hv_ref.tolist(),
            "rng": self.rng.bit_generator.state,
            "op_counts": self.op_counts,
            "surrogate_keys": self.surrogate_keys,
        }
        atomic_write_json(self.checkpoint, state)

    def _load(self) -> bool:
        if self.checkpoint is None or not self.checkpoint.exists():
            return False
        st = json.loads(self.checkpoint.read_text())
        self.records = {}
        for d in st["records"]:
            rec = Record(**d)
            self.records[rec.cfg.key()] = rec
        self.population = st["population"]
        self.hv_history = st["hv_history"]
        self.hv_ref = None if st["hv_ref"] is None else np.asarray(st["hv_ref"])
        self.rng.bit_generator.state = st["rng"]
        self.op_counts = st["op_counts"]
        self.next_gen = st["next_gen"]
        self.surrogate_keys = list(st["surrogate_keys"])
        per_pair = self.surrogate.refit_per_pair
        for key in self.surrogate_keys:  # same pairs in the same order: the refits are identical
            rec = self.records[key]
            self.surrogate.update(self._features(rec), rec.phigh, refit=per_pair)
        if not per_pair:
            self.surrogate.fit()
        logger.info(
            "resumed AutoQRA search at generation %d (%d records)", self.next_gen, len(self.records)
        )
        return True

    # -- helpers
    def _features(self, rec: Record) -> np.ndarray:
        return surrogate_features(rec.cfg, rec.plow, rec.mem, self.space, self.importance)

    def _fix(self, c: QRConfig) -> QRConfig:
        """Repair, cap the low-bit layers, repair again protecting them (our choice (docs deviations))."""
        c = repair_to_budget(c, self.space, self.memory, self.importance, self.budget)
        c, promoted = cap_lowbit(c, self.space, self.importance, self.cfg.max_lowbit_fraction)
        return repair_to_budget(c, self.space, self.memory, self.importance, self.budget, promoted)

    def _perf(self, rec: Record) -> float:
        # our choice (docs deviations): rank LF-only records by the surrogate's predicted P_high
        return rec.phigh if rec.phigh is not None else self.surrogate.predict(self._features(rec))

    def _add_low(self, c: QRConfig, gen: int, origin: str) -> Record | None:
        if c.key() in self.records:
            return None
        res = self._evaluate(c, "low")
        rec = Record(list(c.q), list(c.r), res.perf, self.memory.total_bytes(c), None, gen, origin)
        self.records[c.key()] = rec
        return rec

    def _promote(self, recs: list[Record], ranked: bool = True) -> None:
        """HF-evaluate ``promote_k`` of ``recs``: the surrogate's top-k, or (``ranked=False``) the first k
        in population order, as the official initial promotion (``high_fid=(i < promote_k)``)."""
        if ranked:
            recs = sorted(recs, key=lambda r: -self.surrogate.predict(self._features(r)))
        per_pair = self.surrogate.refit_per_pair
        for rec in recs[: self.cfg.promote_k]:
            if rec.mem > self.budget:  # never promote an over-budget configuration
                continue
            rec.phigh = self._evaluate(rec.cfg, "high").perf
            self.surrogate.update(self._features(rec), rec.phigh, refit=per_pair)
            self.surrogate_keys.append(rec.cfg.key())
        if not per_pair:
            self.surrogate.fit()

    def _offspring(self) -> list[tuple[QRConfig, str]]:
        parents = [self.records[k].cfg for k in self.population]
        out: list[tuple[QRConfig, str]] = []
        ops = self.cfg.offspring_ops
        if "crossover" in ops or "mutation" in ops:
            n_x = (
                self.cfg.n_crossover
                if self.cfg.n_crossover is not None
                else max(1, self.cfg.pop // 2)
            )
            for _ in range(n_x):
                if "crossover" in ops and len(parents) >= 2:
                    i, j = self.rng.choice(len(parents), size=2, replace=False)
                    child = crossover_uniform(parents[int(i)], parents[int(j)], self.rng)
                    self.op_counts["crossover"] += 1
                    origin = "crossover"
                else:
                    child = parents[int(self.rng.integers(len(parents)))]
                    origin = "mutation"
                if "mutation" in ops:
                    if self.rng.random() < 0.3:
                        child = mutate_coupled(
                            child, self.space, self.importance, self.rng, self.cfg.gamma
                        )
                        self.op_counts["coupled"] += 1
                    else:
                        child = mutate_importance_guided(
                            child, self.space, self.importance, self.rng, self.cfg.gamma
                        )
                        self.op_counts["mutation"] += 1
                out.append((child, origin))
        if "neighbors" in ops:
            for p in parents:
                for n in atomic_neighbors(p, self.space, self.cfg.k_neighbors, self.rng):
                    self.op_counts["neighbors"] += 1
                    out.append((n, "neighbors"))
        return out

    def _select(self, record_hv: bool = True) -> None:
        keys = list(self.records)
        recs = [self.records[k] for k in keys]
        F = np.asarray([[-self._perf(r), r.mem] for r in recs])
        viol = np.maximum(0.0, np.asarray([r.mem for r in recs]) - self.budget)
        idx = environmental_selection(F, viol, self.cfg.pop)
        self.population = [keys[i] for i in idx]
        front = [recs[i] for i in constrained_fronts(F, viol)[0] if viol[i] <= 0]
        Ff = np.asarray([[-self._perf(r), r.mem] for r in front]) if front else np.zeros((0, 2))
        if self.hv_ref is None and len(
            Ff
        ):  # fixed from the initial population (our choice (docs deviations))
            worst = F[:, 0].max()
            self.hv_ref = np.asarray(
                [0.9 * worst if worst < 0 else 1.1 * worst + 1e-12, 1.1 * F[:, 1].max()]
            )
        if record_hv:
            self.hv_history.append(hypervolume_2d(Ff, self.hv_ref) if len(Ff) else 0.0)

    def _converged(self) -> bool:
        w = self.cfg.hv_window
        if len(self.hv_history) <= w:
            return False
        now, past = self.hv_history[-1], self.hv_history[-1 - w]
        return now >= past > 0 and (now - past) / past < self.cfg.hv_eps

    def run(self) -> ParetoResult:
        """Run (or resume) Stage 1 and return the feasible HF-evaluated first front.

        Source: official ``search/phase2_evolution.py`` (Stage 1); our deviations are listed in the
        method doc.
        """
        resumed = self._load()
        if not resumed:
            c0 = self._fix(warm_start(self.space, self.importance))
            init = [c0]
            for _ in range(self.cfg.pop - 1):
                self.op_counts["jitter"] += 1
                c = jitter(
                    c0, self.space, self.memory, self.budget, self.rng, mode=self.cfg.jitter_mode
                )
                init.append(self._fix(c))
            recs = [r for r in (self._add_low(c, 0, "init") for c in init) if r is not None]
            self._promote(recs, ranked=self.cfg.init_promotion == "surrogate")
            self._select(record_hv=self.cfg.hv_include_init)
            self.next_gen = 1
            self._save_state()
        while self.next_gen <= self.cfg.gens:
            if self._converged():
                logger.info("HV converged at generation %d", self.next_gen - 1)
                break
            g = self.next_gen
            kids = []
            for child, origin in self._offspring():
                rec = self._add_low(self._fix(child), g, origin)
                if rec is not None:
                    kids.append(rec)
            self._promote(kids)
            self._select()
            self.next_gen = g + 1
            self._save_state()
        return self.result()

    def result(self) -> ParetoResult:
        """The Stage 1 result from the current records (official ``search/phase2_evolution.py``: the
        HF-evaluated first front).
        """
        recs = list(self.records.values())
        hf = [r for r in recs if r.phigh is not None and r.mem <= self.budget]
        pareto: list[Record] = []
        if hf:
            F = np.asarray([[-r.phigh, r.mem] for r in hf])
            pareto = [hf[i] for i in constrained_fronts(F, np.zeros(len(hf)))[0]]
            pareto.sort(key=lambda r: r.mem)
        return ParetoResult(
            pareto, recs, list(self.hv_history), dict(self.op_counts), dict(self.n_evals)
        )


def evolutionary_search(
    space, memory, importance, evaluator, budget, cfg=None, seed=0, checkpoint=None
):
    """Functional form of Stage 1: ``MultiFidelityEvolution(...).run()``.

    Source: official ``search/phase2_evolution.py``.
    """
    return MultiFidelityEvolution(
        space, memory, importance, evaluator, budget, cfg, seed, checkpoint
    ).run()
