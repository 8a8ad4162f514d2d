"""A scoped thread count for torch's intra-op pool.

The toys run tiny matmuls on a shared CPU, where extra OpenMP threads only spin and contend.
``torch_threads(n)`` sets the count for a block and restores the previous value on exit (also when
the block raises), so a toy run inside a test or a notebook leaves the process as it found it. It is
a :func:`contextlib.contextmanager`, so it also works as a decorator (``@torch_threads(1)``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[int]:
    """Runs the block with ``torch.set_num_threads(n)``; restores the previous count afterwards.

    Args:
        n: the intra-op thread count inside the block (an int >= 1).

    Yields:
        ``n``.

    Raises:
        TypeError / ValueError: ``n`` is not an int >= 1.
    """
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"torch_threads: n must be an int >= 1, got {type(n).__name__} {n!r}")
    if n < 1:
        raise ValueError(f"torch_threads: n must be >= 1, got {n}")
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(previous)
