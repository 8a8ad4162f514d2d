"""Tests of the instruction_selection toy diagnosis (issue 43): the graded-pool and fixed-epoch
knobs, the paired / bootstrap statistics and the ``diagnose`` CLI."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch

from methods.instruction_selection import toy
from methods.instruction_selection.config import InstructionSelectionConfig
from methods.instruction_selection.diagnose import (
    bootstrap_spearman,
    diagnosis_config,
    main,
    paired_delta,
)
from methods.instruction_selection.toy_graded import finetune_steps, grade_of, near_family

torch.set_num_threads(1)


def _answer_is_sum(row: dict) -> bool:
    q, a = row["messages"][0]["content"], row["messages"][1]["content"]
    nums = [int(t) for t in q.replace("?", " ").replace(".", " ").split() if t.isdigit()]
    return int(a) == sum(nums)


def test_defaults_keep_the_original_pool_and_fixed_steps():
    cfg = InstructionSelectionConfig()
    assert cfg.near_grades == [] and cfg.train_epochs == 0
    fams = Counter(r["dataset"] for r in toy.make_pool(600, 0.03, 0))
    assert set(fams) == set(toy.FAMILIES)
    assert finetune_steps(cfg, 30) == finetune_steps(cfg, 240) == cfg.train_steps


def test_near_grades_add_graded_families_with_their_answer_accuracy():
    grades = [1.0, 0.5, 0.0]
    pool = toy.make_pool(2000, 0.03, 0, near_grades=grades, near_frac=0.1)
    fams = Counter(r["dataset"] for r in pool)
    for q in grades:
        assert fams[near_family(q)] == 200
    assert fams["add"] == 60 and fams["sub"] == 200
    acc = {
        grade_of(f): np.mean([_answer_is_sum(r) for r in pool if r["dataset"] == f])
        for f in fams
        if f.startswith("add~")
    }
    assert acc[1.0] == 1.0
    assert 0.35 < acc[0.5] < 0.65
    assert acc[0.0] < 0.1


def test_near_frac_changes_the_family_sizes_and_bad_values_raise():
    small = Counter(r["dataset"] for r in toy.make_pool(1000, 0.03, 0, [0.5], 0.02))
    big = Counter(r["dataset"] for r in toy.make_pool(1000, 0.03, 0, [0.5], 0.2))
    assert small["add~0.5"] == 20 and big["add~0.5"] == 200
    assert big["echo"] < small["echo"]
    with pytest.raises(ValueError):
        InstructionSelectionConfig(near_grades=[1.5])
    with pytest.raises(ValueError):
        InstructionSelectionConfig(train_epochs=-1)
    with pytest.raises(ValueError):
        toy.make_pool(100, 0.03, 0, [0.1, 0.2, 0.3, 0.4], 0.22)


def test_train_epochs_scales_steps_with_the_subset():
    cfg = InstructionSelectionConfig(train_epochs=10, train_batch=16)
    assert finetune_steps(cfg, 120) == 75
    assert finetune_steps(cfg, 30) == 19
    assert finetune_steps(cfg, 240) == 2 * finetune_steps(cfg, 120)


def test_paired_delta_mean_and_interval():
    d = paired_delta([1.0, 2.0, 3.0, 4.0, 5.0], [0.5, 1.4, 2.6, 3.5, 4.5])
    assert d["delta"] == pytest.approx(0.5)
    assert 0 < d["ci"] < 0.5 and d["n"] == 5
    assert np.isnan(paired_delta([1.0], [0.0])["ci"])


def test_bootstrap_spearman_separates_a_trend_from_noise():
    x = list(range(10))
    trend = [[float(i) + e for e in (0.0, 0.1, -0.1)] for i in x]
    r = bootstrap_spearman(x, trend, n_boot=300)
    assert r["rho"] == pytest.approx(1.0) and r["lo"] > 0.8
    rng = np.random.default_rng(1)
    noise = [list(rng.normal(size=3)) for _ in x]
    r = bootstrap_spearman(x, noise, n_boot=300)
    assert r["lo"] < 0 < r["hi"]


def test_diagnosis_config_reads_the_toy_preset():
    cfg = diagnosis_config(near_grades=[0.5], train_epochs=3)
    assert cfg.lora_targets == ["c_attn"] and cfg.per_quantile == 30
    assert cfg.near_grades == [0.5] and cfg.train_epochs == 3


def test_cli_writes_chunk_histograms_and_paired_rows(tmp_path):
    out = tmp_path / "diag"
    res = main(
        "--seeds 0 1 --chunk-seeds 1 --pool-size 200 --pretrain-steps 0 --n-test 8 "
        f"--per-quantile 10 --n-boot 20 --epochs 1 --representations rds --no-probe --out {out}".split()
    )
    saved = json.loads((out / "results.json").read_text())
    chunks = saved["representations"]["rds"]["chunks"]
    assert len(chunks) == 10
    assert all(sum(c["families"].values()) == 10 for c in chunks)
    assert len(chunks[0]["losses"]) == 2 and len(chunks[1]["losses"]) == 1
    assert any(f.startswith("add~") for f in saved["pool_families"])
    assert saved["representations"]["rds"]["paired_vs_random"]["n"] == 2
    assert res["n_finetunes"] == 2 + 2 + 9
    assert "Δ top-B − random" in (out / "results.md").read_text()
    assert (out / "diagnosis.png").exists()
