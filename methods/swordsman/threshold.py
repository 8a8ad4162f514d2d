"""Dynamic parallel-unmasking threshold ("DPU", spec §3.3).

Inside a block the commit threshold falls as the block becomes less uncertain:
``r_t = min(1, H̄_t / H̄_0)`` compares the mean entropy of the block's still-masked tokens now (``H̄_t``)
with its value at the block's first step (``H̄_0``), and ``τ_t = τ_min + (τ_max - τ_min) · g(r_t)``
with ``g(1) = 1`` and ``g(0) = 0`` (default ``g(r) = r**γ``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

# Shapes g: [0, 1] -> [0, 1], non-decreasing, g(0) = 0, g(1) = 1; k is the schedule parameter (gamma).
SCHEDULES: dict[str, Callable[[float, float], float]] = {
    "power_decay": lambda r, k: r**k,
    "linear": lambda r, k: r,
    "square": lambda r, k: r**2,
    "cubic": lambda r, k: r**3,
    "sqrt": lambda r, k: math.sqrt(r),
    "cosine": lambda r, k: 0.5 * (1.0 - math.cos(math.pi * r)),
    "sine": lambda r, k: math.sin(0.5 * math.pi * r),
    "circular": lambda r, k: math.sqrt(max(0.0, 1.0 - (1.0 - r) ** 2)),
    "exponential": lambda r, k: (1.0 - math.exp(-k * r)) / (1.0 - math.exp(-k)),
    "logarithmic": lambda r, k: math.log1p(k * r) / math.log1p(k),
}

_EPS = 1e-6


def dynamic_threshold(
    h_cur: float,
    h_ref: float,
    tau_max: float = 0.9,
    tau_min: float = 0.7,
    gamma: float = 1.0,
    schedule: str = "power_decay",
) -> float:
    """Commit threshold ``τ_t`` for the current denoising step of a block (spec §3.3).

    Args:
        h_cur: ``H̄_t``, mean entropy of the block's still-masked positions now (nats, >= 0).
        h_ref: ``H̄_0``, the same quantity at the block's first step (the pivot).
        tau_max: threshold when the block is as uncertain as at its start (``r = 1``).
        tau_min: threshold when the block's uncertainty has vanished (``r = 0``).
        gamma: schedule parameter (exponent of ``power_decay``).
        schedule: name of ``g`` in ``SCHEDULES``.

    Returns:
        ``τ_t ∈ [tau_min, tau_max]``, non-decreasing in ``h_cur``.

    Raises:
        ValueError: on negative/non-finite entropies or invalid thresholds, gamma or schedule.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {sorted(SCHEDULES)}, got {schedule!r}")
    if not (math.isfinite(h_cur) and h_cur >= 0):
        raise ValueError(f"h_cur must be a finite entropy >= 0, got {h_cur}")
    if not (math.isfinite(h_ref) and h_ref >= 0):
        raise ValueError(f"h_ref must be a finite entropy >= 0, got {h_ref}")
    if not 0.0 < tau_max <= 1.0:
        raise ValueError(f"tau_max must be in (0, 1], got {tau_max}")
    if not 0.0 <= tau_min <= tau_max:
        raise ValueError(f"tau_min must be in [0, tau_max={tau_max}], got {tau_min}")
    if gamma <= 0:
        raise ValueError(f"gamma must be > 0, got {gamma}")
    # Deviation (spec §9 / §3.3 guard): the official code divides by H̄_0 unguarded; a block whose
    # initial entropy is ~0 is already certain, so use r = 0 (lowest threshold).
    r = 0.0 if h_ref < _EPS else min(1.0, h_cur / h_ref)
    g = min(1.0, max(0.0, SCHEDULES[schedule](r, float(gamma))))
    return float(tau_min + (tau_max - tau_min) * g)
