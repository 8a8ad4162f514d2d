"""Inputs that used to give a silent wrong answer now raise or are flagged (issue 32, point 3).

One test per case: each feeds the bad input and asserts the error names the argument, or that the
result is marked unusable, and checks the good input next to it still works.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch


def test_uot_tiny_eps_raises_instead_of_index_order():
    """A tiny ε made POT return a mass-free plan whose ranking was the index order 0, 1, 2, ..."""
    from methods.instruction_selection.selectors import uot, uot_plan

    rng = np.random.default_rng(0)
    S = rng.uniform(-1, 1, (5, 20))
    S[:, [7, 11, 13]] += 5.0  # three candidates every query prefers
    S = np.clip(S, -1, 1)
    assert sorted(uot(S, 3, eps=1e-2)) == [7, 11, 13]
    np.testing.assert_allclose(uot_plan(S, eps=1e-2).sum(axis=1), 1 / 5, rtol=1e-6)
    for eps in (1e-4, 1e-7):
        with pytest.raises(ValueError, match=r"eps=.*too small"):
            uot(S, 3, eps=eps)
    with pytest.raises(ValueError, match="too small"):  # finite τ₁ too: POT's own error signal
        uot_plan(S, eps=1e-7, reg_m=(1.0, 1.0))


def test_salo_detection_rate_rejects_nan_scores():
    from methods.salo.calibrate import detection_rate

    assert detection_rate([0.1, 0.9, 0.8, 0.2], 0.5) == 0.5
    with pytest.raises(ValueError, match="scores must not contain NaN"):
        detection_rate([0.9, float("nan"), 0.8], 0.5)
    with pytest.raises(ValueError, match="tau"):
        detection_rate([0.9, 0.8], float("nan"))


def test_salo_window_shorter_than_layer_kernel_is_refused():
    from methods.salo.config import SaloRunConfig

    SaloRunConfig(window=[10, 13], layer_kernel=3)  # exactly the kernel: fine
    with pytest.raises(ValueError, match=r"method\.window .*layer_kernel=3"):
        SaloRunConfig(window=[10, 12], layer_kernel=3)
    with pytest.raises(ValueError, match=r"method\.toy_window"):
        SaloRunConfig(toy_window=[1, 2])
    with pytest.raises(ValueError, match=r"method\.sweep_windows\[1\]"):
        SaloRunConfig(sweep_windows=[[0, 3], [0, 1]])


def test_swordsman_next_block_length_rejects_nan_entropy():
    from methods.swordsman.partition import next_block_length

    u = torch.tensor([0.1, 0.1, 0.2, 2.0, 0.3, 0.2])
    assert next_block_length(u, 0, min_len=1, max_len=6) == 3  # cut before the jump at 3
    bad = u.clone()
    bad[2] = float("nan")
    with pytest.raises(ValueError, match="u must be finite"):
        next_block_length(bad, 0, min_len=1, max_len=6)
    with pytest.raises(ValueError, match="min_jump"):
        next_block_length(u, 0, min_jump=float("nan"))


def test_sv_features_empty_template_raises():
    from methods.sv_features.alignment import lsq_optimal_omega

    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(6, 4, generator=g), torch.randn(6, 4, generator=g)
    T = torch.zeros(4, 4)
    T[0, 1] = 1.0
    assert lsq_optimal_omega(X, Y, T).abs().sum() > 0
    with pytest.raises(ValueError, match="T must have at least one nonzero"):
        lsq_optimal_omega(X, Y, torch.zeros(4, 4))
    with pytest.raises(ValueError, match="T must have at least one nonzero"):
        lsq_optimal_omega(X[:, :0], Y[:, :0], torch.zeros(0, 0))


def test_kmkc_decay_fit_never_converged_with_nan_r2():
    from methods.kmkc.decay_law import fit_structural_decay

    x = np.linspace(0.0, 3.0, 12)
    good = fit_structural_decay(x, 0.7 * np.exp(-1.5 * x) + 0.2)
    assert good.converged and good.r2 > 0.999
    flat = fit_structural_decay(x, np.full_like(x, 0.4))  # constant accuracy: R² undefined
    assert math.isnan(flat.r2) and not flat.converged
    with pytest.raises(ValueError, match="finite"):
        fit_structural_decay(np.r_[x[:-1], np.nan], 0.5 * np.exp(-x))
