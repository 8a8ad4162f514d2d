"""The knobs of KMKC's toy diagnosis (docs/methods/kmkc.md, "Diagnosis"): ``sft_items_per_fact``,
``sft_epochs``, ``uniform_draw``, ``eval_template``, the ``cgke_plain`` arm and the paired
statistics of ``methods.kmkc.diagnose``."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections import Counter

import pytest
import torch

from methods.kmkc.config import KMKCRunConfig, ToyConfig
from methods.kmkc.diagnose import COMPARISONS, main, paired_rows, preconditions
from methods.kmkc.toy import FactWorld, greedy_eval, prompt_ids
from methods.kmkc.toy_sft import sft_arm_pairs, sft_steps, uniform_pairs


def _world_and_pool(n_per_tier=10, seed=0):
    """A world and a CGKE-like pool: 1 item per tier-A fact, 4 per tier-C fact (the last three
    carry a statement after the answer, as the epistemic-foundation items do)."""
    cfg = ToyConfig(n_per_tier=n_per_tier)
    w = FactWorld(cfg, seed)
    pool, qs = [], []
    for q, g, _, tier in w.facts:
        k = {"A": 1, "B": 2, "C": 4}[tier]
        r, s = q.split()
        for j in range(k):
            pool.append((q, g if j == 0 else f"{g} {s} {r} is {g}"))
            qs.append(q)
    return cfg, w, pool, qs


def test_defaults_keep_todays_sft_data():
    cfg, w, pool, qs = _world_and_pool()
    data = sft_arm_pairs(w, pool, qs, cfg, seed=3)
    assert data["cgke"] == pool  # CGKE's whole pool, in order
    rng = random.Random(3 + 1)  # today's uniform draw, written out
    old = [(w.facts[i][0], w.facts[i][1]) for i in (rng.randrange(30) for _ in range(len(pool)))]
    assert data["vanilla_sft"] == old
    assert sft_steps(cfg, len(pool)) == cfg.sft_steps == 40


def test_items_per_fact_sets_every_arms_budget_and_keeps_cgkes_items():
    cfg, w, pool, qs = _world_and_pool()
    for x, n in ((0.5, 15), (1.0, 30), (3.0, 90), (10.0, 300)):
        data = sft_arm_pairs(w, pool, qs, dataclasses.replace(cfg, sft_items_per_fact=x), seed=0)
        assert {len(v) for v in data.values()} == {n}
        assert all(p in pool for p in data["cgke"])
        if n >= len(pool):  # the whole pool, then a remainder: every item at least once
            assert set(data["cgke"]) == set(pool)


def test_cgke_plain_has_cgkes_allocation_without_its_formats():
    cfg, w, pool, qs = _world_and_pool()
    data = sft_arm_pairs(w, pool, qs, dataclasses.replace(cfg, sft_items_per_fact=2.0), seed=1)
    # same question per item, so the same per-fact (and per-region) counts ...
    assert Counter(q for q, _ in data["cgke_plain"]) == Counter(q for q, _ in data["cgke"])
    # ... but every item is the plain (question, gold) pair
    assert all(a == w.gold[q] for q, a in data["cgke_plain"])
    assert any(len(a.split()) > 1 for _, a in data["cgke"])
    tiers = {q: t for q, _, _, t in w.facts}
    c_share = sum(tiers[q] == "C" for q, _ in data["cgke_plain"]) / 60
    assert c_share > 0.5  # the pool's C-heavy mix (40 of 70 items) survives the subset


def test_sft_epochs_sets_the_steps():
    cfg = ToyConfig(batch_size=64)
    assert sft_steps(dataclasses.replace(cfg, sft_epochs=3.0), 150) == math.ceil(450 / 64) == 8
    assert sft_steps(dataclasses.replace(cfg, sft_epochs=3.0), 900) == 43
    assert sft_steps(dataclasses.replace(cfg, sft_epochs=0.01), 10) == 1


def test_uniform_cover_sees_every_fact_before_repeating_one():
    w = FactWorld(ToyConfig(n_per_tier=20), 0)
    cover = uniform_pairs(w, 75, "cover", seed=0)
    assert len(set(cover[:60])) == 60 and len(set(cover)) == 60
    assert max(Counter(cover).values()) - min(Counter(cover).values()) == 1
    repl = uniform_pairs(w, 60, "replacement", seed=0)
    assert len(set(repl)) < 50  # about 1/e of the facts unseen at one item per fact
    with pytest.raises(ValueError, match="uniform_draw"):
        uniform_pairs(w, 5, "stratified", seed=0)


class _LookupModel:
    """Logits put all mass on the gold object of the fact whose (relation, subject) sit at prompt
    positions 1-2, in that order: knows the facts in the training template only."""

    def __init__(self, w: FactWorld) -> None:
        self.table = {
            (w.ids[q.split()[0]], w.ids[q.split()[1]]): w.ids[g] for q, g, _, _ in w.facts
        }
        self.v = len(w.tokens)

    def __call__(self, input_ids):
        logits = torch.zeros(*input_ids.shape, self.v)
        for i, row in enumerate(input_ids.tolist()):
            if (row[1], row[2]) in self.table:
                logits[i, -1, self.table[(row[1], row[2])]] = 10.0
        return type("Out", (), {"logits": logits})()


def test_eval_template_changes_the_question_asked():
    w = FactWorld(ToyConfig(n_per_tier=10), 0)
    q = w.facts[0][0]
    r, s = q.split()
    assert prompt_ids(w, [q], "qa")[0].tolist() == [w.ids[t] for t in ("<q>", r, s, "<a>")]
    assert prompt_ids(w, [q], "reversed")[0].tolist() == [w.ids[t] for t in ("<q>", s, r, "<a>")]
    assert prompt_ids(w, [q], "statement")[0].tolist() == [w.ids[t] for t in ("<q>", s, r, "is")]
    model = _LookupModel(w)
    assert greedy_eval(model, w)["acc"] == 1.0  # default = qa
    assert greedy_eval(model, w, template="reversed")["acc"] < 0.2
    with pytest.raises(ValueError, match="eval_template"):
        ToyConfig(eval_template="paraphrase")
    with pytest.raises(ValueError, match="uniform_draw"):
        ToyConfig(uniform_draw="stratified")
    assert KMKCRunConfig(arms=["vanilla_sft", "cgke_plain"]).arms[-1] == "cgke_plain"


def test_preconditions_count_items_and_passes_per_tier_c_fact():
    cfg, w, pool, qs = _world_and_pool(n_per_tier=4)
    c = [q for q, _, _, t in w.facts if t == "C"]
    r, s = c[0].split()
    data = {"x": [(c[0], "O1"), (f"{s} {r}", "O1"), (c[1], "O2"), (w.facts[0][0], "O3")]}
    pre = preconditions(w, data, {"x": 6}, batch=2)["x"]
    assert pre["items_per_C_fact"] == pytest.approx(3 / 4)  # the reversed item counts for c[0]
    assert pre["passes_per_item"] == pytest.approx(6 * 2 / 4)
    assert pre["unseen_C"] == pytest.approx(2 / 4)


def test_paired_rows_hand_worked():
    def arm(acc):
        return (
            {"steps": 5, "n_items": 9}
            | {k: acc for k in ("qa/acc", "qa/acc_C")}
            | {
                k: 0.0
                for k in ("reversed/acc", "reversed/acc_C", "statement/acc", "statement/acc_C")
            }
        )

    pre = {"items_per_C_fact": 1.0, "passes_per_item": 2.0, "unseen_C": 0.0}
    seeds = [
        {
            "vanilla_sft": arm(0.5),
            "vanilla_cover": arm(0.5),
            "cgke": arm(0.6),
            "cgke_plain": arm(0.7),
        }
        | {"pre": dict.fromkeys(("vanilla_sft", "vanilla_cover", "cgke", "cgke_plain"), pre)},
        {
            "vanilla_sft": arm(0.5),
            "vanilla_cover": arm(0.5),
            "cgke": arm(0.8),
            "cgke_plain": arm(0.7),
        }
        | {"pre": dict.fromkeys(("vanilla_sft", "vanilla_cover", "cgke", "cgke_plain"), pre)},
    ]
    rows = paired_rows({"c": seeds})
    assert [(r["arm"], r["baseline"]) for r in rows] == list(COMPARISONS)
    r = rows[0]  # cgke - vanilla_sft: diffs 0.1 and 0.3
    assert r["qa/acc/delta"] == pytest.approx(0.2)
    assert r["qa/acc/ci95"] == pytest.approx(12.7062 * 0.1414214 / math.sqrt(2), rel=1e-4)
    assert rows[2]["qa/acc/delta"] == pytest.approx(0.0)  # cgke - cgke_plain


def test_diagnose_cli_writes_paired_results(tmp_path):
    args = ["--seeds", "0", "1", "--budgets", "1", "--pretrain-steps", "5", "--n-per-tier", "6"]
    out = main([*args, "--sft-steps", "2", "--out", str(tmp_path)])
    assert len(out["rows"]) == 2 * len(COMPARISONS)  # today + one budget
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["rows"][4]["n_items"] == 18 and saved["seeds"] == [0, 1]
    assert "cgke − vanilla_sft" in (tmp_path / "results.md").read_text()
    assert (tmp_path / "kmkc_diagnose.png").stat().st_size > 0
