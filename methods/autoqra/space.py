"""Search space of AutoQRA (official core/config.py): per-layer bit-width q_ℓ ∈ Q and LoRA rank r_ℓ ∈ R.

A configuration ``C = (q, r)`` assigns one bit-width and one rank to every transformer block (all seven
projections of a block share them). ``SearchSpace`` holds the two ladders, validates configurations and
provides the ordinal scores ``s_q``/``s_r`` and nearest-ladder rounding used by the warm start (Eq. 6).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


class BudgetInfeasibleError(ValueError):
    """Raised when even the cheapest configuration (all q_min, all r_min) exceeds the memory budget."""


@dataclass(frozen=True)
class QRConfig:
    """One point of the joint search space: per-layer bits ``q`` and LoRA ranks ``r`` (hashable).

    Args:
        q: bit-width of each block, length L.
        r: LoRA rank of each block, length L.
    """

    q: tuple[int, ...]
    r: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "q", tuple(int(v) for v in self.q))
        object.__setattr__(self, "r", tuple(int(v) for v in self.r))
        if len(self.q) != len(self.r):
            raise ValueError(
                f"q and r must have the same length, got {len(self.q)} and {len(self.r)}"
            )
        if len(self.q) == 0:
            raise ValueError("q and r must be non-empty")

    @property
    def num_layers(self) -> int:
        """Number of blocks L; engineering, not in the paper."""
        return len(self.q)

    def key(self) -> str:
        """SHA-1 of ``{"q": ..., "r": ...}`` (the repo's cache key).

        Source: official ``evaluation/real_task.py`` cache key.
        """
        blob = json.dumps({"q": list(self.q), "r": list(self.r)}, sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()

    def to_dict(self) -> dict[str, list[int]]:
        """``{"q": [...], "r": [...]}`` as plain lists; engineering,
        not in the paper.
        """
        return {"q": list(self.q), "r": list(self.r)}

    @classmethod
    def uniform(cls, num_layers: int, bits: int, rank: int) -> QRConfig:
        """Every block at ``bits`` and ``rank`` (the uniform baselines); engineering,
        not in the paper.
        """
        return cls((bits,) * num_layers, (rank,) * num_layers)


def _check_ladder(name: str, values: Sequence[int]) -> tuple[int, ...]:
    vals = tuple(int(v) for v in values)
    if len(vals) == 0:
        raise ValueError(f"{name} must be a non-empty list of positive integers")
    if len(set(vals)) != len(vals):
        raise ValueError(f"{name} contains duplicates: {list(values)}")
    if any(v <= 0 for v in vals):
        raise ValueError(f"{name} values must be > 0, got {list(values)}")
    return tuple(sorted(vals))


class SearchSpace:
    """Bit ladder ``Q`` × rank ladder ``R`` over ``num_layers`` blocks (official core/config.py).

    Args:
        Q: allowed bit-widths (e.g. ``(2, 3, 4, 8)``), distinct and > 0.
        R: allowed LoRA ranks (e.g. ``(4, 8, 16)``), distinct and > 0.
        num_layers: number of transformer blocks L.
    """

    def __init__(self, Q: Sequence[int], R: Sequence[int], num_layers: int) -> None:
        self.Q = _check_ladder("Q", Q)
        self.R = _check_ladder("R", R)
        if int(num_layers) < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        self.num_layers = int(num_layers)

    # ordinal scores (official core/config.py)
    def s_q(self, q: int | np.ndarray) -> np.ndarray:
        """Ordinal bit score ``(q − q_min)/(q_max − q_min)`` (official ``core/config.py``)."""
        lo, hi = self.Q[0], self.Q[-1]
        return (np.asarray(q, dtype=float) - lo) / max(hi - lo, 1e-12)

    def s_r(self, r: int | np.ndarray) -> np.ndarray:
        """Ordinal rank score ``(r − r_min)/(r_max − r_min)`` (official ``core/config.py``)."""
        lo, hi = self.R[0], self.R[-1]
        return (np.asarray(r, dtype=float) - lo) / max(hi - lo, 1e-12)

    @staticmethod
    def _round(ladder: tuple[int, ...], v: float) -> int:
        # nearest ladder value; ties go to the first (lower) value because argmin returns the first
        d = np.abs(np.asarray(ladder, dtype=float) - float(v))
        return ladder[int(np.argmin(d))]

    def round_Q(self, v: float) -> int:
        """Nearest bit-width on the ladder, the lower on a tie (official ``core/config.py``)."""
        return self._round(self.Q, v)

    def round_R(self, v: float) -> int:
        """Nearest rank on the ladder, the lower on a tie (official ``core/config.py``)."""
        return self._round(self.R, v)

    def idx_q(self, q: int) -> int:
        """Ladder index of bit-width ``q`` (for paper Eq. 11's atomic distance)."""
        return self.Q.index(q)

    def idx_r(self, r: int) -> int:
        """Ladder index of rank ``r`` (for paper Eq. 11's atomic distance)."""
        return self.R.index(r)

    def minimum(self) -> QRConfig:
        """Every block at min(Q) and min(R); engineering, not in the paper."""
        return QRConfig.uniform(self.num_layers, self.Q[0], self.R[0])

    def maximum(self) -> QRConfig:
        """Every block at max(Q) and max(R); engineering, not in the paper."""
        return QRConfig.uniform(self.num_layers, self.Q[-1], self.R[-1])

    def validate(self, cfg: QRConfig) -> QRConfig:
        """Raise ``ValueError`` if ``cfg`` has the wrong length or values off the ladders.

        Source: our choice (bad-input rules), not in the paper.
        """
        if not isinstance(cfg, QRConfig):
            raise TypeError(f"cfg must be a QRConfig, got {type(cfg).__name__}")
        if cfg.num_layers != self.num_layers:
            raise ValueError(
                f"cfg has {cfg.num_layers} layers (len(q)=len(r)), expected num_layers={self.num_layers}"
            )
        bad_q = sorted({v for v in cfg.q if v not in self.Q})
        bad_r = sorted({v for v in cfg.r if v not in self.R})
        if bad_q:
            raise ValueError(f"cfg.q has values {bad_q} not in the bit ladder Q={list(self.Q)}")
        if bad_r:
            raise ValueError(f"cfg.r has values {bad_r} not in the rank ladder R={list(self.R)}")
        return cfg
