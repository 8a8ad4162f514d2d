"""NSGA-II-style survivor selection of the official code (spec §3.6, `model/util.py::nsga2_so_selection`).

Half of the population is the best by scalar fitness F; the rest is filled front by front from a fast
non-dominated sort of the whole archive on t(x) (minimisation), by descending F within a front.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .core import Candidate


def non_dominated_fronts(t: np.ndarray) -> list[np.ndarray]:
    """Fronts of a fast non-dominated sort (minimisation), via pymoo.

    Args:
        t: objective vectors ``[n, m]``.

    Returns:
        Index arrays, best front first; together they partition ``range(n)``.
    """
    from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

    t = np.asarray(t, dtype=float)
    if t.ndim != 2:
        raise ValueError(f"t must be 2-D [n, m], got shape {t.shape}")
    if len(t) == 0:
        return []
    return [np.asarray(f, dtype=int) for f in NonDominatedSorting().do(t)]


def nsga2_so_select(cands: Sequence[Candidate], k: int) -> list[Candidate]:
    """Select k survivors from the archive (spec §3.6).

    1. the ⌊k/2⌋ items with the highest F;
    2. then, front by front (non-dominated sort on t), items by descending F not yet chosen,
       until k are selected. With one objective this is the top-k by F.

    Args:
        cands: the selection pool (the official code uses the whole archive).
        k: number of survivors (k >= 1).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    cands = list(cands)
    if len(cands) <= k:
        return sorted(cands, key=lambda c: (-c.total, c.index))
    order = sorted(range(len(cands)), key=lambda i: (-cands[i].total, cands[i].index))
    chosen: list[int] = list(order[: k // 2])
    taken = {cands[i].value for i in chosen}
    t = np.stack([c.t for c in cands])  # [n, m]
    if t.shape[1] == 1:
        fronts = [np.asarray(order)]
    else:
        fronts = non_dominated_fronts(t)
    for front in fronts:
        for i in sorted(front.tolist(), key=lambda i: (-cands[i].total, cands[i].index)):
            if len(chosen) >= k:
                break
            if cands[i].value not in taken:
                chosen.append(i)
                taken.add(cands[i].value)
        if len(chosen) >= k:
            break
    return [cands[i] for i in chosen]
