"""scripts/reproduce/*.sh: valid bash, and each finds the checkout's venv without activation.

The scripts' stages run on GPUs and are not run here; what is tested is that every script parses,
sources ``_env.sh`` before its first command, and that ``_env.sh`` resolves ``icml26`` into
``<checkout>/.venv/bin`` with a PATH that lacks it (issue 41).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from common.registry import REPO_ROOT

SCRIPTS = sorted((REPO_ROOT / "scripts" / "reproduce").glob("[!_]*.sh"))
ENV_SH = REPO_ROOT / "scripts" / "reproduce" / "_env.sh"
SOURCE_LINE = 'source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"'
BASE_PATH = "/usr/bin:/bin"  # no venv on it


def _bash(code: str, path: str = BASE_PATH, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/bash", "-c", code],
        capture_output=True,
        text=True,
        env={"PATH": path, "HOME": os.environ.get("HOME", "/tmp"), **env},
        timeout=60,
    )


def test_there_is_a_script_per_method_with_a_paper_preset():
    assert len(SCRIPTS) >= 19 and ENV_SH.exists()


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_script_parses_and_sources_env_before_any_command(script):
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    lines = [ln.strip() for ln in script.read_text().splitlines()]
    at = lines.index("set -euo pipefail") + 1
    assert lines[at].startswith(SOURCE_LINE), f"{script.name}: line {at + 1} must source _env.sh"
    before = [ln for ln in lines[:at] if not ln.startswith("#")]
    assert not any(re.search(r"\b(icml26|accelerate|python|vllm|cd)\b", ln) for ln in before)


def _fake_checkout(tmp_path: Path, venv: str | None = ".venv") -> Path:
    """A checkout holding only ``scripts/reproduce/_env.sh`` and, optionally, a venv with a stub
    ``icml26``."""
    repo = tmp_path / "repo"
    (repo / "scripts" / "reproduce").mkdir(parents=True)
    shutil.copy(ENV_SH, repo / "scripts" / "reproduce" / "_env.sh")
    if venv:
        _stub(repo / venv / "bin" / "icml26")
    return repo


def _stub(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho stub\n")
    path.chmod(0o755)


def _resolve(repo: Path, **kw) -> subprocess.CompletedProcess:
    script = repo / "scripts" / "reproduce" / "_env.sh"
    return _bash(f'set -euo pipefail; source "{script}"; command -v icml26', **kw)


def test_env_puts_the_checkout_venv_first(tmp_path):
    repo = _fake_checkout(tmp_path)
    other = tmp_path / "elsewhere" / "bin"
    _stub(other / "icml26")  # an icml26 earlier on PATH loses to the checkout's venv
    out = _resolve(repo, path=f"{other}:{BASE_PATH}")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(repo / ".venv" / "bin" / "icml26")


def test_env_honours_venv_like_the_makefile(tmp_path):
    repo = _fake_checkout(tmp_path, venv="venvs/gpu")
    out = _resolve(repo, VENV="venvs/gpu")
    assert out.stdout.strip() == str(repo / "venvs" / "gpu" / "bin" / "icml26"), out.stderr


def test_env_without_a_venv_uses_icml26_on_path(tmp_path):
    repo = _fake_checkout(tmp_path, venv=None)
    other = tmp_path / "elsewhere" / "bin"
    _stub(other / "icml26")
    out = _resolve(repo, path=f"{other}:{BASE_PATH}")
    assert out.returncode == 0 and out.stdout.strip() == str(other / "icml26"), out.stderr


def test_env_without_any_icml26_names_make_install(tmp_path):
    repo = _fake_checkout(tmp_path, venv=None)
    out = _resolve(repo)
    assert out.returncode == 1 and out.stdout == ""
    assert "make install" in out.stderr and str(repo) in out.stderr


@pytest.mark.skipif(
    not (REPO_ROOT / ".venv" / "bin" / "icml26").exists(), reason="no .venv in this checkout"
)
def test_env_finds_this_checkouts_venv():
    out = _bash(f'set -euo pipefail; source "{ENV_SH}"; command -v icml26; command -v python')
    assert out.stdout.split() == [
        str(REPO_ROOT / ".venv" / "bin" / "icml26"),
        str(REPO_ROOT / ".venv" / "bin" / "python"),
    ], out.stderr
