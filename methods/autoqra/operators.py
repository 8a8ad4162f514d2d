"""Search operators of AutoQRA Stage 1 (Eqs. 4-6, 11; official `autoqra/search/operators.py`).

Budget repair (greedy cheapest-importance downgrade, Eqs. 4-5), the importance warm start (Eq. 6), jitter,
importance-guided and coupled mutation, uniform crossover, the low-bit cap and the atomic distance /
neighbourhood (Eq. 11). Every random operator takes an explicit ``np.random.Generator``.
"""

from __future__ import annotations

import numpy as np

from .importance import Importance
from .memory import MemoryModel
from .space import BudgetInfeasibleError, QRConfig, SearchSpace

EPS = 1e-8
JITTER_MODES = ("official", "single_check")


def _downgrade_options(
    cfg: QRConfig, space: SearchSpace, memory: MemoryModel, imp: Importance, protect
):
    """All one-step downgrades as ``(ratio, layer, kind, new_value)`` with ratio = (I_t(ℓ)+ε)/ΔM."""
    opts = []
    for i in range(cfg.num_layers):
        qi, ri = space.idx_q(cfg.q[i]), space.idx_r(cfg.r[i])
        if qi > 0 and i not in protect:
            dm = memory.layer_bytes(i, cfg.q[i], cfg.r[i]) - memory.layer_bytes(
                i, space.Q[qi - 1], cfg.r[i]
            )
            opts.append(((imp.I_q[i] + EPS) / dm, i, "q", space.Q[qi - 1]))
        if ri > 0:
            dm = memory.layer_bytes(i, cfg.q[i], cfg.r[i]) - memory.layer_bytes(
                i, cfg.q[i], space.R[ri - 1]
            )
            opts.append(((imp.I_r[i] + EPS) / dm, i, "r", space.R[ri - 1]))
    return opts


def _set(cfg: QRConfig, layer: int, kind: str, value: int) -> QRConfig:
    q, r = list(cfg.q), list(cfg.r)
    (q if kind == "q" else r)[layer] = value
    return QRConfig(tuple(q), tuple(r))


def repair_to_budget(
    cfg: QRConfig,
    space: SearchSpace,
    memory: MemoryModel,
    importance: Importance,
    budget: float,
    protect: frozenset[int] = frozenset(),
) -> QRConfig:
    """Eqs. 4-5: while ``M(C) > B``, apply the one-step downgrade minimising ``(I_t(ℓ)+ε)/ΔM_t(ℓ)``.

    Never raises any variable; a feasible input is returned unchanged. Layers in ``protect`` keep their
    bits (used after the low-bit cap, our choice (docs deviations)). Raises ``BudgetInfeasibleError`` when no downgrade is
    left and the configuration is still over budget (the repo silently returns it).
    """
    space.validate(cfg)
    while memory.total_bytes(cfg) > budget:
        opts = _downgrade_options(cfg, space, memory, importance, protect)
        if not opts:
            memory.check_budget(budget, space.minimum())
            raise BudgetInfeasibleError(
                f"cannot repair {cfg.to_dict()} under budget {budget:.0f} B with protected layers "
                f"{sorted(protect)}; M = {memory.total_bytes(cfg):.0f} B"
            )
        _, layer, kind, value = min(opts, key=lambda o: o[0])
        cfg = _set(cfg, layer, kind, value)
    return cfg


def warm_start(space: SearchSpace, importance: Importance, shaping: str = "identity") -> QRConfig:
    """Eq. 6: ``q⁰_ℓ = round_Q(q_min + (q_max-q_min)·τ(I_q(ℓ)))``, same for r with ``I_r``."""
    tau = {"identity": lambda x: x, "sqrt": np.sqrt, "square": np.square}
    if shaping not in tau:
        raise ValueError(f"shaping must be one of {sorted(tau)}, got {shaping!r}")
    importance.check_length(space.num_layers)
    f = tau[shaping]
    q = [space.round_Q(space.Q[0] + (space.Q[-1] - space.Q[0]) * f(v)) for v in importance.I_q]
    r = [space.round_R(space.R[0] + (space.R[-1] - space.R[0]) * f(v)) for v in importance.I_r]
    return QRConfig(tuple(q), tuple(r))


def cap_lowbit(cfg: QRConfig, space: SearchSpace, importance: Importance, max_fraction: float):
    """At most ``⌊φ·L⌋`` blocks at min(Q); the excess with the highest ``I(ℓ)`` go one bit step up.

    Source: official ``search/operators.py`` (``max_lowbit_fraction``); re-repairing afterwards is
    our choice.

    Returns ``(cfg, promoted_layers)``; re-run repair with ``protect=promoted_layers`` afterwards.
    """
    if not 0.0 <= max_fraction <= 1.0:
        raise ValueError(f"max_fraction must be in [0, 1], got {max_fraction}")
    low = [i for i, q in enumerate(cfg.q) if q == space.Q[0]]
    allowed = int(np.floor(max_fraction * cfg.num_layers))
    if len(low) <= allowed or len(space.Q) < 2:
        return cfg, frozenset()
    order = sorted(low, key=lambda i: -importance.score[i])
    promote = order[: len(low) - allowed]
    for i in promote:
        cfg = _set(cfg, i, "q", space.Q[1])
    return cfg, frozenset(promote)


def jitter(
    cfg: QRConfig,
    space: SearchSpace,
    memory: MemoryModel,
    budget: float,
    rng,
    max_jitter: int = 4,
    mode: str = "official",
):
    """Random resets that diversify the warm-started population.

    ``mode="official"`` (default) follows ``jitter_configuration`` in the official
    ``autoqra/search/operators.py``: exactly ``max_jitter`` (4) resets of one random layer's q (p = 0.5) or
    r to a random ladder value, each followed by a budget check that, when the configuration is over budget,
    with p = 0.5 drops another random layer's q or r to its minimum. ``mode="single_check"`` is this
    repository's earlier variant: 1-4 resets and one budget check after them.
    """
    if mode not in JITTER_MODES:
        raise ValueError(f"mode must be one of {JITTER_MODES}, got {mode!r}")
    if max_jitter < 1:
        raise ValueError(f"max_jitter must be >= 1, got {max_jitter}")

    def _drop(c: QRConfig) -> QRConfig:
        if memory.total_bytes(c) > budget and rng.random() < 0.5:
            j = int(rng.integers(c.num_layers))
            return (
                _set(c, j, "q", space.Q[0]) if rng.random() < 0.5 else _set(c, j, "r", space.R[0])
            )
        return c

    n = max_jitter if mode == "official" else int(rng.integers(1, max_jitter + 1))
    for _ in range(n):
        i = int(rng.integers(cfg.num_layers))
        if rng.random() < 0.5:
            cfg = _set(cfg, i, "q", int(rng.choice(space.Q)))
        else:
            cfg = _set(cfg, i, "r", int(rng.choice(space.R)))
        if mode == "official":
            cfg = _drop(cfg)
    if mode == "single_check":
        cfg = _drop(cfg)
    return cfg


def mutate_importance_guided(
    cfg: QRConfig, space: SearchSpace, importance: Importance, rng, gamma=1.5
):
    """Pick ℓ with ``Pr ∝ (I_q+I_r)^γ``; move q (p = 0.5) or r one step up with prob ``I_t(ℓ)``, else down.

    Source: official ``search/operators.py`` (implemented there, not called by its main loop).
    """
    w = (importance.I_q + importance.I_r + EPS) ** gamma
    i = int(rng.choice(cfg.num_layers, p=w / w.sum()))
    if rng.random() < 0.5:
        idx, ladder, p_up, kind = space.idx_q(cfg.q[i]), space.Q, importance.I_q[i], "q"
    else:
        idx, ladder, p_up, kind = space.idx_r(cfg.r[i]), space.R, importance.I_r[i], "r"
    step = 1 if rng.random() < p_up else -1
    new = int(np.clip(idx + step, 0, len(ladder) - 1))
    return _set(cfg, i, kind, ladder[new])


def mutate_coupled(cfg: QRConfig, space: SearchSpace, importance: Importance, rng, gamma=1.5):
    """Coupled mutation: raise q at ``ℓ ~ I_q^γ`` or r at ``ℓ ~ I_r^γ`` (caller repairs afterwards).

    Source: official ``search/operators.py`` (implemented there, not called by its main loop).
    """
    kind = "q" if rng.random() < 0.5 else "r"
    w = ((importance.I_q if kind == "q" else importance.I_r) + EPS) ** gamma
    i = int(rng.choice(cfg.num_layers, p=w / w.sum()))
    ladder = space.Q if kind == "q" else space.R
    idx = ladder.index(cfg.q[i] if kind == "q" else cfg.r[i])
    return _set(cfg, i, kind, ladder[min(idx + 1, len(ladder) - 1)])


def crossover_uniform(a: QRConfig, b: QRConfig, rng) -> QRConfig:
    """Per layer, take q_ℓ and r_ℓ independently from parent a or b with probability 0.5.

    Source: official ``search/operators.py`` (implemented there, unused).
    """
    if a.num_layers != b.num_layers:
        raise ValueError(f"parents differ in length: {a.num_layers} vs {b.num_layers}")
    mq = rng.random(a.num_layers) < 0.5
    mr = rng.random(a.num_layers) < 0.5
    q = tuple(x if m else y for x, y, m in zip(a.q, b.q, mq))
    r = tuple(x if m else y for x, y, m in zip(a.r, b.r, mr))
    return QRConfig(q, r)


def atomic_distance(a: QRConfig, b: QRConfig, space: SearchSpace) -> int:
    """Eq. 11: ``Σ_ℓ |idx_Q(q_ℓ)-idx_Q(q'_ℓ)| + |idx_R(r_ℓ)-idx_R(r'_ℓ)|``."""
    if a.num_layers != b.num_layers:
        raise ValueError(f"configs differ in length: {a.num_layers} vs {b.num_layers}")
    d = 0
    for qa, ra, qb, rb in zip(a.q, a.r, b.q, b.r):
        d += abs(space.idx_q(qa) - space.idx_q(qb)) + abs(space.idx_r(ra) - space.idx_r(rb))
    return d


def all_atomic_neighbors(cfg: QRConfig, space: SearchSpace) -> list[QRConfig]:
    """Every configuration at atomic distance exactly 1 (one variable, one ladder step).

    Source: paper Eq. 11 (atomic distance, as numbered in official
    ``search/neighbors.py``).
    """
    out = []
    for i in range(cfg.num_layers):
        for kind, ladder, val in (("q", space.Q, cfg.q[i]), ("r", space.R, cfg.r[i])):
            idx = ladder.index(val)
            for j in (idx - 1, idx + 1):
                if 0 <= j < len(ladder):
                    out.append(_set(cfg, i, kind, ladder[j]))
    return out


def atomic_neighbors(cfg: QRConfig, space: SearchSpace, k: int, rng) -> list[QRConfig]:
    """A uniform sample (without replacement) of ``k`` distance-1 neighbours (k = 5 in the repo).

    Source: official ``search/neighbors.py``; paper Eq. 11.
    """
    if int(k) < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    nbrs = all_atomic_neighbors(cfg, space)
    if len(nbrs) <= k:
        return nbrs
    idx = rng.choice(len(nbrs), size=k, replace=False)
    return [nbrs[int(i)] for i in idx]
