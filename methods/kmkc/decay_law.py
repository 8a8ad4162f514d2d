"""The structural decay law: accuracy falls exponentially with uncertainty (paper §2, App. C.1).

Per query: Ū(q) (mean U over K samples) and Acc(q). Queries are sorted by Ū and split into M
intervals; the bin centroids are fitted with E[Acc | U] ≈ a·exp(−b·U) + c (App. C.1;
the binning scheme, equal-count, is our inference).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np

from common.metrics import spearman

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecayFit:
    """Fitted a·exp(−b·U) + c with goodness of fit on the bin centroids.

    The law of paper §2 / App. C.1.
    """

    a: float
    b: float
    c: float
    r2: float
    spearman: float
    converged: bool = True

    def predict(self, u: np.ndarray) -> np.ndarray:
        """Accuracy predicted at uncertainties ``u``.

        Source: the paper's structural decay law ``a·exp(−b·U) + c`` (Figure 1).
        """
        return self.a * np.exp(-self.b * np.asarray(u, dtype=float)) + self.c


def bin_by_uncertainty(
    u: np.ndarray,
    acc: np.ndarray,
    n_bins: int = 100,
    scheme: Literal["equal_count", "equal_width"] = "equal_count",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bins queries by mean uncertainty and returns per-bin centroids (App. C.1: M intervals,
    centroids of Ū and Acc; equal-count bins are our inference).

    Args:
        u: ``[N]`` per-query mean uncertainty Ū.
        acc: ``[N]`` per-query accuracy in [0, 1].
        n_bins: M; the paper uses 100. Must satisfy 2 <= M <= N.
        scheme: ``equal_count`` (sizes differ by at most one; default, inferred) or
            ``equal_width`` (empty bins are dropped).

    Returns:
        ``(x[M'], y[M'], counts[M'])``: mean Ū, mean accuracy and size per non-empty bin.
    """
    u = np.asarray(u, dtype=float)
    acc = np.asarray(acc, dtype=float)
    if u.ndim != 1 or u.shape != acc.shape:
        raise ValueError(f"u and acc must be equal-length 1-D arrays, got {u.shape}, {acc.shape}")
    if not np.isfinite(u).all():
        raise ValueError("u must be finite (drop empty generations before binning)")
    if ((acc < 0) | (acc > 1)).any():
        raise ValueError("acc must lie in [0, 1]")
    n = u.size
    if not 2 <= n_bins <= n:
        raise ValueError(f"n_bins must satisfy 2 <= n_bins <= N={n}, got {n_bins}")
    order = np.argsort(u, kind="stable")
    if scheme == "equal_count":
        groups = np.array_split(order, n_bins)
    elif scheme == "equal_width":
        edges = np.linspace(u.min(), u.max(), n_bins + 1)
        idx = np.clip(np.searchsorted(edges, u, side="right") - 1, 0, n_bins - 1)
        groups = [np.nonzero(idx == b)[0] for b in range(n_bins)]
        groups = [g for g in groups if g.size]
    else:
        raise ValueError(f"scheme must be 'equal_count' or 'equal_width', got {scheme!r}")
    x = np.array([u[g].mean() for g in groups])
    y = np.array([acc[g].mean() for g in groups])
    counts = np.array([g.size for g in groups])
    return x, y, counts


def _decay(u: np.ndarray, a: float, b: float, c: float) -> np.ndarray:
    return a * np.exp(-b * u) + c


def fit_structural_decay(x: np.ndarray, y: np.ndarray) -> DecayFit:
    """Least-squares fit of Acc ≈ a·exp(−b·U) + c to bin centroids (paper Fig. 1, App. C.1).

    Uses ``scipy.optimize.curve_fit`` started from (y_max − y_min, 1/std(x), y_min). Never raises on
    non-convergence: returns ``converged=False`` with NaN parameters and R² instead. A fit whose
    parameters or R² are not finite (constant accuracy leaves R² undefined) is also reported with
    ``converged=False``, never as a converged fit with a NaN R².

    Returns:
        :class:`DecayFit` with R² on the centroids and the Spearman ρ between x and y.
    """
    from scipy.optimize import curve_fit

    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.ndim != 1 or x.shape != y.shape or x.size < 3:
        raise ValueError(
            f"x and y must be equal-length 1-D with >= 3 points, got {x.shape}, {y.shape}"
        )
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("x and y (bin centroids) must be finite, got NaN/inf")
    rho = spearman(x, y)  # NaN when a side is constant
    p0 = (max(float(np.ptp(y)), 1e-3), 1.0 / max(float(x.std()), 1e-6), float(y.min()))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (a, b, c), _ = curve_fit(_decay, x, y, p0=p0, maxfev=20000)
    except (RuntimeError, ValueError) as err:
        logger.warning("structural decay fit did not converge: %s", err)
        nan = float("nan")
        return DecayFit(nan, nan, nan, nan, rho, converged=False)
    resid = y - _decay(x, a, b, c)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    # constant y: R² is undefined (ss_tot is rounding noise, not 0)
    r2 = 1.0 - float((resid**2).sum()) / ss_tot if np.ptp(y) > 0 else float("nan")
    ok = bool(np.isfinite([a, b, c, r2]).all())
    if not ok:  # e.g. constant accuracy (R² undefined) or overflowing parameters
        logger.warning(
            "structural decay fit is not usable (a=%s, b=%s, c=%s, R²=%s): reported converged=False",
            a,
            b,
            c,
            r2,
        )
    return DecayFit(float(a), float(b), float(c), r2, rho, converged=ok)
