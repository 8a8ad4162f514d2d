"""Shared helpers for the benches: timing, peak memory, the machine string and result rows.

Every bench module ``scripts/bench/<name>.py`` exposes ``run(quick: bool = False) -> dict``::

    {"title": str, "command": str,
     "rows": [{"metric", "method", "baseline", "ratio", "spread", "threshold", "met"}, ...],
     "notes": str}

Build rows with :func:`row` so that ``ratio = method / baseline`` and ``met`` follow from the threshold.
``python -m scripts.bench all`` runs them all and writes ``docs/benchmarks.md``.

Peak memory (:func:`peak_memory`) on the CPU:

* torch tensors: ``torch.profiler`` with ``profile_memory=True``; its memory timeline lists every
  tensor allocation and free (``torch.profiler._memory_profiler.MemoryProfile``), and the peak is the
  maximum over time of the bytes allocated during ``fn`` and not yet freed (tensors alive before
  ``fn`` are not counted). This counts the c10 CPU allocator, i.e. all tensor storage, honestly
  including autograd buffers; it does not count Python objects or allocator slack.
* numpy / Python: ``tracemalloc`` peak (numpy reports its buffers to tracemalloc).

``peak_memory(fn)`` measures the first, ``peak_memory(fn, torch_=False)`` the second.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

__all__ = [
    "machine",
    "now",
    "peak_memory",
    "peak_rss",
    "row",
    "spread_ratio",
    "time_median",
    "time_pair",
]


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def machine() -> str:
    """One line: CPU model, cores, torch threads, load average, GPU (if any), library versions."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    parts = [f"{cpu}, {os.cpu_count()} cores"]
    try:
        import torch

        parts.append(f"torch {torch.__version__} ({torch.get_num_threads()} threads)")
        if torch.cuda.is_available():
            parts.append(f"GPU {torch.cuda.get_device_name(0)}")
    except ImportError:  # pragma: no cover
        pass
    try:
        import transformers
        import trl

        parts.append(f"transformers {transformers.__version__}, trl {trl.__version__}")
    except ImportError:  # pragma: no cover
        pass
    try:
        la = os.getloadavg()
        parts.append(f"load avg {la[0]:.1f}/{la[1]:.1f}")
    except OSError:  # pragma: no cover
        pass
    parts.append(f"Python {platform.python_version()}")
    return "; ".join(parts)


def _iqr(xs: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[2] - q[0]


def time_median(fn: Callable[[], Any], repeats: int = 5, warmup: int = 1) -> tuple[float, float]:
    """``(median_s, iqr_s)`` of ``fn()``'s wall time over ``repeats`` calls after ``warmup`` calls."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats=}, {warmup=}")
    for _ in range(warmup):
        fn()
    xs = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t)
    return statistics.median(xs), _iqr(xs)


def time_pair(
    method: Callable[[], Any], baseline: Callable[[], Any], repeats: int = 5, warmup: int = 1
) -> tuple[float, float, float, float, float]:
    """Interleaved timing of two callables (less sensitive to drifting machine load).

    Returns ``(method_median, baseline_median, ratio_median, ratio_q1, ratio_q3)`` where the ratio
    statistics are over the per-repeat ratios ``method_i / baseline_i``.
    """
    for _ in range(warmup):
        baseline()
        method()
    m, b = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        baseline()
        b.append(time.perf_counter() - t)
        t = time.perf_counter()
        method()
        m.append(time.perf_counter() - t)
    r = [x / y for x, y in zip(m, b)]
    q1, q3 = statistics.quantiles(r, n=4, method="inclusive")[::2] if len(r) > 1 else (r[0], r[0])
    return statistics.median(m), statistics.median(b), statistics.median(r), q1, q3


def _torch_peak(fn: Callable[[], Any]) -> tuple[int, Any]:
    import torch.profiler as tp
    from torch.profiler._memory_profiler import Action

    with tp.profile(
        activities=[tp.ProfilerActivity.CPU],
        profile_memory=True,
        record_shapes=True,
        with_stack=True,
    ) as prof:
        out = fn()
    live = peak = 0
    for _, action, _, size in sorted(prof._memory_profile().timeline, key=lambda e: e[0]):
        if action == Action.CREATE:
            live += size
        elif action == Action.DESTROY:
            live -= size
        peak = max(peak, live)
    return peak, out


def peak_memory(fn: Callable[[], Any], torch_: bool = True) -> int:
    """Peak bytes allocated by ``fn()``: torch CPU tensors (profiler), or numpy/Python (tracemalloc).

    ``torch_=True`` counts tensor storage only (the profiler's own Python bookkeeping would
    otherwise swamp small measurements); ``torch_=False`` uses ``tracemalloc`` (numpy buffers and
    Python objects).
    """
    if torch_:
        return int(_torch_peak(fn)[0])
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return int(tracemalloc.get_traced_memory()[1] - base)
    finally:
        tracemalloc.stop()


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_rss(fn: Callable[[], Any]) -> int:
    """Peak resident-set growth (bytes) of ``fn()``: Linux ``VmHWM`` after ``fn`` minus ``VmRSS``
    before, with the high-water mark reset (``/proc/self/clear_refs``) and free heap returned to
    the OS (``malloc_trim``) first. Counts everything the process touches (tensors, Python,
    libraries), so use it for whole training steps; for tensor code prefer :func:`peak_memory`."""
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError):  # non-glibc: no trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _rss_kib("VmRSS")
    fn()
    return (_rss_kib("VmHWM") - before) * 1024


def _fmt_threshold(max_ratio: float | None, min_ratio: float | None) -> str | None:
    if max_ratio is not None and min_ratio is not None:
        return f"{min_ratio:g}× ≤ ratio ≤ {max_ratio:g}×"
    if max_ratio is not None:
        return f"≤ {max_ratio:g}×"
    if min_ratio is not None:
        return f"≥ {min_ratio:g}×"
    return None


def row(
    metric: str,
    method: float,
    baseline: float,
    spread: str = "",
    max_ratio: float | None = None,
    min_ratio: float | None = None,
) -> dict[str, Any]:
    """A result row; ``ratio = method / baseline``, ``met`` from the bound(s) (None: no threshold)."""
    method, baseline = float(method), float(baseline)
    if baseline != baseline or method != method:
        raise ValueError(f"{metric}: NaN measurement (method={method}, baseline={baseline})")
    ratio = method / baseline if baseline != 0 else float("inf")
    met = None
    if max_ratio is not None or min_ratio is not None:
        met = (max_ratio is None or ratio <= max_ratio) and (
            min_ratio is None or ratio >= min_ratio
        )
    return {
        "metric": metric,
        "method": method,
        "baseline": baseline,
        "ratio": ratio,
        "spread": spread,
        "threshold": _fmt_threshold(max_ratio, min_ratio),
        "met": met,
    }


def spread_ratio(q1: float, q3: float) -> str:
    return f"ratio IQR [{q1:.3g}, {q3:.3g}]"
