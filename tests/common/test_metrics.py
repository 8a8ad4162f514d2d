import itertools
import math

import numpy as np
import pytest

from common.metrics import (
    auroc,
    ci_halfwidth,
    expected_calibration_error,
    hypervolume,
    majority_vote,
    mean_over_seeds,
    mean_pass_at_k,
    normalize_answer,
    paired_difference,
    pass_at_k,
    spearman,
    token_f1,
)


@pytest.mark.parametrize("n", range(1, 11))
def test_pass_at_k_equals_brute_force_over_subsets(n):
    for c in range(n + 1):
        outcomes = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(range(n), k))
            brute = sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)


def test_pass_at_k_large_n_is_stable():
    # 1 - C(n-c, k)/C(n, k) with exact integers as the reference.
    n, c, k = 4096, 3, 1024
    exact = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-10)
    assert pass_at_k(4096, 0, 4096) == 0.0 and pass_at_k(4096, 1, 4096) == 1.0
    assert pass_at_k(4096, 1, 1) == pytest.approx(1 / 4096, rel=1e-10)


def test_pass_at_k_bad_input():
    with pytest.raises(ValueError, match="k must"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="c <= n"):
        pass_at_k(4, 5, 1)
    with pytest.raises(TypeError, match="k must be an int"):
        pass_at_k(4, 1, 1.5)
    assert mean_pass_at_k([0, 4], n=4, k=1) == pytest.approx(0.5)


def test_majority_vote():
    assert majority_vote(["3", "4", "4", None, "3", "4"]) == "4"
    assert majority_vote(["a", "b"]) == "a"  # tie -> first seen
    assert majority_vote([None, None]) is None


def test_hypervolume_closed_form_and_maximize():
    # Two points minimised with ref (1, 1): union of [0.2,1]x[0.6,1] and [0.5,1]x[0.3,1].
    pts = np.array([[0.2, 0.6], [0.5, 0.3]])
    assert hypervolume(pts, ref=[1, 1]) == pytest.approx(0.8 * 0.4 + 0.5 * 0.7 - 0.5 * 0.4)
    # The same front maximised: 1 - x with reference 0.
    assert hypervolume(1 - pts, ref=0.0, maximize=True) == pytest.approx(0.47)
    # Dominated points add nothing.
    assert hypervolume(np.vstack([pts, [0.9, 0.9]]), ref=[1, 1]) == pytest.approx(0.47)


def test_hypervolume_matches_monte_carlo():
    rng = np.random.default_rng(0)
    pts = rng.random((12, 3))
    ref = np.ones(3)
    samples = rng.random((200_000, 3))
    dominated = (samples[:, None, :] >= pts[None, :, :]).all(-1).any(-1)
    mc = dominated.mean()  # the box [0, 1]^3 has volume 1
    assert hypervolume(pts, ref) == pytest.approx(mc, abs=4e-3)
    # Mixed directions: maximise the first objective only.
    flipped = pts.copy()
    flipped[:, 0] = 1 - flipped[:, 0]
    assert hypervolume(flipped, ref=[0, 1, 1], maximize=[True, False, False]) == pytest.approx(
        hypervolume(pts, ref)
    )


def test_hypervolume_bad_input():
    with pytest.raises(ValueError, match="2-D"):
        hypervolume(np.zeros(3), ref=1)
    with pytest.raises(ValueError, match="finite"):
        hypervolume([[np.nan, 1.0]], ref=[2, 2])


def test_ece_hand_worked():
    # Bin (0.7, 0.8]: conf 0.75 x2, one correct -> |0.5 - 0.75| = 0.25, weight 2/4.
    # Bin (0.9, 1.0]: conf 1.0 x2, both correct -> 0, weight 2/4.
    assert expected_calibration_error([0.75, 0.75, 1.0, 1.0], [1, 0, 1, 1]) == pytest.approx(0.125)
    assert expected_calibration_error([0.0, 1.0], [0, 1]) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="confidences must lie"):
        expected_calibration_error([1.2], [1])
    with pytest.raises(ValueError, match="equal-length"):
        expected_calibration_error([0.5, 0.5], [1])


def test_auroc():
    assert auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="both classes"):
        auroc([0.1, 0.2], [1, 1])


def _average_ranks(v):
    """1-based ranks, ties sharing the mean of the positions they span (brute force)."""
    return [1 + sum(w < x for w in v) + (sum(w == x for w in v) - 1) / 2 for x in v]


def test_spearman_is_pearson_of_average_ranks():
    x = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    y = [2.0, 7.0, 1.0, 8.0, 2.0, 8.0, 1.0, 8.0]  # ties on both sides
    expect = float(np.corrcoef(_average_ranks(x), _average_ranks(y))[0, 1])
    assert spearman(x, y) == pytest.approx(expect, abs=1e-12)


def test_spearman_sees_only_the_order():
    x = np.linspace(-2.0, 3.0, 9)
    assert spearman(x, np.exp(x)) == pytest.approx(1.0)
    assert spearman(x, -(x**3)) == pytest.approx(-1.0)


@pytest.mark.parametrize(
    ("x", "y", "min_n"),
    [
        ([1.0, 2.0, 3.0], [5.0, 5.0, 5.0], 2),  # constant side
        ([1.0, 2.0], [1.0, 2.0], 3),  # fewer than min_n pairs
        ([1.0, 2.0, 3.0], [1.0, math.nan, 2.0], 2),  # NaN value
    ],
)
def test_spearman_is_nan_where_undefined(x, y, min_n):
    assert math.isnan(spearman(x, y, min_n=min_n))


def test_spearman_bad_input():
    with pytest.raises(ValueError, match="equal-length"):
        spearman([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="min_n"):
        spearman([1.0, 2.0], [1.0, 2.0], min_n=1)


def test_normalize_answer_squad_rules():
    assert normalize_answer("  The Cat, sat on a MAT!  ") == "cat sat on mat"
    assert normalize_answer("theatre an-other") == "theatre another"  # whole words only
    assert normalize_answer("Two apples and one pear") == "two apples and one pear"
    assert normalize_answer("Two apples and one pear", number_words=True) == "2 apples and 1 pear"
    with pytest.raises(TypeError, match="text must be a str"):
        normalize_answer(None)


def test_token_f1_hand_worked():
    # pred {cat, sat, on, mat} vs gold {cat, on, mat}: precision 3/4, recall 1 -> F1 6/7.
    assert token_f1("The cat sat on the mat.", "cat on a mat") == pytest.approx(6 / 7)
    # multiset overlap: min counts x:1, y:1 -> precision = recall = 2/3.
    assert token_f1("x x y", "x y y") == pytest.approx(2 / 3)
    assert token_f1("dog", "cat") == 0.0
    assert token_f1("", "the") == 1.0  # both empty after normalisation
    assert token_f1("", "cat") == 0.0
    assert token_f1("Cat!", "cat", normalize=str.lower) == 0.0  # the given normaliser is used


def test_ci_halfwidth_matches_scipy_intervals():
    from scipy import stats

    x = np.array([0.2, 0.5, 0.4, 0.9, 0.7])
    sem = x.std(ddof=1) / math.sqrt(x.size)
    lo, hi = stats.t.interval(0.9, x.size - 1, loc=x.mean(), scale=sem)
    assert ci_halfwidth(x, level=0.9, dist="t") == pytest.approx((hi - lo) / 2)
    lo, hi = stats.norm.interval(0.95, loc=x.mean(), scale=sem)
    assert ci_halfwidth(x) == pytest.approx((hi - lo) / 2)
    assert ci_halfwidth(x) == pytest.approx(1.96 * sem, rel=1e-4)  # the familiar rounded 1.96


def test_ci_halfwidth_edges_and_bad_input():
    assert math.isnan(ci_halfwidth([1.0]))
    assert ci_halfwidth([2.0, 2.0, 2.0]) == 0.0
    with pytest.raises(ValueError, match="level"):
        ci_halfwidth([1.0, 2.0], level=1.0)
    with pytest.raises(ValueError, match="dist"):
        ci_halfwidth([1.0, 2.0], dist="bootstrap")
    with pytest.raises(ValueError, match="1-D"):
        ci_halfwidth([[1.0, 2.0]])


def test_mean_over_seeds_hand_worked():
    seeds = [
        {"a": {"acc": 0.2, "loss": 1.0}, "b": {"loss": 3.0}},
        {"a": {"acc": 0.4, "loss": 2.0}, "b": {"loss": 5.0}},
    ]
    out = mean_over_seeds(seeds, std_keys=("acc",))
    assert out["a"]["acc"] == pytest.approx(0.3) and out["a"]["loss"] == pytest.approx(1.5)
    assert out["a"]["acc_std"] == pytest.approx(math.sqrt(0.02))  # sample std of 0.2, 0.4
    assert out["b"] == {"loss": 4.0}  # no acc, so no acc_std
    assert "acc_std" not in mean_over_seeds(seeds[:1], std_keys=("acc",))["a"]  # one seed
    with pytest.raises(ValueError, match="per_seed"):
        mean_over_seeds([])


def test_paired_difference_is_the_interval_of_the_differences():
    a, b = [0.5, 0.9, 0.7, 0.8], [0.4, 0.5, 0.6, 0.9]
    p = paired_difference(a, b)
    d = [0.1, 0.4, 0.1, -0.1]
    assert p["delta"] == pytest.approx(sum(d) / 4) and p["n"] == 4 and p["wins"] == 3
    assert p["ci95"] == pytest.approx(ci_halfwidth(d, dist="t"))
    assert paired_difference(b, a)["delta"] == pytest.approx(-p["delta"])
    assert math.isnan(paired_difference([1.0], [0.0])["ci95"])
    with pytest.raises(ValueError):
        paired_difference([1.0, 2.0], [1.0])
