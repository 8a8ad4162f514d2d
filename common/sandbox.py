"""Process-level limits for running model-generated code in a child process.

The pieces every method that executes generated programs needs (sacopt's solver programs,
agentxray's compiled projects): resource limits applied in the child before ``exec``, a scrubbed
environment (no API keys or proxy settings leak into the child), and a network namespace through
``unshare -rn`` where the kernel allows it. Each method keeps its own launcher (what it runs and
how it reads the result) and builds the child with these.
"""

from __future__ import annotations

import functools
import resource
import shutil
import subprocess
from collections.abc import Callable

__all__ = ["child_limits", "netns_available", "network_isolation_prefix", "scrubbed_env"]


def child_limits(mem_mb: int, cpu_s: int, fsize_mb: int = 64) -> Callable[[], None]:
    """A ``preexec_fn`` that caps the child's address space, CPU time and file size (no cores).

    Args:
        mem_mb: ``RLIMIT_AS`` in MiB.
        cpu_s: ``RLIMIT_CPU`` in seconds (SIGXCPU, then SIGKILL one second later).
        fsize_mb: ``RLIMIT_FSIZE`` in MiB, the largest file the child may write.
    """
    if mem_mb < 1 or cpu_s < 1 or fsize_mb < 0:
        raise ValueError(f"limits must be positive, got {mem_mb=}, {cpu_s=}, {fsize_mb=}")

    def apply() -> None:
        mem = mem_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        fs = fsize_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (fs, fs))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def scrubbed_env(workdir: str) -> dict[str, str]:
    """A minimal child environment: system PATH, home and temp in ``workdir``, one BLAS thread."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
    }


@functools.lru_cache(maxsize=1)
def netns_available() -> bool:
    """Whether ``unshare -rn`` (a user + network namespace without interfaces) works here."""
    exe = shutil.which("unshare")
    if not exe:
        return False
    try:
        r = subprocess.run([exe, "-rn", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


def network_isolation_prefix(isolate_network: bool | str = "auto") -> list[str]:
    """The command prefix that runs the child without network (``[]`` when not isolating).

    Args:
        isolate_network: ``True`` requires a network namespace, ``"auto"`` uses one when
            available, ``False`` never does.

    Raises:
        RuntimeError: if ``True`` and ``unshare -rn`` is not available.
    """
    use = netns_available() if isolate_network == "auto" else bool(isolate_network)
    if use and not netns_available():
        raise RuntimeError("isolate_network=True but `unshare -rn` is not available here")
    return [shutil.which("unshare") or "unshare", "-rn"] if use else []
