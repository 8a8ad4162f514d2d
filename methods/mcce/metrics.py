"""The paper's metrics (official `algorithm/MOO.py::log_results`, official `algorithm/MOO.py::log_results`, `model/util.py`).

Top-k fitness, PMO-style top-k AUC over the number of evaluations, hypervolume of the top-100 by
scalar fitness on the minimisation vectors t(x) with reference point (1.1, …, 1.1), diversity
(mean pairwise Tanimoto distance), validity and uniqueness.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .core import Archive, Candidate
from .problems import tanimoto


def _hv_points(points: np.ndarray, ref: np.ndarray) -> float:
    from common.metrics import hypervolume as shared_hv  # pymoo's exact HV

    return float(shared_hv(points, ref, maximize=False))


def hypervolume(
    cands: Sequence[Candidate] | np.ndarray, ref: float = 1.1, top: int | None = 100
) -> float:
    """Hypervolume HV = Λ_m(∪_y [y, r]) of the top-``top`` candidates by F (official `algorithm/MOO.py::log_results`).

    Args:
        cands: candidates (their ``t`` vectors are used), or a ``[n, m]`` array of t vectors (then
            ``top`` ranks rows by F = m − Σ t).
        ref: reference value r_j for every objective (1.1 in the official code).
        top: keep the best ``top`` by scalar fitness first (100 in the paper); None uses all.

    Returns:
        The dominated volume; 0 for no points. The maximum is ref^m.

    Raises:
        ValueError: a non-finite objective value or ``ref`` (a NaN point would otherwise be dropped
            silently by the box test).
    """
    if not np.isfinite(ref):
        raise ValueError(f"ref must be finite, got {ref!r}")
    if isinstance(cands, np.ndarray):
        t = np.asarray(cands, dtype=float)
        if t.ndim != 2:
            raise ValueError(f"cands must be 2-D [n, m] when an array, got shape {t.shape}")
        bad = np.flatnonzero(~np.isfinite(t).all(axis=1))
        if bad.size:
            raise ValueError(
                f"hypervolume: {bad.size} point(s) with a non-finite objective (first: row {bad[0]}, "
                f"t={t[bad[0]].tolist()}); score or drop them before computing HV"
            )
        order = np.argsort(-(t.shape[1] - t.sum(1)), kind="stable")
        t = t[order]
    else:
        ranked = sorted(cands, key=lambda c: (-c.total, c.index))
        if not ranked:
            return 0.0
        t = np.stack([c.t for c in ranked])  # [n, m]
        if not np.isfinite(t).all():
            raise ValueError("hypervolume: a candidate has a non-finite objective; score it first")
    if len(t) == 0:
        return 0.0
    if top is not None:
        t = t[:top]
    r = np.full(t.shape[1], float(ref))
    t = t[(t < r).all(axis=1)]  # points outside the box add nothing
    if len(t) == 0:
        return 0.0
    return _hv_points(t, r)


def top_k_mean(cands: Sequence[Candidate], k: int) -> float:
    """Mean F of the k best candidates, "Top-k F" (official `algorithm/MOO.py::log_results`)."""
    if not cands:
        return 0.0
    tot = sorted((c.total for c in cands), reverse=True)[:k]
    return float(np.mean(tot))


def top_k_auc(
    scores: Sequence[float], k: int, n_max: int, freq: int = 100, finished: bool = True
) -> float:
    """PMO-style area under the top-k-mean curve over evaluations, divided by n_max (official `algorithm/MOO.py::log_results`).

    ȳ_k(n) is the mean of the k best among the first n scores, with ȳ_k(0) = 0. The curve is sampled
    every ``freq`` evaluations and integrated with trapezoids; a finished run shorter than n_max is
    padded with its last value.

    Args:
        scores: F of the archive items in insertion order.
        k: top-k.
        n_max: the evaluation budget N_max.
        freq: logging frequency (100 in the official code).
        finished: whether the run has ended (pads to n_max).
    """
    if k < 1 or n_max < 1 or freq < 1:
        raise ValueError(f"k, n_max and freq must be >= 1, got k={k}, n_max={n_max}, freq={freq}")
    s = np.asarray(list(scores), dtype=float)
    n = len(s)
    if n == 0:
        return 0.0

    def ybar(i: int) -> float:
        return float(np.mean(np.sort(s[:i])[::-1][:k]))

    total, prev, called = 0.0, 0.0, 0
    for idx in range(freq, min(n, n_max), freq):
        cur = ybar(idx)
        total += freq * (cur + prev) / 2
        prev, called = cur, idx
    cur = ybar(n)
    total += (n - called) * (cur + prev) / 2
    if finished and n < n_max:
        total += (n_max - n) * cur
    return total / n_max


def diversity(smiles: Sequence[str]) -> float:
    """Mean pairwise Tanimoto distance (Morgan r=2, 2048 bits) of a set of SMILES (TDC 'Diversity').

    The paper's diversity metric as the official ``algorithm/MOO.py::log_results`` computes it.
    """
    smiles = list(smiles)
    if len(smiles) < 2:
        return 0.0
    d = [1.0 - tanimoto(a, b) for i, a in enumerate(smiles) for b in smiles[i + 1 :]]
    return float(np.mean(d))


def archive_metrics(archive: Archive, n_max: int, finished: bool = True) -> dict[str, float]:
    """All the paper's metrics for one archive (official `algorithm/MOO.py::log_results`)."""
    items = archive.items
    top100 = archive.top_k(100)
    st = archive.stats()
    return {
        "hypervolume": hypervolume(items, top=100),
        "hypervolume_all": hypervolume(items, top=None),
        "top1_f": top_k_mean(items, 1),
        "top10_f": top_k_mean(items, 10),
        "top100_f": top_k_mean(items, 100),
        "top10_auc": top_k_auc([c.total for c in items], 10, n_max, finished=finished),
        "top100_auc": top_k_auc([c.total for c in items], 100, n_max, finished=finished),
        "diversity": diversity([c.value for c in top100]),
        "validity": st["validity"],
        "uniqueness": st["uniqueness"],
        "n_unique": float(len(items)),
    }
