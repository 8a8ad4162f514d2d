"""The built wheel works outside the checkout: CLI, a toy at demo size, the library import.

Builds the wheel, installs it with the pinned constraints into a fresh virtual environment whose
dependencies are hard-linked from the test environment (no download, and no editable install of
this checkout in it), then runs everything from a folder outside the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from common.registry import REPO_ROOT

pytestmark = pytest.mark.slow

_EDITABLE = ("__editable__", "icml26-", "icml26.")


def _sh(*cmd: str, cwd: Path, env: dict | None = None, timeout: int = 600):
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, (
        f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    )
    return out


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel")
    _sh(
        sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
        "-w", str(root / "dist"), str(REPO_ROOT), cwd=root,
    )  # fmt: skip
    (wheel,) = (root / "dist").glob("icml26-*.whl")
    env_dir = root / "env"
    _sh(sys.executable, "-m", "venv", "--without-pip", str(env_dir), cwd=root)
    py = env_dir / "bin" / "python"
    target = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    source = Path(sysconfig.get_paths()["purelib"])
    for item in source.iterdir():  # the pinned dependencies, without this checkout's install
        if item.name.startswith(_EDITABLE) or item.name in ("common", "methods"):
            continue
        dest = target / item.name
        if item.is_dir():
            shutil.copytree(item, dest, copy_function=os.link, symlinks=True)
        else:
            os.link(item, dest)
    _sh(
        sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-index",
        str(wheel), "-c", str(REPO_ROOT / "constraints.txt"), cwd=root,
    )  # fmt: skip
    outside = root / "outside"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", ICML26_PROGRESS="0", WANDB_MODE="disabled")
    return {"wheel": wheel, "env": env_dir, "outside": outside, "vars": env}


def test_wheel_ships_configs_and_only_two_top_level_packages(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"common", "methods"}
    assert "common/configs/config.yaml" in names
    assert "common/configs/experiment/maxrl_toy.yaml" in names


def test_installed_cli_help_and_library_import_outside_the_checkout(installed):
    env, cwd = installed["vars"], installed["outside"]
    bin_dir = installed["env"] / "bin"
    out = _sh(str(bin_dir / "icml26"), "--help", cwd=cwd, env=env)
    assert "registered methods (19)" in out.stdout and "maxrl" in out.stdout
    code = (
        "import torch, methods, json; from methods.maxrl import maxrl_advantages;"
        "a = maxrl_advantages(torch.tensor([[0., 0, 0, 0], [1, 0, 0, 1]]));"
        "print(json.dumps({'file': methods.__file__, 'adv': a[1].tolist()}))"
    )
    res = json.loads(_sh(str(bin_dir / "python"), "-c", code, cwd=cwd, env=env).stdout)
    assert str(installed["env"]) in res["file"] and str(REPO_ROOT) not in res["file"]
    assert res["adv"] == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-5)  # (1 - 1/2) / (1/2 + eps)


def test_installed_toy_runs_at_demo_size(installed):
    from methods.maxrl.run import DEMO_OVERRIDES

    env, cwd = installed["vars"], installed["outside"]
    run_dir = cwd / "run"
    _sh(
        str(installed["env"] / "bin" / "icml26"), "experiment=maxrl_toy", *DEMO_OVERRIDES,
        f"run_dir={run_dir}", cwd=cwd, env=env,
    )  # fmt: skip
    payload = json.loads((run_dir / "results.json").read_text())
    assert payload["method"] == "maxrl" and "maxrl" in payload["metrics"]
    assert not (cwd / "outputs").exists(), "with run_dir set, nothing else is written"
