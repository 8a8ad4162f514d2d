"""NSGA-II pieces of AutoQRA Stage 1 (official search/phase2_evolution.py): constrained non-dominated
sorting, crowding distance, environmental selection and the 2-D hypervolume of the early stop."""

from __future__ import annotations

import numpy as np

from common.metrics import hypervolume


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
    """NSGA-II crowding distance (pymoo); boundary points get ``inf``.

    Source: official ``search/phase2_evolution.py`` (NSGA-II selection).
    """
    from pymoo.operators.survival.rank_and_crowding.metrics import calc_crowding_distance

    F = np.asarray(F, dtype=float)
    if len(F) <= 2:
        return np.full(len(F), np.inf)
    return np.asarray(calc_crowding_distance(F), dtype=float)


def environmental_selection(F: np.ndarray, violation: np.ndarray, n: int) -> list[int]:
    """Fill fronts in order; split the last one by descending crowding distance.

    Source: official ``search/phase2_evolution.py`` (NSGA-II environmental selection).
    """
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
    """HV of minimised 2-D points w.r.t. ``ref`` (pymoo through ``common.metrics.hypervolume``).

    Source: official ``search/phase2_evolution.py`` (HV early stop of Stage 1).
    """
    F = np.asarray(F, dtype=float)
    F = F[np.all(ref > F, axis=1)]
    return 0.0 if len(F) == 0 else hypervolume(F, ref)
