"""Verifiable tasks: synthetic generators and loaders for math-style sets, with answer verifiers."""

from common.tasks.arithmetic import arithmetic_reward, make_arithmetic_dataset, verify_arithmetic
from common.tasks.math_sets import (
    FIXTURES,
    boxed_reward,
    extract_boxed,
    load_math_dataset,
    load_math_set,
    verify_boxed,
)

__all__ = [
    "FIXTURES",
    "arithmetic_reward",
    "boxed_reward",
    "extract_boxed",
    "load_math_dataset",
    "load_math_set",
    "make_arithmetic_dataset",
    "verify_arithmetic",
    "verify_boxed",
]
