"""Two processes on accelerate (gloo, CPU) train exactly like one with the same global batch.

Runs ``tests/common/mp_worker.py`` once as a single process (per-device batch 4) and once under
``accelerate launch --config_file configs/accelerate/multi_cpu.yaml`` (2 processes × batch 2), two
SGD steps each, with deterministic rollouts. The parameters must agree to float round-off while the
update itself is large; for the RL trainers each group of N = 4 completions is split over the two
ranks, and both ranks must hold the same gathered rewards and the advantages of the whole group.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import torch

from common.registry import REPO_ROOT

pytestmark = pytest.mark.slow

WORKER = REPO_ROOT / "tests" / "common" / "mp_worker.py"
ACCELERATE = os.path.join(os.path.dirname(sys.executable), "accelerate")


def _free_port() -> int:
    """A port free right now (a fixed per-process port collided between consecutive launches)."""
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


def _pids(marker: str) -> list[tuple[int, list[bytes]]]:
    """Every process whose command line holds ``marker`` (the run's unique --out folder), with its
    arguments: the launcher's ranks run in sessions of their own, so a process-group kill misses
    them."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                args = fh.read().split(b"\0")
        except OSError:
            continue
        if marker.encode() in args:
            found.append((int(pid), args))
    return found


def _signal(marker: str, sig: int, ranks_only: bool = False) -> None:
    for pid, args in _pids(marker):
        if ranks_only and b"launch" in args:
            continue  # the launcher has no SIGUSR1 handler: the signal would end it
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _run(cmd: list[str], problems: list[str], attempts: int = 2, timeout: float = 120) -> None:
    """Runs ``cmd``; a launch that hangs or fails is recorded in ``problems`` and tried once more.

    A hang is killed whole (every process of the run, found by its unique --out folder) after each
    rank has printed its threads' Python stacks (``kill -USR1``: the worker registers faulthandler),
    so the report names where it stopped. The caller fails the test when ``problems`` is not empty:
    a retry keeps the rest of the test informative, but a stall is never passed over (issue 41; the
    stall seen before was a teardown deadlock in the worker, see ``mp_worker.teardown``). A second
    hang or failure fails at once. A healthy launch takes 5-40 s here, so 120 s bounds a hang's cost.
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    marker = cmd[cmd.index("--out") + 1]
    for attempt in range(1, attempts + 1):
        with tempfile.TemporaryFile("w+") as log:
            proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=log, text=True)
            try:
                proc.wait(timeout=timeout)
                hung = False
            except subprocess.TimeoutExpired:
                hung = True
                _signal(marker, signal.SIGUSR1, ranks_only=True)
                time.sleep(3)  # the stacks reach the log
            _signal(marker, signal.SIGKILL)  # no rank outlives its launcher
            proc.wait()
            if not hung and proc.returncode == 0:
                return
            log.seek(0)
            tail = log.read()[-6000:]
        what = (
            f"STALLED (killed after {timeout:.0f} s)" if hung else f"failed (rc {proc.returncode})"
        )
        problems.append(f"attempt {attempt}: {' '.join(cmd[-6:])} {what}; log tail:\n{tail}")
        if attempt == attempts:
            raise AssertionError("\n\n".join(problems))


@pytest.mark.parametrize("trainer", ["grpo", "maxrl", "sft", "apo", "georl", "kmkc", "pgrpo"])
def test_two_processes_match_one(trainer, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    problems: list[str] = []
    _run(
        [sys.executable, str(WORKER), "--trainer", trainer, "--per-device", "4", "--out", str(one)],
        problems,
    )
    _run(
        [ACCELERATE, "launch", "--config_file", str(REPO_ROOT / "configs/accelerate/multi_cpu.yaml"),
         "--main_process_port", str(_free_port()), str(WORKER), "--trainer", trainer,
         "--per-device", "2", "--out", str(two)],
        problems,
    )  # fmt: skip
    try:
        _compare(trainer, one, two)
    finally:
        # a retried launch fails the test even when the retry passed and the results agree
        assert not problems, "a launch needed a retry:\n\n" + "\n\n".join(problems)


def _compare(trainer: str, one, two) -> None:
    a, b = torch.load(one / "params.pt"), torch.load(two / "params.pt")

    init = torch.load(one / "init.pt")
    moved = max((a[k] - init[k]).abs().max().item() for k in a)
    gap = max((a[k] - b[k]).abs().max().item() for k in a)
    assert moved > 1e-2, "the two steps must move the parameters for the comparison to mean much"
    assert gap < 1e-6, f"1 vs 2 processes differ by {gap:.3g} (update size {moved:.3g})"
    if trainer == "sft":
        return
    r0, r1 = (json.loads((two / f"record{i}.json").read_text()) for i in (0, 1))
    assert r0["world"] == r1["world"] == 2
    assert r0["rewards"] == r1["rewards"]  # gathered: the whole group on both ranks
    rewards = torch.tensor(r0["rewards"])  # [B, N]
    assert rewards.shape[1] == 4 and bool((rewards.std(dim=1) > 0).all())
    if trainer in ("apo", "georl", "kmkc", "pgrpo"):
        # the one-process run holds every group whole: the split run must give its advantages
        expected = torch.tensor(json.loads((one / "record0.json").read_text())["advantages"])
        assert bool((expected != 0).any())
        band = json.loads((one / "record0.json").read_text())["band"]
        assert r0["band"] == r1["band"] and (band is None) == (trainer != "kmkc")
        if band is not None:  # kmkc: the band is a quantile of all ranks' H̄, as with one process
            torch.testing.assert_close(torch.tensor(r0["band"]), torch.tensor(band))
    elif trainer == "maxrl":
        from methods.maxrl import maxrl_advantages

        expected = maxrl_advantages(rewards)
    else:
        from common.rl import trl_group_advantages

        expected = trl_group_advantages(rewards)
    torch.testing.assert_close(torch.tensor(r0["advantages"]), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.tensor(r1["advantages"]), expected, atol=1e-5, rtol=1e-5)
