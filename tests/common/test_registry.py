"""Tests for common/registry.py: ``run_method`` seeds python, numpy and torch once from ``cfg.seed``."""

from __future__ import annotations

import random
import types

import numpy as np
import torch
from omegaconf import OmegaConf

from common import registry


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
