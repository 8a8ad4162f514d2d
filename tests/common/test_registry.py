"""Tests for common/registry.py: ``run_method`` seeds python, numpy and torch once from ``cfg.seed``;
``compose`` rejects unknown keys however they are added."""

from __future__ import annotations

import random
import types

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from common import registry
from common.config import ConfigError


def _draws() -> dict[str, float]:
    return {
        "python": random.random(),
        "numpy": float(np.random.rand()),
        "torch": float(torch.rand(())),
    }


def _run(monkeypatch, tmp_path, seed: int) -> dict[str, float]:
    fake = types.SimpleNamespace(run=lambda cfg: _draws())  # a method off the stage switch
    monkeypatch.setattr(registry, "method_schemas", dict)
    monkeypatch.setattr(registry, "get_method", lambda name: fake)
    cfg = OmegaConf.create({"method": {"name": "fake"}, "seed": seed, "run_dir": str(tmp_path)})
    return registry.run_method(cfg)


def test_run_method_seeds_every_generator_from_cfg_seed(monkeypatch, tmp_path):
    random.seed(123)  # whatever state the process is in before the run
    np.random.seed(456)
    torch.manual_seed(789)
    first = _run(monkeypatch, tmp_path, seed=7)
    again = _run(monkeypatch, tmp_path, seed=7)
    other = _run(monkeypatch, tmp_path, seed=8)
    random.seed(7)
    np.random.seed(7)
    torch.manual_seed(7)
    assert first == again == _draws()  # what seeding each library with 7 yields
    assert all(other[k] != first[k] for k in first)


# ---- compose rejects unknown keys however they are added (issue 41) ---------------------------
@pytest.mark.parametrize("prefix", ["", "+", "++"])
@pytest.mark.parametrize(
    ("key", "schema", "listed"),
    [
        ("method.bogus", "MaxRLRunConfig", "valid keys: name, stage, methods"),
        ("method.t1.bogus", "ClassificationToyConfig", "valid keys: num_classes, dim"),
        ("method.t1.stepz", "ClassificationToyConfig", "did you mean steps?"),
    ],
)
def test_compose_rejects_an_unknown_method_key_plain_or_appended(prefix, key, schema, listed):
    """Plain, ``+`` and ``++`` give the same one line: the key, its dataclass, the nearest fields.

    ``+``/``++`` append through Hydra's ``force_add``, which opens the struct node: Hydra alone
    composes them silently; the plain form makes Hydra suggest ``+``, which would not help."""
    for full in (True, False):
        with pytest.raises(ConfigError) as info:
            registry.compose(["experiment=maxrl_toy", f"{prefix}{key}=1"], full=full)
        message = str(info.value)
        assert message.startswith(f"{key}: not a field of {schema} (") and listed in message
        assert "\n" not in message and "+" not in message


def test_compose_checks_every_key_from_the_root():
    with pytest.raises(
        ConfigError, match=r"^bogus: not a field of RootConfig \(valid keys: method"
    ):
        registry.compose(["experiment=maxrl_toy", "+bogus=1"])
    with pytest.raises(ConfigError, match=r"^model\.bogus: not a field of ModelConfig"):
        registry.compose(["model=tiny-llama", "+model.bogus=1"])  # no method selected
    with pytest.raises(ConfigError, match=r"^benchmark\.sets\.NL4Opt\.bogus: .*DatasetSpec"):
        registry.compose(["experiment=sacopt_paper", "+benchmark.sets.NL4Opt.bogus=1"])
    cfg = registry.compose(["experiment=maxrl_toy", "+method.trainer.beta=0.1"])  # a dict node
    assert cfg.method.trainer.beta == 0.1


def test_hydra_errors_read_as_one_line():
    with pytest.raises(ConfigError) as info:
        registry.compose(["method=no_such_method"])
    message = str(info.value)
    assert "\n" not in message and "Config search path" not in message
    assert "Could not find 'method/no_such_method'" in message and "maxrl, mcce" in message
    with pytest.raises(ConfigError, match=r"^Ambiguous value for argument 'seed=1,2' 1\. To use"):
        registry.compose(["seed=1,2"])
