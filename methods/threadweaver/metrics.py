"""Latency metrics of parallel trajectories (§2.2, §5.3, §6.1; Eq. 8).

For one response (all branches joined, tags included):

* ``L_total``  = every generated token = ``len(response)``;
* ``L_longest`` (token latency, critical path) =
  Σ sequential tokens + Σ_blocks (S_b + max_i |thread_{b,i}|), where S_b counts the block's
  non-thread tokens (outlines and the ``<Thread>``/``</Thread>`` wrapper tokens, as the official code
  does) and ``<Parallel>``/``</Parallel>`` count as sequential;
* acceleration ratio ``η = 1 − L_longest / L_total`` (Eq. 8), 0 for sequential output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["Stats", "parallel_stats", "speedup_report"]

_NEEDED = ("<Parallel>", "</Parallel>", "<Thread>", "</Thread>")


@dataclass
class Stats:
    """Per-response latency statistics (see module docstring)."""

    total: int
    longest: int
    eta: float
    n_blocks: int
    threads_per_block: list[int] = field(default_factory=list)

    @property
    def has_parallel(self) -> bool:
        """Whether the response has at least one parallel block (activation ratio;
        paper Sections 2.2 and 6.1).
        """
        return self.n_blocks > 0

    @property
    def self_speedup(self) -> float:
        """``L_total / L_longest = 1 / (1 − η)``.

        Source: paper Section 2.2 (acceleration ratio η); official ``get_parallel_stats``.
        """
        return self.total / self.longest if self.longest else 1.0


def parallel_stats(response_ids: Sequence[int], ids: Mapping[str, int]) -> Stats:
    """Critical-path statistics of one response (paper §2.2, §5.3, Eq. 8; official
    ``get_parallel_stats``).

    Args:
        response_ids: generated token ids (prompt excluded), all threads joined.
        ids: tag -> token id; needs ``<Parallel>``, ``</Parallel>``, ``<Thread>``, ``</Thread>``.

    Returns:
        :class:`Stats`. An unterminated thread or block at the end is flushed as if closed;
        ``L_total = 0`` gives ``η = 0``.
    """
    missing = [t for t in _NEEDED if t not in ids]
    if missing:
        raise ValueError(f"ids is missing tag ids {missing}")
    p_open, p_close = ids["<Parallel>"], ids["</Parallel>"]
    t_open, t_close = ids["<Thread>"], ids["</Thread>"]
    seq = 0
    longest_blocks = 0
    threads_per_block: list[int] = []
    in_block = in_thread = False
    s_b, cur, lens = 0, 0, []

    def flush_block() -> None:
        nonlocal longest_blocks
        longest_blocks += s_b + (max(lens) if lens else 0)
        threads_per_block.append(len(lens))

    for t in response_ids:
        if not in_block:
            seq += 1
            if t == p_open:
                in_block, s_b, lens = True, 0, []
            continue
        if in_thread:
            if t == t_close:
                in_thread = False
                lens.append(cur)
                s_b += 1  # wrapper token: sequential overhead (official code)
            else:
                cur += 1
            continue
        if t == t_open:
            in_thread, cur = True, 0
            s_b += 1
        elif t == p_close:
            flush_block()
            in_block = False
            seq += 1
        else:
            s_b += 1
    if in_block:
        if in_thread:
            lens.append(cur)
        flush_block()
    total = len(response_ids)
    longest = seq + longest_blocks
    eta = 1.0 - longest / total if total else 0.0
    return Stats(total, longest, eta, len(threads_per_block), threads_per_block)


def speedup_report(
    seq_longest: Sequence[Sequence[float]],
    par_longest: Sequence[Sequence[float]],
    seq_correct: Sequence[Sequence[bool]] | None = None,
    par_correct: Sequence[Sequence[bool]] | None = None,
) -> dict[str, float]:
    """Dataset speedups of Table 1: per problem ``s_q = mean L_longest^seq / mean L_longest^ours``.

    Args:
        seq_longest, par_longest: per problem, the critical-path lengths of each rollout.
        seq_correct, par_correct: per problem, rollout correctness (for the correct-only variants).

    Returns:
        ``speedup`` (mean_q s_q) and, with correctness, ``speedup_correct`` (problems where both
        models have a correct rollout, correct rollouts only) and ``max_speedup_correct``.
    """
    if len(seq_longest) != len(par_longest):
        raise ValueError(
            f"seq_longest has {len(seq_longest)} problems but par_longest {len(par_longest)}"
        )
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    ratios = [mean(s) / mean(p) for s, p in zip(seq_longest, par_longest) if s and p]
    out = {"speedup": mean(ratios) if ratios else float("nan")}
    if seq_correct is not None and par_correct is not None:
        rc = []
        for s, p, cs, cp in zip(seq_longest, par_longest, seq_correct, par_correct):
            s_ok = [x for x, c in zip(s, cs) if c]
            p_ok = [x for x, c in zip(p, cp) if c]
            if s_ok and p_ok:
                rc.append(mean(s_ok) / mean(p_ok))
        out["speedup_correct"] = mean(rc) if rc else float("nan")
        out["max_speedup_correct"] = max(rc) if rc else float("nan")
    return out
