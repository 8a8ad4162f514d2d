import itertools
import math

import numpy as np
import pytest

from common.metrics import (
    auroc,
    expected_calibration_error,
    hypervolume,
    majority_vote,
    mean_pass_at_k,
    pass_at_k,
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
