"""Tests for common/sandbox.py: child limits, scrubbed environment, network isolation prefix."""

from __future__ import annotations

import subprocess
import sys

import pytest

from common.sandbox import child_limits, netns_available, network_isolation_prefix, scrubbed_env


def _run(code: str, tmp_path, **limits) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=scrubbed_env(str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=child_limits(**limits),
    )


def test_memory_and_file_size_limits_hold(tmp_path):
    bomb = _run("x = bytearray(2 * 1024**3)", tmp_path, mem_mb=256, cpu_s=20)
    assert bomb.returncode != 0 and "MemoryError" in bomb.stderr
    big = _run(
        "open('f', 'wb').write(b'0' * 3 * 1024**2)", tmp_path, mem_mb=512, cpu_s=20, fsize_mb=1
    )
    assert big.returncode != 0
    assert (tmp_path / "f").stat().st_size <= 1024**2


def test_scrubbed_env_has_no_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    env = scrubbed_env(str(tmp_path))
    assert "OPENAI_API_KEY" not in env and env["HOME"] == str(tmp_path)


def test_network_prefix_and_bad_limits():
    assert network_isolation_prefix(False) == []
    if netns_available():
        assert network_isolation_prefix("auto")[-1] == "-rn"
    else:
        assert network_isolation_prefix("auto") == []
        with pytest.raises(RuntimeError, match="unshare"):
            network_isolation_prefix(True)
    with pytest.raises(ValueError, match="limits"):
        child_limits(0, 1)
