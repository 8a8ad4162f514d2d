"""AutoQRA Stage 2: trust-region Bayesian optimisation (official search/phase3_bo.py).

A Matérn-5/2 GP is fitted to the utility ``f = αP̃ - (1-α)M̃`` (Eq. 8) of the Stage 1 Pareto set on the
embedding ψ (Eq. 9); each iteration evaluates the Expected-Improvement (Eq. 10) maximiser over the repaired
atomic neighbourhoods of the centres (Eqs. 11-12) and stops when max EI < ε (Eq. 13). Its evaluations go
through the search's ``EvaluationCache`` (our library design), so a killed Stage 2 resumes by replaying
the GP fits on the cached results: nothing is evaluated twice.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import norm

from .evaluators import Evaluator
from .evolution import Record
from .importance import Importance
from .memory import MemoryModel
from .operators import atomic_neighbors, repair_to_budget
from .space import QRConfig, SearchSpace
from .state import BO_PREFIX, EvaluationCache

logger = logging.getLogger(__name__)


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


def _utility(pareto: list[Record], alpha: float) -> Callable[[float, float], float]:
    """Eq. 8 with P̃, M̃ min-max normalised over the Pareto set (denominators floored at 1e-8)."""
    P = np.asarray([r.phigh for r in pareto], dtype=float)
    M = np.asarray([r.mem for r in pareto], dtype=float)
    p_lo, p_span = P.min(), max(P.max() - P.min(), 1e-8)
    m_lo, m_span = M.min(), max(M.max() - M.min(), 1e-8)

    def util(p: float, m: float) -> float:
        return float(alpha * (p - p_lo) / p_span - (1 - alpha) * (m - m_lo) / m_span)

    return util


def _fit_gp(X: np.ndarray, y: np.ndarray, seed: int):
    """``C(1, [1e-2, 1e2]) × Matérn(ℓ=1, ν=2.5) + White(1e-3)``, ``normalize_y`` (official phase3_bo.py)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    kern = ConstantKernel(1.0, (1e-2, 1e2)) * Matern(length_scale=1.0, nu=2.5) + WhiteKernel(1e-3)
    with warnings.catch_warnings(record=True) as caught:
        # A hyper-parameter at its bound is expected with a handful of Pareto points (the official
        # bounds are kept); it is logged once per fit instead of printed as a warning.
        warnings.simplefilter("always", ConvergenceWarning)
        gp = GaussianProcessRegressor(kern, normalize_y=True, random_state=seed).fit(X, y)
    for w in caught:
        if issubclass(w.category, ConvergenceWarning):
            logger.debug("GP fit on %d points: %s", len(y), w.message)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return gp


def trust_region(
    centres: list[QRConfig],
    seen: set[str],
    space: SearchSpace,
    memory: MemoryModel,
    importance: Importance,
    budget: float,
    k: int,
    rng: np.random.Generator,
) -> list[QRConfig]:
    """Ω (Eqs. 11-12): repaired k-samples of the atomic neighbours of every centre, feasible and unseen."""
    omega: dict[str, QRConfig] = {}
    for c in centres:
        for n in atomic_neighbors(c, space, k, rng):
            rep = repair_to_budget(n, space, memory, importance, budget)
            if memory.total_bytes(rep) <= budget and rep.key() not in seen:
                omega[rep.key()] = rep
    return list(omega.values())


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
    cache: EvaluationCache | None = None,
) -> Selection:
    """Stage 2 (official search/phase3_bo.py): GP (Matérn-5/2) + EI over repaired atomic neighbourhoods of the Pareto set.

    Utility (Eq. 8) ``f = αP̃ - (1-α)M̃`` with P̃, M̃ min-max normalised over the Pareto set. Proposals are
    evaluated at high fidelity with the real evaluator (our choice (docs deviations)), through ``cache``
    (keys ``bo:<cfg>:high``; default an in-memory one). With fewer than 3 Pareto points the BO is
    skipped (warning) and the best-utility Pareto point is returned.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if not pareto:
        raise ValueError("pareto is empty: Stage 1 found no feasible high-fidelity configuration")
    cache = cache if cache is not None else EvaluationCache(None)
    rng = np.random.default_rng(seed)
    util = _utility(pareto, alpha)
    obs = [(r.cfg, float(r.phigh), float(r.mem)) for r in pareto]
    history: list[dict] = []
    if len(pareto) < 3:
        logger.warning("Pareto set has %d < 3 points; skipping Stage 2 BO", len(pareto))
    centres = [r.cfg for r in pareto] if len(pareto) >= 3 else []
    seen = {c.key() for c, _, _ in obs}
    for it in range(max_iter if centres else 0):
        X = np.stack([embed(c, space, importance) for c, _, _ in obs])
        y = np.asarray([util(p, m) for _, p, m in obs])
        if len(np.unique(X, axis=0)) < 2:
            logger.info("BO: fewer than 2 distinct points; stopping")
            break
        gp = _fit_gp(X, y, seed)
        cands = trust_region(centres, seen, space, memory, importance, budget, k, rng)
        if not cands:
            break
        mu, sd = gp.predict(np.stack([embed(c, space, importance) for c in cands]), return_std=True)
        ei = expected_improvement(mu, sd, float(y.max()))
        best = int(np.argmax(ei))
        if ei[best] < eps_ei:
            history.append({"iter": it, "max_ei": float(ei[best]), "stopped": True})
            break
        c_new = cands[best]
        res = cache.evaluate(evaluator, c_new, "high", prefix=BO_PREFIX)
        m_new = memory.total_bytes(c_new)
        seen.add(c_new.key())
        improved = util(res.perf, m_new) > y.max()
        obs.append((c_new, float(res.perf), m_new))
        if improved:
            centres.append(c_new)
        history.append(
            {"iter": it, "max_ei": float(ei[best]), **c_new.to_dict(), "phigh": res.perf,
             "mem": m_new, "utility": util(res.perf, m_new), "improved": bool(improved)}
        )  # fmt: skip
    best_c, best_p, best_m = max(obs, key=lambda o: util(o[1], o[2]))
    return Selection(
        list(best_c.q), list(best_c.r), best_p, best_m, util(best_p, best_m), alpha, history
    )
