import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from common.registry import REPO_ROOT, compose, discover_methods, get_method, run_method


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scripts.run", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=300,
    )


def test_help_lists_registered_methods():
    out = _cli("--help")
    assert out.returncode == 0
    assert f"registered methods ({len(discover_methods())})" in out.stdout
    for slug in discover_methods():
        assert slug in out.stdout


def test_compose_defaults_and_overrides(tmp_path):
    cfg = compose(["seed=3", "model=tiny-llama"], run_dir=tmp_path)
    assert cfg.seed == 3 and cfg.model.name == "tiny-llama" and cfg.run_dir == str(tmp_path)
    assert OmegaConf.select(cfg, "method") is None


def test_unknown_method_lists_known():
    with pytest.raises(ValueError, match="registered methods"):
        get_method("no_such_method")
    with pytest.raises(ValueError, match="no method selected"):
        run_method(compose([]))


def test_unknown_method_on_the_command_line_fails_with_the_list():
    out = _cli("method=no_such_method")
    assert out.returncode != 0
    assert "Could not find 'method/no_such_method'" in out.stderr
    for slug in discover_methods()[:3]:
        assert slug in out.stderr  # Hydra lists the available options of the group
