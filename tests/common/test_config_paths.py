"""A missing local data file or checkpoint stops a paper stage at validation, naming its config key."""

from __future__ import annotations

import pytest

from common.config import ConfigError
from common.registry import compose

EVAL = ["experiment=maxrl_paper", "method.stage=eval"]


def test_missing_benchmark_file_names_the_key(tmp_path):
    bad = f"benchmark.sets.aime25.path={tmp_path}/nope.jsonl"
    with pytest.raises(ConfigError, match=r"benchmark\.sets\.aime25\.path=.*nope\.jsonl.*no such"):
        compose([*EVAL, bad])
    (tmp_path / "aime.jsonl").write_text("{}\n")
    cfg = compose([*EVAL, f"benchmark.sets.aime25.path={tmp_path}/aime.jsonl"])
    assert cfg.benchmark.sets.aime25.path.endswith("aime.jsonl")


def test_missing_model_path_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"model\.path=.*ckpt.*no such folder.*model\.name="):
        compose([*EVAL, f"model.path={tmp_path}/ckpt"])
