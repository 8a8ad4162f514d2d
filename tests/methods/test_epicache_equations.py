"""Closed-form checks of EpiCache's central equations (issue 32 point 4): each fails when a sign, an
axis, a normalisation or an index of the layer allocation, the episode routing or the importance score
changes. Hand mutations tried against them are listed in docs/methods/epicache.md (Tests)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from methods.epicache import Episodes, allocate_layer_budgets, match_episode


# ------------------------------------------------------------ allocation M_l = s_l^α / Σ s^α · L·M
def test_paper_allocation_is_the_closed_form_power_share():
    # σ = [0.5, 0, 0.75] → s = [0.5, 1, 0.25]; α = 2 → s² = [4, 16, 1] / 16; L·M = 210 → [40, 160, 10].
    sigma = np.array([0.5, 0.0, 0.75])
    assert allocate_layer_budgets(sigma, 70, alpha=2.0, floor_frac=0.0).tolist() == [40, 160, 10]
    # α = 1: s / Σs = [2, 4, 1] / 7 → [60, 120, 30]
    assert allocate_layer_budgets(sigma, 70, alpha=1.0, floor_frac=0.0).tolist() == [60, 120, 30]


def test_paper_allocation_floor_is_funded_by_the_others_and_the_largest_remainder_wins():
    # Floor ⌊70/4⌋ = 17 pins layer 2 (10 < 17); the other two share 210 − 17 = 193 as 1:4, i.e.
    # 38.6 and 154.4; floors 38 + 154 + 17 = 209, and the one missing unit goes to the larger
    # remainder (0.6, layer 0).
    out = allocate_layer_budgets(np.array([0.5, 0.0, 0.75]), 70, alpha=2.0)
    assert out.tolist() == [39, 154, 17]


# ------------------------------------------------------------ routing e* = argmax_e cos(f(q), c_e)
def test_routing_is_cosine_not_dot_product_with_the_centroid():
    # Centroids of different norms: the dot product picks episode 0 (1.2 > 0.7), the cosine episode 1.
    ep = Episodes(
        labels=np.array([0, 1]), centroids=np.array([[2.0, 0.0], [0.5, 0.5]]), order=[[0], [1]]
    )
    q = np.array([0.6, 0.8])
    e, sim = match_episode(q, ep)
    assert e == 1 and sim == pytest.approx(0.7 / np.sqrt(0.5), abs=1e-9)
    assert match_episode(q, ep, metric="dot") == (0, pytest.approx(1.2))
    assert match_episode(-q, ep)[0] == 0  # cos = −0.6 vs −0.99: the larger cosine, not the smaller
    assert match_episode(3.0 * q, ep)[1] == pytest.approx(sim)  # cosine: the query's norm cancels


# ------------------------------------------------------------ importance s_i = max_{t,g} softmax_cache
class _Attn(torch.nn.Module):
    layer_idx = 0


def test_importance_is_the_restricted_softmax_max_over_prompt_and_group(monkeypatch):
    """Hand-built logits through the attention function: one KV head, group of 2, 2 prompt queries."""
    from methods.epicache import cache as cache_mod

    d = 1
    # keys: 3 cached + 2 prompt tokens; query logits q·k = q * k (d = 1, scaling 1)
    k = torch.tensor([1.0, 0.0, -1.0, 5.0, 5.0]).view(1, 1, 5, d)
    qv = torch.tensor([[2.0, -1.0], [0.5, 3.0]]).T.reshape(1, 2, 2, d)  # [B, H=2, Q=2, d]
    st = cache_mod._ForwardState(capture="past_max")
    monkeypatch.setattr(cache_mod, "_STATE", st)
    cache_mod._epicache_attention(_Attn(), qv, k, k, None, scaling=1.0)
    past = k[0, 0, :3, 0]
    ref = torch.zeros(3)
    for h in range(2):
        for t in range(2):
            ref = torch.maximum(
                ref, torch.softmax(qv[0, h, t, 0] * past, -1)
            )  # over cached keys only
    torch.testing.assert_close(st.scores[0][0, 0], ref)
    assert float(st.scores[0][0, 0].sum()) > 1.0  # a max of distributions, not one distribution
