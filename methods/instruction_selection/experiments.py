"""The distance-quantile protocol and its Spearman table (the paper's
distance-vs-performance analysis, Figs. 2–3; official ``quantile/convert_to_dist_quant.py``).

RR orders the whole pool; the ordering is cut into ``n_quantiles`` contiguous chunks (chunk 0 =
closest to the queries), the first ``per_quantile`` of each chunk are fine-tuned on, and the
Spearman correlation between chunk index and each metric says whether the representation's distance
predicts the target loss.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from common.metrics import spearman


def distance_quantiles(
    order: Sequence[int], n_quantiles: int = 10, per_quantile: int = 500
) -> list[list[int]]:
    """Splits an ordering into ``n_quantiles`` contiguous chunks and keeps each chunk's head.

    The distance-quantile protocol behind the paper's Figs. 2–3 (official
    ``quantile/convert_to_dist_quant.py``).

    Chunks have ``len(order) // n_quantiles`` entries; the last one absorbs the remainder.

    Returns:
        ``n_quantiles`` lists, each the first ``min(per_quantile, chunk size)`` of its chunk in order.

    Raises:
        ValueError: if ``n_quantiles < 1``, ``per_quantile < 1`` or the ordering is too short.
    """
    order = [int(j) for j in order]
    if n_quantiles < 1 or per_quantile < 1:
        raise ValueError(
            f"n_quantiles and per_quantile must be >= 1, got {n_quantiles}, {per_quantile}"
        )
    if len(order) < n_quantiles:
        raise ValueError(f"order has {len(order)} entries, fewer than n_quantiles={n_quantiles}")
    size = len(order) // n_quantiles
    out = []
    for q in range(n_quantiles):
        end = len(order) if q == n_quantiles - 1 else (q + 1) * size
        out.append(order[q * size : end][:per_quantile])
    return out


def spearman_table(results: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Spearman ρ between chunk index ``0..n−1`` and each named per-chunk metric (scipy).

    The correlations reported with the paper's Figs. 2–3.
    """
    out = {}
    for name, values in results.items():
        values = np.asarray(values, dtype=np.float64)
        if values.ndim != 1 or len(values) < 2:
            raise ValueError(f"results[{name!r}] must hold >= 2 per-chunk values")
        out[name] = spearman(np.arange(len(values)), values)
    return out
