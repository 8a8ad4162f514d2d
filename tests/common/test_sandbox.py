"""Attacks on the sandbox for model-generated code (common/sandbox.py) and on both entry points.

Each attack is a small program of the kind a model could write. It runs through
:func:`common.sandbox.run_isolated` directly, through sacopt's ``run_sandboxed`` and through
agentxray's ``compiler_tool``; afterwards the host is checked: nothing written outside the work
folder, no secret in what came back, no listener reached, the parent alive, and no process of the
attack left. Without bubblewrap the isolated tests skip with the reason (``make test`` installs it
where it can); the refusal itself is tested with bwrap hidden from PATH.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from common import sandbox
from common.sandbox import (
    UNSAFE,
    SandboxUnavailableError,
    child_limits,
    run_isolated,
    sandbox_available,
    scrubbed_env,
)

REASON = sandbox._probe()
needs_bwrap = pytest.mark.skipif(
    REASON is not None, reason=f"no isolation here: {REASON}; CI installs bubblewrap"
)


def _alive_with(marker: str) -> list[int]:
    """Host PIDs whose command line contains ``marker``."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmd and int(entry) != os.getpid():
                pids.append(int(entry))
    return pids


def _wait_gone(marker: str, seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = _alive_with(marker)
        if not left:
            return []
        time.sleep(0.1)
    return _alive_with(marker)


# ----- the three entry points --------------------------------------------------------------------
def _direct(code: str, tmp_path: Path, timeout_s: float) -> str:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "main.py").write_text(code)
    r = run_isolated([sys.executable, "main.py"], work, timeout_s=timeout_s, mem_mb=512)
    return r.stdout + r.stderr


def _sacopt(code: str, tmp_path: Path, timeout_s: float) -> str:
    from methods.sacopt.backend import run_sandboxed

    r = run_sandboxed(code, timeout_s=timeout_s, mem_mb=512, workdir=tmp_path)
    return r.stdout + r.stderr


def _agentxray(code: str, tmp_path: Path, timeout_s: float) -> str:
    from methods.agentxray.executor import compiler_tool

    return compiler_tool(timeout=timeout_s, mem_mb=512)(f"```python\n{code}\n```") or ""


ENTRY_POINTS = {"run_isolated": _direct, "sacopt": _sacopt, "agentxray": _agentxray}


def _attack(body: str) -> str:
    """Wraps an attack so that whatever it manages to read is printed to stderr (which both
    entry points hand back) and the program exits non-zero."""
    return textwrap.dedent(
        """
        import os, sys
        found = []
        def leak(x):
            found.append(str(x))
        try:
        {body}
        except BaseException as err:  # noqa
            found.append("blocked: " + type(err).__name__)
        sys.stderr.write("\\n".join(found)[-2000:] + "\\n")
        sys.exit(1)
        """
    ).format(body=textwrap.indent(textwrap.dedent(body), "    "))


@needs_bwrap
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_secrets_etc_home_and_parent_environ_are_not_visible(entry, tmp_path, monkeypatch):
    secret = "sk-test-" + uuid.uuid4().hex
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    home_secret = Path.home() / f".icml26_secret_{uuid.uuid4().hex}"
    home_secret.write_text(secret)
    try:
        code = _attack(
            f"""
            leak(os.environ.get("OPENAI_API_KEY"))
            for path in ["/etc/hostname", "/etc/passwd", "/etc/shadow", {str(home_secret)!r},
                         "/proc/1/environ", "/proc/{os.getpid()}/environ"]:
                try:
                    leak(open(path).read())
                except OSError as e:
                    leak("no " + path)
            leak(os.listdir("/proc"))
            """
        )
        report = ENTRY_POINTS[entry](code, tmp_path, timeout_s=30)
    finally:
        home_secret.unlink()
    assert secret not in report
    assert "root:" not in report  # /etc/passwd and /etc/shadow
    assert f"no {home_secret}" in report or entry == "agentxray"  # agentxray keeps 5 lines


@needs_bwrap
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_writes_outside_the_work_folder_fail_by_every_route(entry, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    targets = {r: outside / f"{r}.txt" for r in ("open", "sqlite", "ctypes", "os_open", "rename")}
    code = _attack(
        f"""
        import ctypes, sqlite3
        for fn in [
            lambda: open({str(targets["open"])!r}, "w").write("x"),
            lambda: sqlite3.connect({str(targets["sqlite"])!r}).execute("create table t(a)"),
            lambda: ctypes.CDLL(None).creat({str(targets["ctypes"]).encode()!r}, 0o644) >= 0
                    and leak("ctypes-created"),
            lambda: os.close(os.open({str(targets["os_open"])!r}, os.O_CREAT | os.O_WRONLY)),
            lambda: (open("mine", "w").write("x"), os.rename("mine", {str(targets["rename"])!r})),
            lambda: open("/tmp/escape.txt", "w").write("x"),
        ]:
            try:
                fn()
            except Exception as e:
                leak("blocked " + type(e).__name__)
        """
    )
    ENTRY_POINTS[entry](code, tmp_path, timeout_s=30)
    for route, path in targets.items():
        assert not path.exists(), f"{route}: wrote {path}"
    assert not Path("/tmp/escape.txt").exists()


@needs_bwrap
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_network_unix_sockets_and_parent_signals_are_blocked(entry, tmp_path):
    hits: list[str] = []
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(4)
    tcp.settimeout(0.2)
    unix_path = str(tmp_path / "host.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(unix_path)
    unix.listen(4)
    unix.settimeout(0.2)
    abstract_name = "\0icml26-" + uuid.uuid4().hex
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(abstract_name)
    abstract.listen(4)
    abstract.settimeout(0.2)
    stop = threading.Event()

    def accept_loop():
        while not stop.is_set():
            for name, s in (("tcp", tcp), ("unix", unix), ("abstract", abstract)):
                try:
                    conn, _ = s.accept()
                    hits.append(name)
                    conn.close()
                except OSError:
                    pass

    thread = threading.Thread(target=accept_loop, daemon=True)
    thread.start()
    got_signal: list[int] = []
    old = signal.signal(signal.SIGUSR1, lambda *a: got_signal.append(1))
    try:
        code = _attack(
            f"""
            import socket, signal
            for fam, addr in [(socket.AF_INET, ("127.0.0.1", {tcp.getsockname()[1]})),
                              (socket.AF_UNIX, {unix_path!r}), (socket.AF_UNIX, {abstract_name!r})]:
                try:
                    s = socket.socket(fam); s.settimeout(2); s.connect(addr); leak("connected")
                except Exception as e:
                    leak("blocked " + type(e).__name__)
            for pid in (os.getppid(), {os.getpid()}):
                try:
                    os.kill(pid, signal.SIGUSR1)
                except Exception as e:
                    leak("blocked " + type(e).__name__)
            """
        )
        ENTRY_POINTS[entry](code, tmp_path, timeout_s=30)
        time.sleep(0.5)
    finally:
        stop.set()
        thread.join(2)
        signal.signal(signal.SIGUSR1, old)
        for s in (tcp, unix, abstract):
            s.close()
    assert hits == [] and got_signal == []


@needs_bwrap
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_escaping_processes_die_at_the_timeout(entry, tmp_path):
    """50 children through fork_exec and ctypes in new sessions, then an endless parent."""
    marker = "icml26attack" + uuid.uuid4().hex[:8]
    code = textwrap.dedent(
        f"""
        import ctypes, os, sys, time
        argv = [sys.executable.encode(), b"-c", b"import time; time.sleep(1000)", b"{marker}"]
        try:
            import _posixsubprocess
            for _ in range(25):
                r, w = os.pipe()  # call_setsid=True: each child in a session of its own
                _posixsubprocess.fork_exec(argv, [argv[0]], True, (), None, None, -1, -1, -1, -1,
                                           -1, -1, r, w, False, True, -1, None, None, None,
                                           -1, None, False)
        except Exception as e:
            print("fork_exec", type(e).__name__, e, file=sys.stderr)
        libc = ctypes.CDLL(None)
        for _ in range(25):
            try:
                pid = libc.fork()
            except Exception:
                break
            if pid == 0:
                libc.setsid()
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(1000)",
                                          "{marker}"])
        while True:
            time.sleep(0.1)
        """
    )
    start = time.monotonic()
    ENTRY_POINTS[entry](code, tmp_path, timeout_s=3)
    elapsed = time.monotonic() - start
    assert elapsed < 15, f"the run took {elapsed:.1f} s for a 3 s timeout"
    assert _wait_gone(marker) == []


@needs_bwrap
def test_limits_hold_inside_the_sandbox(tmp_path):
    bomb = run_isolated(
        [sys.executable, "-c", "x = bytearray(2 * 1024**3)"], tmp_path, timeout_s=30, mem_mb=256
    )
    assert bomb.returncode != 0 and "MemoryError" in bomb.stderr
    big = run_isolated(
        [sys.executable, "-c", "open('f', 'wb').write(b'0' * 3 * 1024**2)"],
        tmp_path,
        timeout_s=30,
        fsize_mb=1,
    )
    assert big.returncode != 0 and (tmp_path / "f").stat().st_size <= 1024**2
    slow = run_isolated([sys.executable, "-c", "while True: pass"], tmp_path, timeout_s=1.5)
    assert slow.timed_out and slow.wall_s < 10
    ok = run_isolated(
        [sys.executable, "-c", "import numpy, sys; print(sys.stdin.read()[::-1])"],
        tmp_path,
        timeout_s=30,
        stdin="abc",
    )
    assert ok.returncode == 0 and ok.stdout.strip() == "cba"  # stdin in, stdout out, numpy there


def test_refuses_without_isolation_unless_unsafe_is_named(tmp_path, monkeypatch):
    sandbox._probe.cache_clear()
    with monkeypatch.context() as mp:
        mp.setattr(sandbox.shutil, "which", lambda name: None)
        with pytest.raises(SandboxUnavailableError, match=f"apt-get install bubblewrap.*{UNSAFE}"):
            run_isolated([sys.executable, "-c", "print(1)"], tmp_path, timeout_s=10)
        r = run_isolated(
            [sys.executable, "-c", "print(1)"], tmp_path, timeout_s=10, isolation=UNSAFE
        )
        assert r.returncode == 0 and r.stdout.strip() == "1" and r.isolation == UNSAFE
        sandbox._probe.cache_clear()
    assert sandbox_available() == (REASON is None)


def test_bad_arguments_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="argv"):
        run_isolated([], tmp_path, timeout_s=1)
    with pytest.raises(ValueError, match="timeout_s"):
        run_isolated(["true"], tmp_path, timeout_s=0)
    with pytest.raises(ValueError, match="workdir"):
        run_isolated(["true"], tmp_path / "missing", timeout_s=1)
    with pytest.raises(ValueError, match="isolation"):
        run_isolated(["true"], tmp_path, timeout_s=1, isolation="none")
    with pytest.raises(ValueError, match="limits must be positive"):
        child_limits(mem_mb=0, cpu_s=1)


def test_scrubbed_env_has_no_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    env = scrubbed_env(str(tmp_path))
    assert "OPENAI_API_KEY" not in env and env["HOME"] == str(tmp_path)


def test_ci_runs_the_sandbox_tests():
    """CI (CI=true) must not skip the attack suite: `make test` installs bubblewrap as root."""
    if os.environ.get("CI", "").lower() in ("1", "true") and REASON is not None:
        pytest.fail(f"CI has no isolation, so the sandbox attacks would be skipped: {REASON}")
