"""Survivor and experience selection of the official code (`model/util.py`, lzz-z/MCCE).

``nsga2_so_select`` (official ``nsga2_so_selection``, the survivor rule): half of the population is
the best by scalar fitness F; the rest is filled front by front from a fast non-dominated sort of the
whole archive on t(x) (minimisation), by descending F within a front. ``nsga2_select`` (official
``nsga2_selection``): whole fronts, the overflowing one cut by crowding distance; the experience
prompt's 'pareto' branch draws its good examples from it. Fronts are listed in the official order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .core import Candidate


def non_dominated_fronts(t: np.ndarray) -> list[np.ndarray]:
    """Fronts of a fast non-dominated sort (minimisation), via pymoo (official `model/util.py`
    ``fast_non_dominated_sort``, ranks only; :func:`official_fronts` keeps its order).

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
    """Select k survivors from the archive (official `model/util.py`).

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
    if not cands:
        return []
    order = sorted(range(len(cands)), key=lambda i: (-cands[i].total, cands[i].index))
    chosen: list[int] = list(order[: k // 2])
    taken = {cands[i].value for i in chosen}
    t = np.stack([c.t for c in cands])  # [n, m]
    # official order: fronts as its fast_non_dominated_sort lists them, then a stable sort by F
    for front in official_fronts(t):
        for i in sorted(front, key=lambda i: -cands[i].total):
            if len(chosen) >= k:
                break
            if cands[i].value not in taken:
                chosen.append(i)
                taken.add(cands[i].value)
        if len(chosen) >= k:
            break
    return [cands[i] for i in chosen]


def official_fronts(t: np.ndarray) -> list[list[int]]:
    """Fronts in the order the official ``model/util.py::fast_non_dominated_sort`` lists them.

    The first front is in index order; a later member q is listed when the last of its
    dominators in the previous front is processed (previous-front order, then q ascending), as
    the official peeling loop appends it. Dominance: t_p ≤ t_q everywhere and < somewhere.
    Vectorised over an ``[n, n]`` dominance matrix instead of the official double loop.
    """
    t = np.asarray(t, dtype=float)
    if t.ndim != 2:
        raise ValueError(f"t must be 2-D [n, m], got shape {t.shape}")
    n = len(t)
    if n == 0:
        return []
    le = np.ones((n, n), dtype=bool)  # [n, n]: p no worse than q everywhere
    lt = np.zeros((n, n), dtype=bool)  # [n, n]: p better than q somewhere
    for j in range(t.shape[1]):  # one objective at a time keeps memory at n² booleans
        le &= t[:, None, j] <= t[None, :, j]
        lt |= t[:, None, j] < t[None, :, j]
    dom = le & lt  # dom[p, q]: p dominates q
    left = dom.sum(0)  # [n] dominators not yet peeled
    front = [int(i) for i in np.flatnonzero(left == 0)]
    fronts: list[list[int]] = []
    while front:
        fronts.append(front)
        sub = dom[front]  # [|front|, n]
        left = left - sub.sum(0)
        new = np.flatnonzero((left == 0) & sub.any(0))  # freed in this round
        # the official loop appends q while processing its last dominator in `front`
        last = len(front) - 1 - np.argmax(sub[::-1][:, new], axis=0)  # [|new|]
        front = [int(q) for _, q in sorted(zip(last.tolist(), new.tolist(), strict=True))]
    return fronts


def _official_crowding(front: list[int], t: np.ndarray) -> tuple[list[int], list[float]]:
    """The official ``crowding_distance_assignment``, kept as it is written.

    It re-sorts the front by each objective in place and adds each gap to the distance of the
    *position* i, not of the individual at it, so after the last objective the front is in
    ascending order of that objective and ``dist[i]`` belongs to whoever sits at position i.
    Returns that final front order and the per-position distances.
    """
    front = list(front)
    dist = [0.0] * len(front)
    for m in range(t.shape[1]):
        front.sort(key=lambda i: t[i, m])  # stable, like list.sort
        dist[0] = dist[-1] = float("inf")
        span = t[front, m].max() - t[front, m].min() + 1e-5
        for i in range(1, len(front) - 1):
            dist[i] += (t[front[i + 1], m] - t[front[i - 1], m]) / span
    return front, dist


def nsga2_select(cands: Sequence[Candidate], k: int) -> list[Candidate]:
    """Crowding-distance NSGA-II selection of the official ``model/util.py::nsga2_selection``.

    Whole fronts in the official order (:func:`official_fronts`) while they fit; the front that
    overflows is cut by descending crowding distance (:func:`_official_crowding`, ties kept in
    its order). The official experience prompt's ``'pareto'`` branch draws its 10 good
    examples from these k = 100.

    Args:
        cands: the pool (the official code uses the whole archive).
        k: number of survivors (k >= 1).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    cands = list(cands)
    if not cands:
        return []
    t = np.stack([c.t for c in cands])  # [n, m]
    chosen: list[int] = []
    for front in official_fronts(t):
        if len(chosen) + len(front) > k:
            order, dist = _official_crowding(front, t)
            d = {i: dist[j] for j, i in enumerate(order)}
            chosen.extend(sorted(order, key=lambda i: d[i], reverse=True)[: k - len(chosen)])
            break
        chosen.extend(front)
    return [cands[i] for i in chosen]
