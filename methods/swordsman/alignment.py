"""Block-syntax alignment rate (a paper metric; the segmentation is our inference).

The paper reports how often decoder block boundaries coincide with syntactic segment boundaries (78% for
Swordsman vs 12-16% for fixed blocks). The segmentation procedure is not published; here the caller
supplies the gold segment starts and a boundary counts as aligned when it lands within ``tol`` positions.
"""

from __future__ import annotations

from collections.abc import Iterable


def boundary_alignment(
    boundaries: Iterable[int], gold_boundaries: Iterable[int], tol: int = 0
) -> float:
    """Fraction of decoder block boundaries that coincide with a gold segment boundary.

    Source: our inference (the paper's block-syntax alignment rate, quoted in the official
    ``rebuttal.md``; its segmenter is not published).

    Args:
        boundaries: positions where a decoded block ends (= where the next one starts); callers should
            drop the trivial boundary at the sequence end.
        gold_boundaries: positions where a gold segment starts.
        tol: allowed distance (0 = exact match).

    Returns:
        Aligned fraction in ``[0, 1]``; ``nan`` when ``boundaries`` is empty.
    """
    if tol < 0:
        raise ValueError(f"tol must be >= 0, got {tol}")
    b = list(boundaries)
    gold = sorted(set(gold_boundaries))
    if not b:
        return float("nan")
    hits = sum(any(abs(x - y) <= tol for y in gold) for x in b)
    return hits / len(b)
