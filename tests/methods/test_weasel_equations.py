"""Weasel's central equations in closed form, so that a changed sign, axis, normalisation or index
fails: the batched greedy against the naive loop and brute force (symmetric and asymmetric D, ties),
importance and distance on a scripted similarity, the exact pruning window."""

from __future__ import annotations

import re

import numpy as np
import pytest

import methods.weasel.select as select_mod
from methods.weasel import WeaselConfig, WeaselSelector
from methods.weasel.pruning import HISTORY_HEADER, prune_axtree_centered
from methods.weasel.scoring import distance_matrix, importance
from methods.weasel.select import (
    brute_force_select,
    greedy_select,
    greedy_select_many,
    greedy_select_naive,
    objective,
)


def _instances(seed: int, count: int, asymmetric: bool = False):
    """Random (Φ, D, budget) triples; odd ones rounded to one decimal so pairs and gains tie."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(count):
        n = int(rng.integers(0, 13))
        phi = rng.uniform(size=n)
        if asymmetric:
            dist = rng.uniform(size=(n, n))
            np.fill_diagonal(dist, 0.0)
        else:
            pts = rng.uniform(size=(n, 2))
            dist = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
        if t % 2:
            phi, dist = np.round(phi, 1), np.round(dist, 1)
        out.append((phi, dist, int(rng.integers(1, 6))))
    return out


@pytest.mark.parametrize("asymmetric", [False, True])
@pytest.mark.parametrize("lam", [0.0, 0.5, 1.0, 3.0])
def test_many_equals_naive_and_single(asymmetric, lam):
    inst = _instances(int(lam * 10) + asymmetric, 400, asymmetric)
    phis, dists, budgets = zip(*inst)
    got = greedy_select_many(phis, dists, budgets, lam)
    want = [greedy_select_naive(p, d, b, lam) for p, d, b in inst]
    assert got == want
    assert got == [greedy_select(p, d, b, lam) for p, d, b in inst]


def test_greedy_gain_reads_row_k_of_an_asymmetric_distance():
    # Gain Φ(k) + λ Σ_{i∈J} D(k, i) reads row k. Start pair (0, 1) (D[0, 1] = 5).
    # Row reading: k=2 -> 0 + 0.1 + 0.1 = 0.2, k=3 -> 0 + 1 + 1 = 2 -> add 3.
    # Column reading would give k=2 -> 2 + 2 = 4, k=3 -> 0 -> add 2.
    dist = np.zeros((4, 4))
    dist[0, 1] = 5.0
    dist[2, :2] = 0.1
    dist[:2, 2] = 2.0
    dist[3, :2] = 1.0
    phi = np.zeros(4)
    assert greedy_select(phi, dist, 3) == [0, 1, 3]
    assert greedy_select_many([phi], [dist], [3]) == [[0, 1, 3]]
    assert greedy_select_naive(phi, dist, 3) == [0, 1, 3]


def test_budget_two_greedy_is_the_exact_optimum():
    # With |J| <= 2 the greedy's first stage is exhaustive, so it equals brute force exactly.
    inst = [x for x in _instances(7, 300) if x[0].shape[0] >= 2]
    for lam in (0.0, 1.0, 2.5):
        got = greedy_select_many([p for p, _, _ in inst], [d for _, d, _ in inst], 2, lam)
        for (p, d, _), J in zip(inst, got):
            best = brute_force_select(p, d, 2, lam)
            # same values, same tie rule (lexicographically first pair), even on rounded ties
            assert best == J


def test_many_never_beats_brute_force_and_tracks_it():
    inst = [x for x in _instances(8, 200) if x[0].shape[0] >= 1]
    got = greedy_select_many([p for p, _, _ in inst], [d for _, d, _ in inst], 3, 1.0)
    ratios = []
    for (p, d, _), J in zip(inst, got):
        opt = objective(brute_force_select(p, d, 3, 1.0), p, d, 1.0)
        val = objective(J, p, d, 1.0)
        assert val <= opt + 1e-12 and len(J) == min(3, p.shape[0])
        ratios.append(val / opt if opt > 0 else 1.0)
    assert min(ratios) >= 0.5 and np.mean(ratios) >= 0.95


def test_many_in_small_blocks_is_unchanged(monkeypatch):
    inst = _instances(9, 120)
    phis, dists, budgets = zip(*inst)
    full = greedy_select_many(phis, dists, budgets)
    monkeypatch.setattr(select_mod, "_MAX_BLOCK", 50)  # a few trajectories per block
    assert greedy_select_many(phis, dists, budgets) == full


def test_many_bad_input_names_the_trajectory():
    ok_p, ok_d = np.ones(3), np.zeros((3, 3))
    with pytest.raises(ValueError, match="same length"):
        greedy_select_many([ok_p], [ok_d, ok_d], 2)
    with pytest.raises(ValueError, match="trajectory 1: importance contains NaN"):
        greedy_select_many([ok_p, np.array([1.0, np.nan, 0.0])], [ok_d, ok_d], 2)
    with pytest.raises(ValueError, match="trajectory 0: distance contains NaN"):
        greedy_select_many([ok_p], [np.full((3, 3), np.inf)], 2)
    with pytest.raises(ValueError, match=r"trajectory 1: importance must be \[n\]"):
        greedy_select_many([ok_p, ok_p], [ok_d, np.zeros((3, 2))], 2)
    with pytest.raises(ValueError, match="trajectory 1: budget must be >= 1"):
        greedy_select_many([ok_p, ok_p], [ok_d, ok_d], [2, 0])
    with pytest.raises(TypeError, match="trajectory 0: budget must be an int"):
        greedy_select_many([ok_p], [ok_d], [1.5])
    with pytest.raises(ValueError, match="lam"):
        greedy_select_many([ok_p], [ok_d], 2, lam=-1.0)
    assert greedy_select_many([], [], 3) == []


class _Scripted:
    """A similarity whose scores and pairwise matrices are given; records the score calls."""

    def __init__(self, r=None, pair=None):
        self.r, self.pair, self.calls = r, pair or {}, []

    def score(self, cands, refs):
        self.calls.append((list(cands), list(refs)))
        return np.asarray(self.r, dtype=float)

    def pairwise(self, texts):
        return np.asarray(self.pair[tuple(texts)], dtype=float)


def test_importance_closed_forms_and_direction():
    r = [0.3, 0.9, 0.5, 0.6]  # min 0.3 > 0, so r/span or (r − min)/max would differ
    sim = _Scripted(r)
    texts = ["s0", "s1", "s2", "s3"]
    mm = importance("goal", texts, sim)
    np.testing.assert_allclose(mm, [0.0, 1.0, 1 / 3, 0.5])
    # candidate = the step's text, reference = the goal (official prepare_scores.py)
    assert sim.calls[0] == (texts, ["goal"] * 4)
    np.testing.assert_allclose(importance("goal", texts, sim, "raw"), r)
    # φ_t = max(0, r_t − r_{t−1}), r_{−1} = 0: [0.3, 0.6, 0, 0.1] / 1.0
    inc = importance("goal", texts, _Scripted([0.3, 0.9, 0.5, 0.6]), "increment")
    np.testing.assert_allclose(inc, [0.3, 0.6, 0.0, 0.1])
    inc = importance("goal", texts, _Scripted([0.2, 0.5, 0.4, 0.8]), "increment")
    np.testing.assert_allclose(inc, np.array([0.2, 0.3, 0.0, 0.4]) / 0.9)


def test_distance_closed_form_max_of_one_minus_sim():
    s_sim = np.array([[1.0, 0.8, 0.3], [0.8, 1.0, 0.6], [0.3, 0.6, 1.0]])
    y_sim = np.array([[1.0, 0.9, 0.1], [0.9, 1.0, 1.2], [0.1, 1.2, 1.0]])  # 1.2: clipped
    sim = _Scripted(pair={("a", "b", "c"): s_sim, ("x", "y", "z"): y_sim})
    states, resp = ["a", "b", "c"], ["x", "y", "z"]
    want = np.array([[0.0, 0.2, 0.9], [0.2, 0.0, 0.4], [0.9, 0.4, 0.0]])
    np.testing.assert_allclose(distance_matrix(states, resp, sim), want)
    np.testing.assert_allclose(distance_matrix(states, resp, sim, "state"), 1 - s_sim)
    want_y = np.clip(1 - y_sim, 0, 1)
    np.testing.assert_allclose(distance_matrix(states, resp, sim, "response"), want_y)
    np.testing.assert_allclose(
        distance_matrix(states, resp, sim, "mean"), 0.5 * ((1 - s_sim) + want_y)
    )
    np.testing.assert_allclose(distance_matrix(states, None, sim), 1 - s_sim)


def test_centered_window_is_exactly_w_each_side():
    head = "## Goal:\ng\n\n# Observation of current step:\n## AXTree:\n"
    lines = ["RootWebArea 'r'"] + [f"\t[{i}] link 'x{i}'" for i in range(30)]
    prompt = head + "\n".join(lines) + "\n" + HISTORY_HEADER + "\nh\n"
    for target, w, want in [(15, 4, range(11, 20)), (1, 3, range(0, 5)), (28, 2, range(26, 30))]:
        out = prune_axtree_centered(prompt, str(target), window=w)
        kept = [int(x) for x in re.findall(r"^\t\[(\d+)\]", out, flags=re.M)]
        assert kept == list(want), (target, w)


def test_selector_maps_local_indices_to_record_indices():
    # Two goals interleaved: B occupies records 0-1, A records 2-6; every kept index is a record of
    # its own trajectory, and the selector's choice equals greedy_select on the scored matrices.
    from methods.weasel.scoring import JaccardSimilarity

    def rec(goal, k):
        user = (
            f"## Goal:\n{goal}\n\n# Observation of current step:\n## AXTree:\nRootWebArea 'r'\n"
            f"\t[{k}] link 'item {k} {goal}'\n\t[{k + 1}] button 'go {k % 3}'\n"
            f"{HISTORY_HEADER}\nnone\n"
        )
        return {
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": user},
                {
                    "role": "assistant",
                    "content": f"<think>t {k}</think><action>click('{k}')</action>",
                },
            ]
        }

    recs = [rec("buy tea", 2), rec("buy tea", 9)] + [rec("find a red lamp", k) for k in range(5)]
    sel = WeaselSelector(JaccardSimilarity(), WeaselConfig(prune=False, budget_fixed=3))
    _, idx = sel.select_indices(recs)
    by_traj = {tuple(t["index"]): t for t in sel.scores}
    assert set(by_traj) == {(0, 1), (2, 3, 4, 5, 6)}
    a = by_traj[(2, 3, 4, 5, 6)]
    assert len(a["selected"]) == 3 and len(idx) == 5
    assert set(idx) == {0, 1} | {a["index"][j] for j in a["selected"]}
    # the selector's choice is greedy_select on the trajectory's own scores
    steps = recs[2:]
    dist = distance_matrix(
        [
            r["messages"][1]["content"].split("## AXTree:\n")[1].split(HISTORY_HEADER)[0]
            for r in steps
        ],
        [r["messages"][2]["content"] for r in steps],
        JaccardSimilarity(),
    )
    assert a["selected"] == greedy_select(np.array(a["importance"]), dist, 3)
