"""A synthetic, verifiable arithmetic task: ``a op b`` questions with exact integer answers.

Small enough for a tiny model to learn on a CPU in minutes, and exactly checkable, which makes it the
default task of RL smoke tests and of the demo tour.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from datasets import Dataset

_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
_INT = re.compile(r"-?\d+")


def make_arithmetic_dataset(
    n: int,
    seed: int = 0,
    max_operand: int = 9,
    ops: Sequence[str] = ("+",),
    chat: bool = False,
) -> Dataset:
    """Generates ``n`` questions ``"What is a op b?"`` with operands in ``[0, max_operand]``.

    Args:
        n: number of rows.
        seed: the generator's seed (same seed, same rows).
        max_operand: the largest operand.
        ops: operators drawn uniformly from ``+``, ``-``, ``*``.
        chat: if True, ``prompt`` is a one-turn conversation (list of messages) instead of a string.

    Returns:
        A ``datasets.Dataset`` with columns ``prompt`` and ``answer`` (the integer as a string).

    Raises:
        ValueError: on ``n < 1``, a negative ``max_operand`` or an unknown operator.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if max_operand < 0:
        raise ValueError(f"max_operand must be >= 0, got {max_operand}")
    bad = [o for o in ops if o not in _OPS]
    if bad or not ops:
        raise ValueError(f"ops must be a non-empty subset of {sorted(_OPS)}, got {list(ops)}")
    rng = random.Random(seed)
    prompts, answers = [], []
    for _ in range(n):
        a, b, op = rng.randint(0, max_operand), rng.randint(0, max_operand), rng.choice(list(ops))
        q = f"What is {a} {op} {b}?"
        prompts.append([{"role": "user", "content": q}] if chat else q)
        answers.append(str(_OPS[op](a, b)))
    return Dataset.from_dict({"prompt": prompts, "answer": answers})


def _completion_text(completion) -> str:
    """TRL passes completions as strings or, for conversational data, as a list of messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise TypeError(f"completion must be a string or a list of messages, got {type(completion)}")


def verify_arithmetic(completion, answer: str | int) -> float:
    """1.0 if the first integer in ``completion`` equals ``answer``, else 0.0."""
    match = _INT.search(_completion_text(completion))
    return float(match is not None and int(match.group()) == int(answer))


def arithmetic_reward(completions: list, answer: list[str], **_: object) -> list[float]:
    """A TRL reward function (``reward_funcs=[arithmetic_reward]``) over a batch of completions."""
    return [verify_arithmetic(c, a) for c, a in zip(completions, answer, strict=True)]
