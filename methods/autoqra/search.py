"""AutoQRA search: Stage 1 multi-fidelity evolution (official search/phase2_evolution.py) and Stage 2 trust-region BO (official search/phase3_bo.py).

Stage 1 warm-starts a population from the importance priors, makes offspring with the paper's operators
(uniform crossover, importance-guided and coupled mutation) and the repo's atomic neighbours, repairs every
candidate to the memory budget, evaluates all at low fidelity, promotes the surrogate's top ``promote_k`` to
high fidelity and keeps an NSGA-II population over ``(-P, M)`` with Deb's constrained domination. Every
generation is checkpointed (records, population, RNG state, evaluation cache) and a killed run resumes
without repeating finished evaluations. Stage 2 fits a Matérn-5/2 GP to the utility ``f = αP̃ - (1-α)M̃``
(Eq. 8) of the Pareto set and evaluates the EI maximiser (Eq. 10) over repaired atomic neighbourhoods (Eq. 11).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from scipy.stats import norm

from common.metrics import hypervolume

from .evaluators import EvalResult, Evaluator, check_result
from .importance import Importance
from .memory import MemoryModel
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
        return QRConfig(tuple(self.q), tuple(self.r))


@dataclass
class ParetoResult:
    """Stage 1 output: the feasible first front among HF-evaluated records, all records, HV history."""

    pareto: list[Record]
    records: list[Record]
    hv_history: list[float]
    op_counts: dict[str, int] = field(default_factory=dict)
    n_evals: dict[str, int] = field(default_factory=dict)


# ----------------------------------------------------------------------------- NSGA-II pieces
def constrained_fronts(F: np.ndarray, violation: np.ndarray) -> list[np.ndarray]:
    """Deb's constrained non-dominated sorting (our choice (docs deviations)): feasible points by Pareto rank first, then
    infeasible points ordered by violation (lower violation dominates). ``F`` is [n, m], minimised."""
    from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

    F = np.asarray(F, dtype=float)
    feas = np.flatnonzero(violation <= 0)
    fronts: list[np.ndarray] = []
    if feas.size:
        for fr in NonDominatedSorting().do(F[feas]):
            fronts.append(feas[np.asarray(fr)])
    infeas = np.flatnonzero(violation > 0)
    for v in np.unique(violation[infeas]):
        fronts.append(infeas[violation[infeas] == v])
    return fronts


def crowding_distance(F: np.ndarray) -> np.ndarray:
    """NSGA-II crowding distance (pymoo); boundary points get ``inf``."""
    from pymoo.operators.survival.rank_and_crowding.metrics import calc_crowding_distance

    F = np.asarray(F, dtype=float)
    if len(F) <= 2:
        return np.full(len(F), np.inf)
    return np.asarray(calc_crowding_distance(F), dtype=float)


def environmental_selection(F: np.ndarray, violation: np.ndarray, n: int) -> list[int]:
    """Fill fronts in order; split the last one by descending crowding distance."""
    chosen: list[int] = []
    for fr in constrained_fronts(F, violation):
        if len(chosen) + len(fr) <= n:
            chosen.extend(int(i) for i in fr)
        else:
            cd = crowding_distance(F[fr])
            order = np.argsort(-cd, kind="stable")
            chosen.extend(int(fr[i]) for i in order[: n - len(chosen)])
        if len(chosen) >= n:
            break
    return chosen


def hypervolume_2d(F: np.ndarray, ref: np.ndarray) -> float:
    """HV of minimised 2-D points w.r.t. ``ref`` (pymoo through ``common.metrics.hypervolume``)."""
    F = np.asarray(F, dtype=float)
    F = F[np.all(ref > F, axis=1)]
    return 0.0 if len(F) == 0 else hypervolume(F, ref)


# ----------------------------------------------------------------------------- Stage 1
class MultiFidelityEvolution:
    """Stage 1 (official search/phase2_evolution.py) with checkpoint/resume.

    Args:
        space, memory, importance: the search space, Eq. 1 and the priors.
        evaluator: ``evaluate(cfg, "low"|"high") -> EvalResult``.
        budget: ``B_max`` in bytes (no stage returns or promotes a configuration above it).
        cfg: ``EvolutionConfig``.
        seed: RNG seed. checkpoint: JSON path written every generation (``None``: no checkpoint).
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
        self.cache: dict[str, dict] = {}
        self.records: dict[str, Record] = {}
        self.population: list[str] = []
        self.hv_history: list[float] = []
        self.hv_ref: np.ndarray | None = None
        self.op_counts = {"crossover": 0, "mutation": 0, "coupled": 0, "neighbors": 0, "jitter": 0}
        self.n_evals = {"low": 0, "high": 0}
        self.surrogate = FidelitySurrogate(
            min_samples=self.cfg.surrogate_min_samples,
            seed=self.seed,
            training=self.cfg.surrogate_training,
        )
        self.surrogate_keys: list[str] = []
        self.next_gen = 0

    # -- evaluation with a persistent cache
    def _evaluate(self, c: QRConfig, fidelity: str) -> EvalResult:
        key = f"{c.key()}:{fidelity}"
        if key in self.cache:
            return EvalResult(**self.cache[key])
        res = check_result(self.evaluator.evaluate(c, fidelity), c, fidelity)
        self.n_evals[fidelity] = self.n_evals.get(fidelity, 0) + 1
        self.cache[key] = asdict(res)
        self._save_cache()
        return res

    def _save_cache(self) -> None:
        if self.checkpoint is not None:
            p = self.checkpoint.with_suffix(".cache.json")
            tmp = p.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.cache))
            tmp.replace(p)

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
            "n_evals": self.n_evals,
            "surrogate_keys": self.surrogate_keys,
        }
        tmp = self.checkpoint.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.checkpoint)

    def _load(self) -> bool:
        if self.checkpoint is None:
            return False
        cache_p = self.checkpoint.with_suffix(".cache.json")
        if cache_p.exists():
            self.cache = json.loads(cache_p.read_text())
        if not self.checkpoint.exists():
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
        self.op_counts, self.n_evals = st["op_counts"], st["n_evals"]
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
        """Run (or resume) Stage 1 and return the feasible HF-evaluated first front."""
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
    """Functional form of Stage 1: ``MultiFidelityEvolution(...).run()``."""
    return MultiFidelityEvolution(
        space, memory, importance, evaluator, budget, cfg, seed, checkpoint
    ).run()


# ----------------------------------------------------------------------------- Stage 2
def expected_improvement(mu, sigma, f_best: float) -> np.ndarray:
    """Eq. 10 (maximisation, no ξ): ``σ[zΦ(z) + φ(z)]``, ``z = (μ - f*)/σ``; 0 where σ ≤ 1e-8."""
    mu, sigma = np.asarray(mu, dtype=float), np.asarray(sigma, dtype=float)
    out = np.zeros_like(mu)
    ok = sigma > 1e-8
    z = (mu[ok] - f_best) / sigma[ok]
    out[ok] = sigma[ok] * (z * norm.cdf(z) + norm.pdf(z))
    return out


def embed(cfg: QRConfig, space: SearchSpace, importance: Importance) -> np.ndarray:
    """Eq. 9: ``ψ(C) = [s_q(q), s_r(r), q_cov, r_cov]`` ∈ R^{2L+2}."""
    sq, sr = space.s_q(np.asarray(cfg.q)), space.s_r(np.asarray(cfg.r))
    s = importance.score
    return np.concatenate([sq, sr, [np.mean(s * sq), np.mean(s * sr)]])


@dataclass
class Selection:
    """Stage 2 output ``{q, r, phigh, mem, utility, alpha}`` plus the BO history."""

    q: list[int]
    r: list[int]
    phigh: float
    mem: float
    utility: float
    alpha: float
    history: list[dict] = field(default_factory=list)


def trust_region_bo(
    pareto: list[Record],
    space: SearchSpace,
    memory: MemoryModel,
    importance: Importance,
    evaluator: Evaluator,
    budget: float,
    alpha: float = 0.6,
    max_iter: int = 3,
    k: int = 5,
    eps_ei: float = 1e-4,
    seed: int = 0,
) -> Selection:
    """Stage 2 (official search/phase3_bo.py): GP (Matérn-5/2) + EI over repaired atomic neighbourhoods of the Pareto set.

    Utility (Eq. 8) ``f = αP̃ - (1-α)M̃`` with P̃, M̃ min-max normalised over the Pareto set. Proposals are
    evaluated at high fidelity with the real evaluator (our choice (docs deviations)). With fewer than 3 Pareto points the
    BO is skipped (warning) and the best-utility Pareto point is returned.
    """
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if not pareto:
        raise ValueError("pareto is empty: Stage 1 found no feasible high-fidelity configuration")
    rng = np.random.default_rng(seed)
    P = np.asarray([r.phigh for r in pareto], dtype=float)
    M = np.asarray([r.mem for r in pareto], dtype=float)
    p_lo, p_span = P.min(), max(P.max() - P.min(), 1e-8)
    m_lo, m_span = M.min(), max(M.max() - M.min(), 1e-8)

    def util(p: float, m: float) -> float:
        return float(alpha * (p - p_lo) / p_span - (1 - alpha) * (m - m_lo) / m_span)

    obs = [(r.cfg, float(r.phigh), float(r.mem)) for r in pareto]
    history: list[dict] = []
    if len(pareto) >= 3:
        centres = [r.cfg for r in pareto]
        seen = {c.key() for c, _, _ in obs}
        for it in range(max_iter):
            X = np.stack([embed(c, space, importance) for c, _, _ in obs])
            y = np.asarray([util(p, m) for _, p, m in obs])
            if len(np.unique(X, axis=0)) < 2:
                logger.info("BO: fewer than 2 distinct points; stopping")
                break
            kern = ConstantKernel(1.0, (1e-2, 1e2)) * Matern(
                length_scale=1.0, nu=2.5
            ) + WhiteKernel(1e-3)
            gp = GaussianProcessRegressor(kern, normalize_y=True, random_state=seed).fit(X, y)
            omega: dict[str, QRConfig] = {}
            for c in centres:
                for n in atomic_neighbors(c, space, k, rng):
                    rep = repair_to_budget(n, space, memory, importance, budget)
                    if memory.total_bytes(rep) <= budget and rep.key() not in seen:
                        omega[rep.key()] = rep
            if not omega:
                break
            cands = list(omega.values())
            mu, sd = gp.predict(
                np.stack([embed(c, space, importance) for c in cands]), return_std=True
            )
            ei = expected_improvement(mu, sd, float(y.max()))
            best = int(np.argmax(ei))
            if ei[best] < eps_ei:
                history.append({"iter": it, "max_ei": float(ei[best]), "stopped": True})
                break
            c_new = cands[best]
            res = check_result(evaluator.evaluate(c_new, "high"), c_new, "high")
            m_new = memory.total_bytes(c_new)
            seen.add(c_new.key())
            improved = util(res.perf, m_new) > y.max()
            obs.append((c_new, float(res.perf), m_new))
            if improved:
                centres.append(c_new)
            history.append(
                {
                    "iter": it,
                    "max_ei": float(ei[best]),
                    **c_new.to_dict(),
                    "phigh": res.perf,
                    "mem": m_new,
                    "utility": util(res.perf, m_new),
                    "improved": bool(improved),
                }
            )
    else:
        logger.warning("Pareto set has %d < 3 points; skipping Stage 2 BO", len(pareto))
    best_c, best_p, best_m = max(obs, key=lambda o: util(o[1], o[2]))
    return Selection(
        list(best_c.q), list(best_c.r), best_p, best_m, util(best_p, best_m), alpha, history
    )


# ----------------------------------------------------------------------------- both stages
class AutoQRA:
    """Stage 1 + Stage 2 end to end; ``run(outdir)`` writes the repo's three JSON files.

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

    def run(self, outdir: str | Path | None = None) -> tuple[ParetoResult, Selection]:
        t0 = time.perf_counter()
        ckpt = Path(outdir) / "phase2_checkpoint.json" if outdir else None
        if outdir:
            Path(outdir).mkdir(parents=True, exist_ok=True)
        stage1 = MultiFidelityEvolution(
            self.space,
            self.memory,
            self.importance,
            self.evaluator,
            self.budget,
            self.evo,
            self.seed,
            ckpt,
        ).run()
        sel = trust_region_bo(
            stage1.pareto,
            self.space,
            self.memory,
            self.importance,
            self.evaluator,
            self.budget,
            self.alpha,
            self.bo_iters,
            self.k_bo,
            seed=self.seed,
        )
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
