"""Dynamic parallel-unmasking threshold ("DPU"; official code `llada/generate.py::get_dynamic_threshold_by_entropy`).

Inside a block the commit threshold falls as the block becomes less uncertain:
``r_t = min(1, H̄_t / H̄_0)`` compares the mean entropy of the block's still-masked tokens now (``H̄_t``)
with its value at the block's first step (``H̄_0``), and ``τ_t = τ_min + (τ_max - τ_min) · g(r_t)``
with ``g(1) = 1`` and ``g(0) = 0`` (default ``g(r) = r**γ``).

Two rules for the schedule parameter γ (``rule``):

* ``"official"`` (default; zy-ansel/Swordsman ``llada/generate.py`` and
  ``dream/model/generation_utils_block.py``): for every schedule except ``power_decay`` a γ > 1 first
  rescales the ratio, ``r ← max(0, γ·r − (γ − 1))`` (the threshold stays at ``τ_min`` until
  ``r > 1 − 1/γ``), and ``exp``/``log`` use ``k = max(γ, 0.1)``; ``power_decay`` uses the raw ratio.
* ``"unscaled"`` (this repository's earlier rule): no rescaling, ``k = γ``.

Schedule names follow the official code (``sigmoid`` is the raised cosine, ``elliptical`` the quarter
circle, ``exp``/``log``); the older names ``cosine``, ``circular``, ``exponential`` and ``logarithmic``
remain as aliases.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from methods.swordsman.config import SCHEDULE_NAMES, THRESHOLD_RULES


def _step(r: float, k: float) -> float:
    # Official three-level staircase: 1 above r = 0.8, 0.7 above r = 0.4, else 0.
    if r > 0.8:
        return 1.0
    if r > 0.4:
        return 0.7
    return 0.0


def _exp(r: float, k: float) -> float:
    # Official ``exp`` schedule: normalised saturating exponential.
    return (1.0 - math.exp(-k * r)) / (1.0 - math.exp(-k))


def _log(r: float, k: float) -> float:
    # Official ``log`` schedule: normalised logarithm.
    return math.log1p(k * r) / math.log1p(k)


# Shapes g: [0, 1] -> [0, 1], non-decreasing, g(0) = 0, g(1) = 1; k is the schedule parameter.
SCHEDULES: dict[str, Callable[[float, float], float]] = {
    "power_decay": lambda r, k: r**k,
    "linear": lambda r, k: r,
    "square": lambda r, k: r**2,
    "cubic": lambda r, k: r**3,
    "sqrt": lambda r, k: math.sqrt(r),
    "sigmoid": lambda r, k: 0.5 * (1.0 - math.cos(math.pi * r)),
    "step": _step,
    "sine": lambda r, k: math.sin(0.5 * math.pi * r),
    "elliptical": lambda r, k: math.sqrt(max(0.0, 1.0 - (1.0 - r) ** 2)),
    "exp": _exp,
    "log": _log,
}
# Earlier names of this repository (same functions).
ALIASES = {
    "cosine": "sigmoid",
    "circular": "elliptical",
    "exponential": "exp",
    "logarithmic": "log",
}
SCHEDULES.update({alias: SCHEDULES[name] for alias, name in ALIASES.items()})
if set(SCHEDULES) != set(SCHEDULE_NAMES):  # config.py keeps the names for the light CLI import
    raise RuntimeError("methods/swordsman/config.py SCHEDULE_NAMES is out of sync with SCHEDULES")

_EPS = 1e-6


def dynamic_threshold(
    h_cur: float,
    h_ref: float,
    tau_max: float = 0.9,
    tau_min: float = 0.7,
    gamma: float = 1.0,
    schedule: str = "power_decay",
    rule: str = "official",
) -> float:
    """Commit threshold ``τ_t`` for the current denoising step of a block (paper abstract: the
    unmasking threshold adapts to the block's real-time unmasking status; formula and schedules of
    official ``llada/generate.py::get_dynamic_threshold_by_entropy``; the ``H̄_0 ≈ 0`` guard is ours,
    deviations table).

    Args:
        h_cur: ``H̄_t``, mean entropy of the block's still-masked positions now (nats, >= 0).
        h_ref: ``H̄_0``, the same quantity at the block's first step (the pivot).
        tau_max: threshold when the block is as uncertain as at its start (``r = 1``).
        tau_min: threshold when the block's uncertainty has vanished (``r = 0``).
        gamma: schedule parameter (``confidence_boost`` in the official code).
        schedule: name of ``g`` in ``SCHEDULES``.
        rule: ``"official"`` (ratio rescaling for γ > 1, ``k = max(γ, 0.1)``) or ``"unscaled"``.

    Returns:
        ``τ_t ∈ [tau_min, tau_max]``, non-decreasing in ``h_cur``.

    Raises:
        ValueError: on negative/non-finite entropies or invalid thresholds, gamma, schedule or rule.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {sorted(SCHEDULES)}, got {schedule!r}")
    if rule not in THRESHOLD_RULES:
        raise ValueError(f"rule must be one of {THRESHOLD_RULES}, got {rule!r}")
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
    name = ALIASES.get(schedule, schedule)
    gamma = float(gamma)
    # Deviation: the official code divides by H̄_0 unguarded; a block whose initial entropy is ~0 is
    # already certain, so use r = 0 (lowest threshold).
    r = 0.0 if h_ref < _EPS else min(1.0, h_cur / h_ref)
    k = gamma
    if rule == "official" and name != "power_decay":
        if gamma > 1.0:
            r = max(0.0, r * gamma - (gamma - 1.0))
        if name in ("exp", "log"):
            k = max(gamma, 0.1)
    g = min(1.0, max(0.0, SCHEDULES[name](r, k)))
    return float(tau_min + (tau_max - tau_min) * g)
