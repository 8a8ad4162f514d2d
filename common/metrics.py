"""Evaluation metrics shared by several methods.

- ``pass_at_k``: the unbiased estimator of Chen et al. (2021), 1 − C(n−c, k)/C(n, k), evaluated in log
  space so that n = 4096 samples stay exact to float precision.
- ``majority_vote``: the most frequent answer (ties broken by first occurrence).
- ``hypervolume``: pymoo's exact hypervolume indicator; maximised objectives are negated.
- ``expected_calibration_error``: equal-width confidence bins, weighted |accuracy − confidence|.
- ``auroc``: scikit-learn's ROC AUC with input checks.
- ``spearman``: scipy's rank correlation (average ranks for ties), NaN where it is undefined.
- ``normalize_answer`` / ``token_f1``: the SQuAD answer normalisation and token-level F1 (Rajpurkar
  et al., 2016, official evaluation script), optionally mapping number words to digits.
- ``ci_halfwidth``: half-width of a normal or Student-t confidence interval of a mean (scipy).
"""

from __future__ import annotations

import math
import re
import string
import warnings
from collections import Counter
from collections.abc import Callable, Hashable, Sequence

import numpy as np

_PRODUCT_FORM_MAX_C = 256


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``c`` correct among ``n`` samples: 1 − C(n−c, k) / C(n, k).

    Evaluated in log space so that large ``n`` (thousands of samples) neither overflows nor loses
    precision: as a sum of log1p terms for few correct samples (exact to ~1e-15 relative), through
    lgamma otherwise.

    Raises:
        ValueError: unless 0 <= c <= n and 1 <= k <= n.
    """
    for name, v in (("n", n), ("c", c), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"need n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"k must satisfy 1 <= k <= n={n}, got k={k}")
    if n - c < k:
        return 1.0
    if c <= _PRODUCT_FORM_MAX_C:
        # C(n-c, k)/C(n, k) = Π_{i=n-c+1..n} (1 - k/i): c terms, no cancellation.
        log_ratio = math.fsum(math.log1p(-k / i) for i in range(n - c + 1, n + 1))
    else:
        # log C(n-c, k) - log C(n, k) through lgamma: O(1) for many correct samples.
        log_ratio = (
            math.lgamma(n - c + 1)
            - math.lgamma(n - c - k + 1)
            - math.lgamma(n + 1)
            + math.lgamma(n - k + 1)
        )
    return float(-math.expm1(log_ratio))


def mean_pass_at_k(correct_counts: Sequence[int], n: int, k: int) -> float:
    """Average ``pass_at_k(n, c, k)`` over problems (one correct count per problem)."""
    if len(correct_counts) == 0:
        raise ValueError("correct_counts must hold at least one problem")
    return float(np.mean([pass_at_k(n, int(c), k) for c in correct_counts]))


def majority_vote(answers: Sequence[Hashable | None]) -> Hashable | None:
    """The most frequent non-None answer; ties go to the one seen first; None if all are None."""
    valid = [a for a in answers if a is not None]
    if not valid:
        return None
    counts = Counter(valid)
    best = max(counts.values())
    return next(a for a in valid if counts[a] == best)


def hypervolume(
    points: np.ndarray | Sequence[Sequence[float]],
    ref: Sequence[float] | float,
    maximize: bool | Sequence[bool] = False,
) -> float:
    """Exact hypervolume dominated by ``points`` with respect to ``ref`` (pymoo's HV indicator).

    Args:
        points: ``[n, m]`` objective vectors.
        ref: reference point ``[m]`` (or a scalar broadcast to all objectives); it must be dominated
            by the points that count (worse in every objective).
        maximize: one flag for all objectives or one per objective. pymoo minimises, so maximised
            objectives and their reference coordinates are negated.

    Raises:
        ValueError: on a shape mismatch or non-finite values.
    """
    from pymoo.indicators.hv import HV

    pts = np.asarray(points, dtype=float)
    if pts.ndim != 2 or pts.shape[0] == 0:
        raise ValueError(f"points must be a non-empty 2-D array [n, m], got shape {pts.shape}")
    m = pts.shape[1]
    r = np.broadcast_to(np.asarray(ref, dtype=float), (m,)).copy()
    flags = np.broadcast_to(np.asarray(maximize, dtype=bool), (m,))
    if not (np.isfinite(pts).all() and np.isfinite(r).all()):
        raise ValueError("points and ref must be finite")
    sign = np.where(flags, -1.0, 1.0)
    return float(HV(ref_point=r * sign)(pts * sign))


def expected_calibration_error(
    confidences: Sequence[float] | np.ndarray,
    correct: Sequence[bool] | np.ndarray,
    n_bins: int = 10,
) -> float:
    """ECE = Σ_b (|b|/n) · |acc(b) − conf(b)| over ``n_bins`` equal-width bins of [0, 1].

    Raises:
        ValueError: on mismatched lengths, confidences outside [0, 1], or ``n_bins < 1``.
    """
    conf = np.asarray(confidences, dtype=float)
    corr = np.asarray(correct, dtype=float)
    if conf.shape != corr.shape or conf.ndim != 1 or conf.size == 0:
        raise ValueError(
            f"confidences and correct must be equal-length 1-D, got {conf.shape} and {corr.shape}"
        )
    if ((conf < 0) | (conf > 1)).any():
        raise ValueError("confidences must lie in [0, 1]")
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    # Bin b holds (b/n_bins, (b+1)/n_bins]; confidence 0 goes to the first bin.
    idx = np.clip(np.ceil(conf * n_bins).astype(int) - 1, 0, n_bins - 1)
    ece = 0.0
    for b in range(n_bins):
        mask = idx == b
        if mask.any():
            ece += mask.mean() * abs(corr[mask].mean() - conf[mask].mean())
    return float(ece)


def auroc(scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray) -> float:
    """Area under the ROC curve (scikit-learn); label 1 is the positive class.

    Raises:
        ValueError: on mismatched lengths or when only one class is present.
    """
    from sklearn.metrics import roc_auc_score

    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels)
    if s.shape != y.shape or s.ndim != 1:
        raise ValueError(f"scores and labels must be equal-length 1-D, got {s.shape} and {y.shape}")
    if len(np.unique(y)) != 2:
        raise ValueError(f"labels must contain both classes, got {np.unique(y).tolist()}")
    return float(roc_auc_score(y, s))


def spearman(
    x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, *, min_n: int = 2
) -> float:
    """Spearman's rank correlation ρ of paired samples (``scipy.stats.spearmanr``; ties get average
    ranks).

    Args:
        x, y: equal-length 1-D samples.
        min_n: fewer pairs than this give NaN (some callers ask for 3: ρ of two points is ±1).

    Returns:
        ρ in [-1, 1]; NaN when there are fewer than ``min_n`` pairs, either side is constant or any
        value is NaN (ρ is undefined there).

    Raises:
        ValueError: on mismatched lengths, inputs that are not 1-D, or ``min_n < 2``.
    """
    from scipy.stats import spearmanr

    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"x and y must be equal-length 1-D, got shapes {a.shape} and {b.shape}")
    if min_n < 2:
        raise ValueError(f"min_n must be >= 2, got {min_n}")
    if a.size < min_n or np.isnan(a).any() or np.isnan(b).any() or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(spearmanr(a, b).statistic)


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
_NUMBER_WORDS = {
    w: str(i) for i, w in enumerate("zero one two three four five six seven eight nine".split())
}


def normalize_answer(text: str, *, number_words: bool = False) -> str:
    """SQuAD answer normalisation: lower-case, drop punctuation and the articles a/an/the, squeeze
    whitespace (the official SQuAD v1.1 evaluation script).

    Args:
        text: the answer.
        number_words: also map the words zero..nine to digits (LoCoMo-style scoring, as epicache's
            evaluation uses).

    Raises:
        TypeError: ``text`` is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    words = _ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split()
    if number_words:
        words = [_NUMBER_WORDS.get(w, w) for w in words]
    return " ".join(words)


def token_f1(pred: str, gold: str, normalize: Callable[[str], str] = normalize_answer) -> float:
    """Token-level F1 of a prediction against one gold answer (SQuAD): the harmonic mean of the
    precision and recall of the multiset of shared tokens after ``normalize``.

    Two empty answers score 1, one empty answer scores 0.
    """
    p, g = normalize(pred).split(), normalize(gold).split()
    if not p or not g:
        return float(p == g)
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0
    prec, rec = same / len(p), same / len(g)
    return 2 * prec * rec / (prec + rec)


def ci_halfwidth(
    values: Sequence[float] | np.ndarray,
    level: float = 0.95,
    dist: str = "normal",
) -> float:
    """Half-width of a confidence interval for the mean: q · s / √n, with s the sample standard
    deviation (ddof 1) and q the two-sided ``level`` quantile of the normal (``dist="normal"``) or
    Student-t with n − 1 degrees of freedom (``dist="t"``), from ``scipy.stats``.

    Args:
        values: the samples (one per seed, say).
        level: the coverage, in (0, 1).
        dist: ``"normal"`` or ``"t"``.

    Returns:
        The half-width; NaN for fewer than two values.

    Raises:
        ValueError: on ``level`` outside (0, 1), an unknown ``dist`` or non-1-D ``values``.
    """
    from scipy import stats

    x = np.asarray(values, dtype=float)
    if x.ndim != 1:
        raise ValueError(f"values must be 1-D, got shape {x.shape}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    if dist not in ("normal", "t"):
        raise ValueError(f"dist must be 'normal' or 't', got {dist!r}")
    if x.size < 2:
        return float("nan")
    tail = 0.5 + level / 2
    z = stats.norm.ppf(tail) if dist == "normal" else stats.t.ppf(tail, df=x.size - 1)
    return float(z * x.std(ddof=1) / math.sqrt(x.size))


def paired_difference(
    a: Sequence[float], b: Sequence[float], level: float = 0.95
) -> dict[str, float]:
    """Paired comparison of two arms on shared seeds or instances: the mean of ``a[i] − b[i]``, its
    Student-t half-width at ``level`` (:func:`ci_halfwidth`; NaN below two pairs), the pair count and
    the wins of ``a`` (our engineering: the statistic every toy diagnosis reports).

    Raises:
        ValueError: ``a`` and ``b`` differ in length.
    """
    import statistics

    d = [x - y for x, y in zip(a, b, strict=True)]
    if not d:
        return {"delta": float("nan"), "ci95": float("nan"), "n": 0, "wins": 0}
    ci = ci_halfwidth(d, level, dist="t")
    return {"delta": statistics.mean(d), "ci95": ci, "n": len(d), "wins": sum(x > 0 for x in d)}


def mean_over_seeds(
    per_seed: Sequence[dict[str, dict[str, float]]], std_keys: Sequence[str] = ()
) -> dict[str, dict[str, float]]:
    """Averages ``{arm: {metric: value}}`` rows over seeds (the arms and metrics of the first seed).

    Args:
        per_seed: one ``{arm: {metric: value}}`` dict per seed.
        std_keys: metrics that also get a ``<metric>_std`` entry (the sample standard deviation
            over seeds), for arms that report them, when there are two seeds or more.

    Raises:
        ValueError: ``per_seed`` is empty.
    """
    import statistics

    if not per_seed:
        raise ValueError("per_seed must hold at least one seed's metrics")
    out: dict[str, dict[str, float]] = {}
    for arm in per_seed[0]:
        rows = [m[arm] for m in per_seed]
        out[arm] = {k: statistics.mean(r[k] for r in rows) for k in rows[0]}
        for k in std_keys:
            if len(rows) > 1 and k in rows[0]:
                out[arm][f"{k}_std"] = statistics.stdev(r[k] for r in rows)
    return out
