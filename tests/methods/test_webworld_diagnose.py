"""Tests for the toy lookahead's diagnosis knobs (methods/webworld/toy_lookahead.py, diagnose.py;
docs/methods/webworld.md "Diagnosis"): each knob changes what it should, the defaults keep the toy."""

from __future__ import annotations

import dataclasses
import random

import pytest

from methods.webworld.config import WebWorldRunConfig
from methods.webworld.diagnose import paired
from methods.webworld.toy_lookahead import (
    NoisyOracleSim,
    _Recording,
    decision_stats,
    lookahead,
)
from methods.webworld.toy_sites import ToyBrowser, make_sites, page_title


def _tc(**kw):
    return dataclasses.replace(WebWorldRunConfig(), episodes=12, seeds=[0, 1], **kw)


@pytest.fixture(scope="module")
def sites():
    return make_sites(4, random.Random(5), n_pages=5)


def _per_episode(m, arm):
    return [x for seed in m[arm]["_episodes"] for x in seed]


def test_default_arms_are_the_toys():
    assert WebWorldRunConfig().lookahead_arms == ["greedy", "bon_copy", "bon_learned", "bon_oracle"]
    assert WebWorldRunConfig().lookahead_min_conf == 0.0
    with pytest.raises(ValueError, match="lookahead_arms"):
        WebWorldRunConfig(lookahead_arms=["bon_magic"])
    with pytest.raises(ValueError, match="noisy_error"):
        WebWorldRunConfig(noisy_error="loud")


def test_noisy_acc_interpolates_between_greedy_and_oracle(sites):
    arms = ["greedy", "bon_oracle", "bon_noisy"]
    exact = lookahead(_tc(lookahead_arms=arms, noisy_acc=1.0), sites, None, 0)
    assert _per_episode(exact, "bon_noisy") == _per_episode(exact, "bon_oracle")  # acc 1 = oracle
    assert exact["bon_oracle"]["success"] > exact["greedy"]["success"]
    blind = lookahead(_tc(lookahead_arms=arms, noisy_acc=0.0, noisy_error="copy"), sites, None, 0)
    assert _per_episode(blind, "bon_noisy") == _per_episode(blind, "greedy")  # all ties: greedy


def test_noisy_error_kind_sets_the_false_positive_rate(sites):
    for err, fp_positive in (("title", True), ("copy", False)):
        log: list = []
        lookahead(
            _tc(lookahead_arms=["bon_noisy"], noisy_acc=0.0, noisy_error=err), sites, None, 0, log
        )
        st = decision_stats(log)
        assert st["title_acc"] < 0.5 and (st["false_pos"] > 0) == fp_positive
        assert st["recall"] == 0.0  # accuracy 0: the target is never predicted where it is true


def test_noisy_oracle_hits_its_accuracy():
    site = make_sites(1, random.Random(1), n_pages=5)[0]
    b = ToyBrowser(site)
    b.reset()
    acts = [f"click('{bid}')" for bid, _ in site.pages[site.start].links] * 200
    truth = [page_title(s) for s, _ in NoisyOracleSim(b, 1.0, random.Random(0)).peek(acts)]
    got = [page_title(s) for s, _ in NoisyOracleSim(b, 0.6, random.Random(0)).peek(acts)]
    acc = sum(x == y for x, y in zip(got, truth)) / len(acts)
    assert abs(acc - 0.6) < 0.07


class _ConfSim:
    def __init__(self, conf):
        self.conf = conf

    def peek(self, actions):
        return [("RootWebArea 'goal', focused", {"confidence": self.conf}) for _ in actions]


def test_min_conf_drops_unsure_predictions():
    site = make_sites(1, random.Random(2), n_pages=5)[0]
    b = ToyBrowser(site)
    b.reset()
    for conf, min_conf, named in ((0.4, 0.0, True), (0.4, 0.5, False), (0.6, 0.5, True)):
        ((s, _),) = _Recording(_ConfSim(conf), b, min_conf).peek(["click('1')"])
        assert (page_title(s) == "goal") == named
        if not named:
            assert s == b.state()  # an unsure prediction becomes "no change"


def test_decision_stats_hand_case():
    rec = dict(target="x", current="a", cands=["click('1')", "click('2')", "c2"], chosen=1)
    log = [
        rec | dict(true=["x", "b", "a"], pred=["b", "x", "a"], values=[0.0, 1.0, 0.0]),
        rec | dict(true=["a", "b", "a"], pred=["a", "b", "a"], values=[0.0, 0.0, 0.0], chosen=0),
    ]
    st = decision_stats(log)
    assert st["title_acc"] == pytest.approx(4 / 6)
    assert st["title_acc_change"] == pytest.approx(1 / 3)  # x (missed), b (missed), b (hit)
    assert st["recall"] == 0.0 and st["false_pos"] == pytest.approx(1 / 5)
    assert st["tie"] == 0.5 and st["decisive"] == 0.5 and st["changed"] == 0.5
    assert st["n_multi_link"] == 1 and st["action_sensitive"] == 1.0  # x vs b predicted b vs x
    blind = [
        rec
        | dict(
            true=["x", "b", "a"],
            pred=["b", "b", "a"],
            values=[0.0] * 3,
            cands=["click('1')", "click('2')", "fill('3', 'q')"],
        )
    ]
    assert decision_stats(blind)["action_sensitive"] == 0.0


def test_paired_difference():
    p = paired([0.6, 0.7, 0.8], [0.5, 0.5, 0.5])
    assert p["delta"] == pytest.approx(0.2) and p["ci95"] > 0
    assert paired([0.5, 0.5], [0.5, 0.5])["delta"] == 0.0


def test_model_cache_key_follows_training_not_lookahead_knobs():
    from methods.webworld.diagnose import _model_key

    tc = WebWorldRunConfig()
    same = dataclasses.replace(tc, seeds=list(range(10)), lookahead_min_conf=0.9, noisy_acc=0.5)
    deeper = dataclasses.replace(tc, model={**tc.model, "num_hidden_layers": 3})
    assert _model_key(same, 0) == _model_key(tc, 0)  # lookahead knobs reuse the trained model
    assert _model_key(deeper, 0) != _model_key(tc, 0) and _model_key(tc, 1) != _model_key(tc, 0)
