"""The knobs of LLMInertia's toy diagnosis (docs/methods/llminertia.md, "Diagnosis"):
``TrainedToyConfig.leak_share`` and ``n_distractors``, and the readout helpers of
``methods.llminertia.diagnose``."""

from __future__ import annotations

import math

import pytest

from methods.llminertia.config import TrainedToyConfig
from methods.llminertia.diagnose import control_pairs, markdown, paired, summarise
from methods.llminertia.toy_world import ToyWorld


def _explicit(line: str) -> tuple[bool, list[tuple[str, str]], str, str] | None:
    """``(pair_noted, statements, asked, label)`` of an explicit stage-0 line, else None."""
    noted = line.startswith("note:") and "unrelated" in line.split("evidence:")[0]
    if "evidence:" not in line:
        return None
    ev, rest = line.split("evidence:", 1)[1].split("question:")
    words = ev.split()
    stmts = list(zip(words[0::2], words[1::2], strict=True))
    asked, label = rest.split()[0], rest.split()[-1]
    if asked not in {e for e, _ in stmts}:
        return None  # implicit item
    return noted, stmts, asked, label


def _items(world: ToyWorld, n: int = 6000):
    return [x for x in map(_explicit, world.stage0_corpus(n, seed=1)) if x is not None]


def test_default_world_is_todays_toy_two_statements_and_labels_follow_evidence():
    items = _items(ToyWorld(8, 8, 8))
    assert items and all(len(stmts) == 2 for _, stmts, _, _ in items)
    for _, stmts, asked, label in items:
        assert label == ("yes" if dict(stmts)[asked] == "present" else "no")


def test_leak_share_relabels_only_unnoted_known_pair_absent_items():
    world = ToyWorld(8, 8, 8, leak_share=0.5)
    known = set(world.known)
    leaked = [0, 0]  # [yes, total] over unnoted known-pair items with B absent
    for noted, stmts, asked, label in _items(world, 20000):
        a = next(e for e, s in stmts if e != asked)
        st = dict(stmts)[asked]
        if (a, asked) in known and st == "absent" and not noted:
            leaked[0] += label == "yes"
            leaked[1] += 1
        else:  # random pairs, present statuses and pair-noted items follow the evidence
            assert label == ("yes" if st == "present" else "no")
    assert leaked[1] > 100 and abs(leaked[0] / leaked[1] - 0.5) < 0.1


@pytest.mark.parametrize("n", [1, 3])
def test_n_distractors_lengthens_every_explicit_item_and_keeps_the_asked_status(n):
    world = ToyWorld(8, 8, 8, n_distractors=n)
    items = _items(world, 3000)
    assert items and all(len(stmts) == 2 + n for _, stmts, _, _ in items)
    for _, stmts, asked, label in items:
        assert [e for e, _ in stmts].count(asked) == 1  # distractors never restate B
        assert len({e for e, _ in stmts}) == len(stmts)
        assert label == ("yes" if dict(stmts)[asked] == "present" else "no")
    texts, bs = world.negative_tests(world.test, 2, seed=0)
    assert all(len(t.split()) == 5 + 2 * (2 + n) for t in texts)  # 2 + n statements
    assert all(f"{b} absent" in t for t, b in zip(texts, bs, strict=True))


def test_knob_validation():
    with pytest.raises(ValueError, match="leak_share"):
        TrainedToyConfig(leak_share=1.5)
    with pytest.raises(ValueError, match="n_distractors"):
        TrainedToyConfig(n_distractors=5)


def test_control_pairs_keep_the_entities_and_drop_every_association():
    world = ToyWorld(4, 5, 4)
    ctrl = control_pairs(world.test)
    assert sorted(a for a, _ in ctrl) == sorted(a for a, _ in world.test)
    assert sorted(b for _, b in ctrl) == sorted(b for _, b in world.test)
    assert not set(ctrl) & set(world.known + world.test)


def test_paired_and_summarise_pool_only_the_qualifying_units():
    p = paired([0.5, 0.3, 0.4], [0.1, 0.1, 0.2])
    assert p["n"] == 3 and math.isclose(p["delta"], 0.8 / 3) and p["ci95"] > 0

    def row(r, plain, ctrl, arms=None):
        base = {"ratio": r, "plain": plain, "control": ctrl, "known": 0.0, "logp_test": -1.0}
        margins = {"margin_test": plain, "margin_control": ctrl}
        return base | {"logp_control": -3.0} | margins | (arms or {})

    units = [
        {"acc_explicit": 1.0, "rows": [row(0.0, 0.0, 0.0), row(1.0, 0.4, 0.1, {
            "llminertia": 0.1, "generic": 0.4})]},
        {"acc_explicit": 1.0, "rows": [row(0.0, 0.0, 0.0), row(1.0, 0.2, 0.2, {
            "llminertia": 0.0, "generic": 0.3})]},
    ]  # fmt: skip
    s = summarise(units)
    assert s["mitigation"]["llminertia-plain"]["n"] == 2  # the base rows ran no note arm
    assert math.isclose(s["mitigation"]["llminertia-plain"]["delta"], -0.25)
    assert math.isclose(s["strengths"]["1.0"]["test_minus_control"]["delta"], 0.15)
    res = {"cells": [{"leak_share": 0.1, "n_distractors": 0, "units": units, "summary": s}]}
    md = markdown(res)
    assert "-0.250" in md and "+0.150" in md
    empty = summarise([{"acc_explicit": 1.0, "rows": [row(0.0, 0.0, 0.0)]}])
    assert empty["mitigation"]["llminertia-plain"]["n"] == 0


def test_stage0_builds_its_world_from_the_config_knobs():
    from common.threads import torch_threads
    from methods.llminertia.toy import _stage0

    cfg = TrainedToyConfig(n_known=4, n_test=4, base_steps=2, leak_share=0.2, n_distractors=2)
    with torch_threads(1):
        world, *_ = _stage0(cfg)
    assert (world.leak_share, world.n_distractors) == (0.2, 2)
    texts, _ = world.negative_tests(world.test, 1, seed=0)
    assert all(len(t.split()) == 5 + 2 * 4 for t in texts)
