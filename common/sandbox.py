"""The one sandbox for model-generated code: bubblewrap namespaces, resource limits, a hard kill.

Every place that runs code a model wrote (sacopt's solver programs, agentxray's compiled projects)
goes through :func:`run_isolated`. The child runs under bubblewrap (``bwrap``, Debian package
``bubblewrap``) with:

* new user, PID, network, IPC, UTS and cgroup namespaces (``--unshare-all``): no network at all
  (no TCP to host listeners, no abstract Unix sockets), no view of the host's processes (a fresh
  ``/proc``), no signals to the parent;
* the root filesystem read-only, ``/etc`` reduced to what the dynamic linker needs, ``/root``,
  ``/home``, ``/run``, ``/var``, ``/tmp`` and ``/dev/shm`` hidden behind empty read-only mounts (the
  Python installation that runs the code is bound back read-only), and only the work folder
  writable (``$HOME`` and ``$TMPDIR`` inside the sandbox point at it);
* an empty environment (only ``PATH``, ``HOME``, ``TMPDIR``, ``LANG`` and one-thread BLAS settings);
* every capability dropped, a new session (no terminal injection) and ``--die-with-parent``;
* address-space, CPU-time, file-size and core limits (``setrlimit``) inherited by every process;
* at the timeout the sandbox's PID 1 is killed, and with it every process of the run, including
  those that forked into new sessions or double-forked.

Where bubblewrap cannot run (not installed, or user namespaces disabled) :func:`run_isolated`
refuses with :class:`SandboxUnavailableError` and says how to fix it, unless the caller names the
unsafe mode explicitly (``isolation="unsafe-no-sandbox"``: limits and a scrubbed environment only).
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "UNSAFE",
    "SandboxResult",
    "SandboxUnavailableError",
    "child_limits",
    "run_isolated",
    "sandbox_available",
    "sandbox_unavailable_reason",
    "scrubbed_env",
]

UNSAFE = "unsafe-no-sandbox"
"""The explicitly named mode that runs code without namespaces (limits and clean env only)."""

Isolation = Literal["bwrap", "unsafe-no-sandbox"]

# Host paths hidden inside the sandbox (empty tmpfs mounts over them).
_HIDDEN = ("/root", "/home", "/run", "/var", "/tmp", "/dev/shm", "/mnt", "/media", "/srv", "/opt")
# What /etc keeps (the dynamic linker's cache and config, time zone): nothing with secrets.
_ETC_KEEP = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives")


class SandboxUnavailableError(RuntimeError):
    """No isolation is available here, and the caller did not ask for the unsafe mode."""


@dataclass
class SandboxResult:
    """What a sandboxed run produced.

    Attributes:
        returncode: the child's exit status (negative: killed by that signal; None if unknown).
        stdout: captured standard output (at most ``max_output`` characters, the tail).
        stderr: captured standard error (likewise).
        timed_out: the run hit ``timeout_s`` and every process of it was killed.
        wall_s: wall-clock seconds from start to the end of the last process.
        isolation: ``"bwrap"`` or the unsafe mode's name.
    """

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    isolation: str


def child_limits(mem_mb: int, cpu_s: int, fsize_mb: int = 64) -> Callable[[], None]:
    """A ``preexec_fn`` that caps address space, CPU time and file size (no core files).

    The limits are inherited by every process the child starts.

    Args:
        mem_mb: ``RLIMIT_AS`` in MiB.
        cpu_s: ``RLIMIT_CPU`` in seconds (SIGXCPU, then SIGKILL one second later).
        fsize_mb: ``RLIMIT_FSIZE`` in MiB, the largest file the child may write.

    Raises:
        ValueError: on a non-positive limit.
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
    """The child's whole environment: system PATH, home and temp in ``workdir``, one BLAS thread."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _python_roots() -> list[str]:
    """Folders the sandboxed interpreter needs: the venv, the base install, their real paths."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)}
    roots |= {os.path.realpath(r) for r in list(roots)}
    roots.add(os.path.dirname(os.path.realpath(sys.executable)))
    return sorted(r for r in roots if r and os.path.isdir(r))


def _bwrap_argv(workdir: str) -> list[str]:
    exe = shutil.which("bwrap")
    if exe is None:
        raise SandboxUnavailableError("bwrap not found")
    argv = [exe, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    argv += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    for path in _HIDDEN:
        if os.path.isdir(path) and not os.path.islink(path):
            argv += ["--tmpfs", path]
    argv += ["--tmpfs", "/etc"]
    for name in _ETC_KEEP:
        src = os.path.join("/etc", name)
        if os.path.exists(src):
            argv += ["--ro-bind", src, src]
    for root in _python_roots():  # bound back after the hiding mounts
        argv += ["--ro-bind", root, root]
    argv += ["--bind", workdir, workdir, "--chdir", workdir]
    for path in (*_HIDDEN, "/etc"):  # the empty mounts become read-only: only workdir is writable
        if os.path.isdir(path) and not os.path.islink(path):
            argv += ["--remount-ro", path]
    argv += ["--clearenv"]
    for key, value in scrubbed_env(workdir).items():
        argv += ["--setenv", key, value]
    return [*argv, "--"]


@functools.lru_cache(maxsize=1)
def _probe() -> str | None:
    """None when bubblewrap runs a trivial command here, else the reason it does not."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (`bwrap`) is not installed; install it with `apt-get install bubblewrap`"
    probe_dir = Path(os.environ.get("TMPDIR", "/tmp")).resolve()
    try:
        argv = _bwrap_argv(str(probe_dir))
        r = subprocess.run([*argv, "/bin/true"], capture_output=True, timeout=20, text=True)
    except (OSError, subprocess.SubprocessError, SandboxUnavailableError) as err:
        return f"bwrap could not start: {err}"
    if r.returncode != 0:
        return f"bwrap could not create its namespaces here: {r.stderr.strip()[:300]}"
    return None


def sandbox_available() -> bool:
    """Whether :func:`run_isolated` can isolate here (bubblewrap installed and working)."""
    return _probe() is None


def sandbox_unavailable_reason() -> str | None:
    """None when :func:`run_isolated` can isolate here, else why not and how to fix it."""
    return _probe()


def _kill_tree(proc: subprocess.Popen) -> None:
    # bwrap is the session leader of its own session; killing its group kills the outer bwrap,
    # whose death (--die-with-parent) kills the sandbox's PID 1 and so the whole PID namespace.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def _checked_workdir(
    argv: Sequence[str], workdir: str | Path, timeout_s: float, isolation: str
) -> Path:
    """Validates :func:`run_isolated`'s arguments; returns the resolved ``workdir``."""
    if not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError(f"argv must be a non-empty list of strings, got {argv!r}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
    if isolation not in ("bwrap", UNSAFE):
        raise ValueError(f"isolation must be 'bwrap' or {UNSAFE!r}, got {isolation!r}")
    work = Path(workdir).resolve()
    if not work.is_dir():
        raise ValueError(f"workdir must be an existing folder, got {str(workdir)!r}")
    return work


def _isolated_command(argv: Sequence[str], work: Path, isolation: str) -> list[str]:
    """``argv`` wrapped in bubblewrap (refusing when it cannot run), or bare for :data:`UNSAFE`."""
    if isolation != "bwrap":
        return list(argv)
    reason = _probe()
    if reason is not None:
        raise SandboxUnavailableError(
            f"cannot isolate model-generated code: {reason}. Pass isolation={UNSAFE!r} to run "
            "it without namespaces (limits and a clean environment only) at your own risk."
        )
    return [*_bwrap_argv(str(work)), *argv]


def _communicate(
    proc: subprocess.Popen, stdin: str | None, timeout_s: float
) -> tuple[str, str, bool]:
    """``(stdout, stderr, timed_out)``; on expiry every process of the run is killed."""
    try:
        out, err = proc.communicate(input=stdin, timeout=timeout_s)
        return out, err, False
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
    try:  # the namespace is gone: its pipes close; bounded wait all the same
        out, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        for stream in (proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                stream.close()
        proc.wait(timeout=10)
        out, err = "", ""
    return out, err, True


def run_isolated(
    argv: Sequence[str],
    workdir: str | Path,
    *,
    timeout_s: float,
    mem_mb: int = 1024,
    cpu_s: int | None = None,
    fsize_mb: int = 64,
    stdin: str | None = None,
    isolation: Isolation = "bwrap",
    max_output: int = 20_000,
) -> SandboxResult:
    """Runs ``argv`` (model-generated code) in the sandbox, inside ``workdir``.

    Args:
        argv: the command; ``sys.executable`` and system binaries are visible inside.
        workdir: an existing folder, the only writable place (``$HOME`` and ``$TMPDIR`` too).
        timeout_s: wall-clock limit; on expiry every process of the run is killed.
        mem_mb: address-space limit per process, in MiB.
        cpu_s: CPU-time limit per process (default: ``timeout_s`` + 2).
        fsize_mb: the largest file a process may write, in MiB.
        stdin: text fed to the child's standard input (default: none, ``/dev/null``).
        isolation: ``"bwrap"`` (refuses when unavailable) or :data:`UNSAFE`, which runs without
            namespaces (limits, clean environment, process-group kill only) and must be asked
            for by name.
        max_output: characters kept from the end of stdout and of stderr.

    Returns:
        A :class:`SandboxResult`; never raises for anything the child does.

    Raises:
        SandboxUnavailableError: ``isolation="bwrap"`` and bubblewrap cannot run here.
        ValueError: on a bad limit, an empty ``argv``, a missing ``workdir`` or an unknown mode.
    """
    work = _checked_workdir(argv, workdir, timeout_s, isolation)
    limits = child_limits(mem_mb, int(cpu_s or timeout_s + 2), fsize_mb)
    cmd = _isolated_command(argv, work, isolation)
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=str(work),
        env=scrubbed_env(str(work)),
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=limits,
    )
    out, err, timed_out = _communicate(proc, stdin, timeout_s)
    if isolation == UNSAFE:
        _kill_tree(proc)  # no PID namespace: take down whatever the child left in its group
    return SandboxResult(
        returncode=proc.returncode,
        stdout=(out or "")[-max_output:],
        stderr=(err or "")[-max_output:],
        timed_out=timed_out,
        wall_s=time.monotonic() - start,
        isolation=isolation,
    )
