import os
import re
import subprocess
import sys
import time
from pathlib import Path

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
    assert out.returncode == 2
    assert out.stderr.startswith("icml26: config error: ") and out.stderr.count("\n") == 1
    assert "Could not find 'method/no_such_method'" in out.stderr
    for slug in discover_methods()[:3]:
        assert slug in out.stderr  # Hydra lists the available options of the group


# ---- configs are checked at compose, for every method on the stage switch --------------------
def _leaf_fields(schema, prefix="method"):
    """(key, type) of every int/float/str leaf field of a run-config schema, nested included."""
    import dataclasses

    out = []
    for f in dataclasses.fields(schema):
        t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        if t in ("int", "float") and f.name != "seed":
            out.append((f"{prefix}.{f.name}", t))
        elif f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(
            f.default_factory()
        ):
            out += _leaf_fields(type(f.default_factory()), f"{prefix}.{f.name}")
    return out


def _toy_preset(slug: str) -> str:
    from common.config import method_schemas

    schema = method_schemas()[slug]
    for stage in schema.STAGES:
        if (REPO_ROOT / "configs" / "experiment" / f"{slug}_{stage}.yaml").exists():
            return f"{slug}_{stage}"
    return f"{slug}_toy"


def _schema_slugs():
    from common.config import method_schemas

    return sorted(method_schemas())


@pytest.mark.parametrize("slug", _schema_slugs())
def test_wrong_type_and_misspelt_key_are_rejected_at_compose(slug):
    from common.config import ConfigError, method_schemas

    schema = method_schemas()[slug]
    leaves = _leaf_fields(schema)
    assert leaves, f"{schema.__name__} has no numeric field to test"
    key, typ = leaves[0]
    preset = f"experiment={_toy_preset(slug)}"
    expected = "Integer" if typ == "int" else "Float"
    with pytest.raises(ConfigError, match=rf"{re.escape(key)}.*{expected}|{expected}.*{key}"):
        compose([preset, f"{key}=abc"])
    with pytest.raises(ConfigError, match=f"{key.rsplit('.', 1)[-1]}x"):
        compose([preset, f"{key}x=1"])


def test_seed_and_logger_are_typed():
    from common.config import ConfigError

    with pytest.raises(ConfigError, match="seed"):
        compose(["experiment=maxrl_toy", "seed=abc"])
    with pytest.raises(ConfigError, match="logger"):
        compose(["experiment=maxrl_toy", "logger=wandbb"])


def _documented_commands() -> list[str]:
    """``icml26 ...`` lines of the README's code blocks and of ``icml26 --help``'s examples."""
    from common.cli import EXAMPLES

    lines = [cmd for cmd, _ in EXAMPLES]
    readme = (REPO_ROOT / "README.md").read_text()
    for block in re.findall(r"```bash\n(.*?)```", readme, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip()
            if "icml26 " in line or "-m common.cli" in line:
                lines.append(line)
    return lines


@pytest.mark.parametrize("command", _documented_commands())
def test_documented_commands_compose(command):
    """Each documented command composes and validates (the bare paper preset names its stages)."""
    from common.config import ConfigError

    args = [a for a in command.split() if "=" in a and not a.startswith("--")]
    if not args or "--hydra-help" in command or "--help" in command:
        return
    if "--cfg" in command:
        out = _cli(*command.split()[1:])
        assert out.returncode == 0 and "name:" in out.stdout
        return
    if any(a.startswith("experiment=") and a.endswith("_paper") for a in args) and not any(
        a.startswith("method.stage=") for a in args
    ):
        with pytest.raises(ConfigError, match="choose one with method.stage"):
            compose(args)
        return
    compose(args)


def test_appended_unknown_keys_are_rejected_too():
    """``+method.bogus=1`` appends a key Hydra would accept; validation names it."""
    from common.config import ConfigError

    with pytest.raises(ConfigError, match=r"method.bogus: not a field of MaxRLRunConfig"):
        compose(["experiment=maxrl_toy", "+method.bogus=1"])
    with pytest.raises(ConfigError, match=r"method.t1.stepz: not a field of .*did you mean steps"):
        compose(["experiment=maxrl_toy", "+method.t1.stepz=1"])


def test_kore_toy_int_fields_reject_words_and_fractions():
    from common.config import ConfigError

    with pytest.raises(ConfigError, match=r"method\.toy\.n_old.*Integer|Integer.*n_old"):
        compose(["experiment=kore_toy", "method.toy.n_old=ten"])
    with pytest.raises(ConfigError, match=r"method\.toy\.lora_rank.*Integer|Integer.*lora_rank"):
        compose(["experiment=kore_toy", "method.toy.lora_rank=4.5"])


def test_offline_hub_ids_say_how_to_provide_the_weights(tmp_path):
    """Every direct ``from_pretrained`` goes through ``weights_hint``: the load_model message."""
    from common.models import ModelNotAvailableError, weights_hint
    from methods.sv_features.paper import load_causal_lm

    with pytest.raises(ModelNotAvailableError, match="Provide the weights"):
        load_causal_lm("no-such-org/no-such-model")
    with (
        pytest.raises(ModelNotAvailableError, match="no-such-org/clip"),
        weights_hint("no-such-org/clip"),
    ):
        raise OSError("not in the cache")
    with pytest.raises(OSError, match="broken") as info, weights_hint(tmp_path):
        raise OSError("broken checkpoint")  # a local folder: its own error passes through
    assert not isinstance(info.value, ModelNotAvailableError)


def _untracked_and_ignored() -> set[str]:
    out = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {
        line[3:]
        for line in out.splitlines()
        if line[:2] in ("??", "!!") and ".venv/" not in line and "__pycache__" not in line
    }


def test_run_method_without_run_dir_writes_outside_the_checkout(tmp_path, monkeypatch):
    """No run folder: the default is under $ICML26_OUTPUT_DIR / the temp dir, never cwd or the repo."""
    from common.registry import default_output_root, run_method
    from methods.agentxray.run import DEMO_OVERRIDES

    monkeypatch.delenv("ICML26_OUTPUT_DIR", raising=False)
    assert REPO_ROOT not in default_output_root().resolve().parents
    monkeypatch.setenv("ICML26_OUTPUT_DIR", str(tmp_path / "out"))
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    before = _untracked_and_ignored()
    cfg = compose(["experiment=agentxray_toy", *DEMO_OVERRIDES])
    assert cfg.run_dir is None
    run_method(cfg)
    assert Path(cfg.run_dir).is_relative_to(tmp_path / "out") and any(Path(cfg.run_dir).iterdir())
    assert not any(work.iterdir()), "the run wrote into the current folder"
    assert _untracked_and_ignored() <= before, "the run wrote into the checkout"


@pytest.mark.slow
def test_cli_run_dir_is_the_only_folder_written(tmp_path):
    """``run_dir=`` set: results land there, and no ``./outputs`` (Hydra's default) appears in cwd."""
    work, run = tmp_path / "cwd", tmp_path / "run"
    work.mkdir()
    cmd = [sys.executable, "-m", "scripts.run", "experiment=llminertia_toy", "method.stage=sim"]
    cmd += ["method.ratios=[0.0,1.0]", "method.n_test_templates=2", f"run_dir={run}"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (run / "results.json").exists()
    assert not any(work.iterdir()), sorted(p.name for p in work.iterdir())


# ---- config errors stop the CLI before Hydra prints or makes a run folder (issue 41) ----------
def _cli_in(cwd: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    """``icml26 args`` from ``cwd`` (not the checkout), with its duration in seconds."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", **env}
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "scripts.run", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env=env,
    )
    return out, time.monotonic() - start


def _one_config_error(out: subprocess.CompletedProcess) -> str:
    """The one stderr line of a config error (exit status 2, no traceback), without its prefix."""
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1, out.stderr[-2000:]
    assert out.stderr.startswith("icml26: config error: ")
    return out.stderr.removeprefix("icml26: config error: ")


@pytest.mark.parametrize("cfg", ["job", "all"])
@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("+method.bogus=1", "method.bogus: not a field of MaxRLRunConfig (valid keys: name, stage"),
        ("+method.t1.bogus=1", "method.t1.bogus: not a field of ClassificationToyConfig (valid"),
        ("++method.t1.stepz=1", "method.t1.stepz: not a field of ClassificationToyConfig (did you"),
    ],
)
def test_cfg_rejects_an_appended_unknown_key_before_printing(tmp_path, cfg, override, message):
    """``--cfg`` prints the config without running the task: the key check comes before it.

    Fast: only the schemas load (the full run imported torch and TRL first, ~55 s here)."""
    out, seconds = _cli_in(tmp_path, "--cfg", cfg, "experiment=maxrl_toy", override)
    assert _one_config_error(out).startswith(message)
    assert out.stdout == "" and seconds < 30
    assert not any(tmp_path.iterdir())


def test_cfg_prints_a_valid_override(tmp_path):
    out, _ = _cli_in(tmp_path, "--cfg", "job", "experiment=maxrl_toy", "method.t1.steps=5")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "bogus" not in out.stdout and "    steps: 5\n" in out.stdout


def test_the_key_check_imports_nothing_heavy(tmp_path):
    """``--cfg`` checks keys from the schemas alone: no torch, transformers or TRL import."""
    code = (
        "import sys\n"
        "sys.argv = ['icml26', '--cfg', 'job', 'experiment=maxrl_toy', '+method.bogus=1']\n"
        "from common.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exit:\n"
        "    print(exit.code, sorted({'torch', 'transformers', 'trl'} & set(sys.modules)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert out.stdout.strip() == "2 []", out.stderr[-2000:]


@pytest.mark.parametrize(
    ("override", "where", "message"),
    [
        ("+method.bogus=1", "run_dir", "method.bogus: not a field of MaxRLRunConfig"),
        ("method.stage=bogus", "hydra.run.dir", "method.stage='bogus' is not a stage of maxrl"),
        ("seed=abc", "default", "Value 'abc' of type 'str' could not be converted to Integer"),
        ("method.t1.bogus=1", "default", "method.t1.bogus: not a field of Classification"),
    ],
)
def test_a_config_error_leaves_no_run_folder(tmp_path, override, where, message):
    """Checked before Hydra creates the run folder (and its cli.log): nothing is written, not
    at ``run_dir=``, ``hydra.run.dir=``, Hydra's default ``./outputs`` nor $ICML26_OUTPUT_DIR."""
    work, run = tmp_path / "cwd", tmp_path / "run"
    work.mkdir()
    args = ["experiment=maxrl_toy", override]
    if where != "default":
        args.append(f"{where}={run}")
    out, _ = _cli_in(work, *args, ICML26_OUTPUT_DIR=str(tmp_path / "out"))
    assert message in _one_config_error(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cwd"] and not any(work.iterdir())


def test_multirun_checks_keys_before_the_sweep_folder(tmp_path):
    out, _ = _cli_in(tmp_path, "-m", "experiment=maxrl_toy", "seed=1,2", "+method.bogus=1")
    assert "method.bogus: not a field of MaxRLRunConfig" in _one_config_error(out)
    assert not any(tmp_path.iterdir())


@pytest.mark.slow  # a full CLI subprocess up to the stage (about 5 s): make test-all
def test_a_stage_config_error_is_written_into_its_run_folder(tmp_path):
    """A ConfigError the stage raises (here sacopt's missing data) comes after Hydra made the
    folder: the folder then holds the message in ``error.txt`` beside Hydra's files."""
    run = tmp_path / "run"
    (run).mkdir()
    (run / "error.txt").write_text("an earlier run's error")
    env = {k: v for k, v in os.environ.items() if k != "SACOPT_DATA"}
    out = subprocess.run(
        [sys.executable, "-m", "scripts.run", "experiment=sacopt_paper", f"run_dir={run}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**env, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"},
    )
    message = _one_config_error(out)
    assert "SACOPT_DATA" in message and "benchmark.sets.NL4Opt.path" in message
    assert (run / "error.txt").read_text() == out.stderr
    assert sorted(p.name for p in run.iterdir()) == [".hydra", "cli.log", "error.txt"]
