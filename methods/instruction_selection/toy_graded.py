"""Graded near-target families for the toy's diagnosis (docs/methods/instruction_selection.md,
"Diagnosis"): our construction, not the paper's.

A family ``add~q`` holds pool-phrased additions whose answer is the true sum with probability ``q``
and otherwise the sum of two fresh two-digit numbers (same answer format, no input–output link).
Transfer to the addition target therefore declines with ``q`` by construction, from the target
family itself (``q = 1``) to a format-only family (``q = 0``).
"""

from __future__ import annotations

import math

import numpy as np

PREFIX = "add~"


def near_family(q: float) -> str:
    """The family name of grade ``q`` (``add~0.75``)."""
    return f"{PREFIX}{q:g}"


def is_near(family: str) -> bool:
    """True for a graded near-target family name."""
    return family.startswith(PREFIX)


def grade_of(family: str) -> float:
    """The answer-correctness probability ``q`` of ``add~q``."""
    return float(family[len(PREFIX) :])


def near_example(family: str, rng: np.random.Generator) -> tuple[str, str]:
    """One ``add~q`` example: (question in the pool's addition phrasing, answer)."""
    a, b = int(rng.integers(10, 100)), int(rng.integers(10, 100))
    q = [f"What is {a} plus {b}?", f"Compute {a} + {b}."][int(rng.integers(2))]
    if rng.random() < grade_of(family):
        return q, str(a + b)
    return q, str(int(rng.integers(10, 100)) + int(rng.integers(10, 100)))


def finetune_steps(cfg, n_items: int) -> int:
    """Fine-tuning steps for a subset of ``n_items``: ``cfg.train_steps`` (fixed steps, the original
    toy) or, with ``cfg.train_epochs > 0``, ``ceil(train_epochs · n_items / train_batch)``."""
    if cfg.train_epochs <= 0:
        return int(cfg.train_steps)
    return max(1, math.ceil(cfg.train_epochs * n_items / cfg.train_batch))
