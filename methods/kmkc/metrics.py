"""Answer matching, equal-mass ECE and the self-knowledge metrics (the paper's evaluation, App. B).

The cover matcher, the ECE bin count and the answer/refuse rule are our inference (not recovered
from the paper; see the deviations table of docs/methods/kmkc.md).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from common.metrics import expected_calibration_error as _equal_width_ece
from common.metrics import normalize_answer  # SQuAD normalisation, re-exported by methods.kmkc


def check_golds(golds: object) -> list[str]:
    """Validates a gold-answer list: a non-empty list of non-empty strings.

    Source: engineering (input validation), not in the paper.

    Raises:
        TypeError: if ``golds`` is a bare string or holds non-strings.
        ValueError: if it is empty or holds only blank strings.
    """
    if isinstance(golds, str) or not isinstance(golds, (list, tuple)):
        raise TypeError(
            f"golds must be a list of answer strings (aliases), got {type(golds).__name__}; "
            "wrap a single answer as [answer]"
        )
    if not all(isinstance(g, str) for g in golds):
        raise TypeError("golds must hold only strings")
    clean = [g for g in golds if normalize_answer(g)]
    if not clean:
        raise ValueError("golds must hold at least one non-empty answer")
    return clean


def qa_correct(pred: str, golds: list[str], mode: Literal["cover", "em"] = "cover") -> bool:
    """Cover match (a normalised gold alias occurs, word-aligned, in the normalised prediction) or EM.

    The paper's accuracy (App. B); the cover matcher is our inference (doc deviations).
    """
    golds = check_golds(golds)
    p = normalize_answer(pred)
    if not p:
        return False
    for g in golds:
        ng = normalize_answer(g)
        if mode == "em":
            if p == ng:
                return True
        elif mode == "cover":
            if f" {ng} " in f" {p} ":
                return True
        else:
            raise ValueError(f"mode must be 'cover' or 'em', got {mode!r}")
    return False


def expected_calibration_error(
    conf: np.ndarray,
    correct: np.ndarray,
    n_bins: int = 10,
    scheme: Literal["equal_mass", "equal_width"] = "equal_mass",
) -> float:
    """ECE = Σ_m (|B_m|/N)·|acc(B_m) − conf(B_m)| (the paper uses equal-mass bins;
    the count, 10, is our inference).

    ``equal_width`` delegates to :func:`common.metrics.expected_calibration_error`. Equal-mass bins are
    the confidence-sorted samples split into ``n_bins`` groups whose sizes differ by at most one.

    Raises:
        ValueError: on mismatched lengths, confidences outside [0, 1], or n_bins outside [1, N].
    """
    c = np.asarray(conf, dtype=float)
    y = np.asarray(correct, dtype=float)
    if c.ndim != 1 or c.shape != y.shape or c.size == 0:
        raise ValueError(f"conf and correct must be equal-length 1-D, got {c.shape}, {y.shape}")
    if np.isnan(c).any() or ((c < 0) | (c > 1)).any():
        raise ValueError("conf must lie in [0, 1]")
    if scheme == "equal_width":
        return _equal_width_ece(c, y, n_bins=n_bins)
    if scheme != "equal_mass":
        raise ValueError(f"scheme must be 'equal_mass' or 'equal_width', got {scheme!r}")
    if not 1 <= n_bins <= c.size:
        raise ValueError(f"n_bins must satisfy 1 <= n_bins <= N={c.size}, got {n_bins}")
    order = np.argsort(c, kind="stable")
    ece = 0.0
    for g in np.array_split(order, n_bins):
        ece += g.size / c.size * abs(y[g].mean() - c[g].mean())
    return float(ece)


def self_knowledge_metrics(answered: np.ndarray, correct: np.ndarray) -> dict[str, float]:
    """AR, KEI, NPV, CBS, CAE from an answer/refuse decision (the paper's self-knowledge
    metrics; the decision rule is our inference).

    TP = answered & correct, FP = answered & wrong, FN = refused but would be correct,
    TN = refused & would be wrong. AR = TP/(TP+FP), KEI = TP/(TP+FN), NPV = TN/(TN+FN),
    CBS = harmonic mean of AR and KEI, CAE = (TP+TN)/N. An undefined ratio is NaN (not a crash) and
    flagged in ``undefined`` (the count of NaN entries).
    """
    a = np.asarray(answered)
    y = np.asarray(correct)
    if a.ndim != 1 or a.shape != y.shape or a.size == 0:
        raise ValueError(f"answered and correct must be equal-length 1-D, got {a.shape}, {y.shape}")
    a = a.astype(bool)
    y = y.astype(bool)
    tp = float((a & y).sum())
    fp = float((a & ~y).sum())
    fn = float((~a & y).sum())
    tn = float((~a & ~y).sum())

    def ratio(n: float, d: float) -> float:
        return n / d if d > 0 else float("nan")

    ar, kei, npv = ratio(tp, tp + fp), ratio(tp, tp + fn), ratio(tn, tn + fn)
    cbs = ratio(2 * ar * kei, ar + kei) if not (np.isnan(ar) or np.isnan(kei)) else float("nan")
    out = {"AR": ar, "KEI": kei, "NPV": npv, "CBS": cbs, "CAE": (tp + tn) / a.size}
    out["undefined"] = float(sum(np.isnan(v) for v in out.values()))
    return out
