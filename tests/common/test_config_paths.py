"""A missing local data file or checkpoint names its config key (issue 32 point 3)."""

from __future__ import annotations

import pytest

from common.config import ConfigError
from common.registry import compose, run_method

EVAL = ["experiment=maxrl_paper", "method.stage=eval"]


def test_missing_model_path_stops_at_validation_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"model\.path=.*ckpt.*no such folder.*model\.name="):
        compose([*EVAL, f"model.path={tmp_path}/ckpt"])


def test_missing_benchmark_file_names_the_key(tmp_path, tiny_model_dirs):
    bad = f"{tmp_path}/nope.jsonl"
    cfg = compose(
        [
            *EVAL,
            f"model.path={tiny_model_dirs['tiny_qwen2']}",
            "model.dtype=float32",
            "method.eval.engine=hf",
            f"benchmark.sets.aime25.path={bad}",
        ],
        run_dir=tmp_path / "run",
    )
    with pytest.raises(
        FileNotFoundError, match=r"set by benchmark\.sets\.aime25\.path=.*nope\.jsonl"
    ):
        run_method(cfg)
