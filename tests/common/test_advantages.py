"""Tests for common/advantages.py: GRPO's plain group advantage (trl_group_advantages: test_rl.py)."""

from __future__ import annotations

import math

import pytest
import torch

from common.advantages import group_advantages
from common.rl import group_advantages as reexported


def test_hand_worked_group():
    r = torch.tensor([[0.0, 1.0, 1.0, 2.0]])  # mean 1, unbiased std sqrt(2/3), population 1/sqrt(2)
    a = group_advantages(r, eps=0.0)
    assert torch.allclose(a, torch.tensor([[-1.0, 0.0, 0.0, 1.0]]) / math.sqrt(2 / 3))
    p = group_advantages(r, eps=0.0, ddof=0)
    assert torch.allclose(p, torch.tensor([[-1.0, 0.0, 0.0, 1.0]]) * math.sqrt(2))
    assert torch.equal(group_advantages(r, scale=False), torch.tensor([[-1.0, 0.0, 0.0, 1.0]]))


def test_groups_are_normalised_separately_and_shift_scale_invariant():
    g = torch.Generator().manual_seed(0)
    r = torch.rand(3, 2, 6, generator=g)
    a = group_advantages(r, eps=0.0)
    assert torch.allclose(a.mean(-1), torch.zeros(3, 2), atol=1e-6)
    assert torch.allclose(a.std(-1), torch.ones(3, 2), atol=1e-5)
    assert torch.allclose(group_advantages(5.0 + 3.0 * r, eps=0.0), a, atol=1e-5)
    # one group's rewards do not move another group's advantages
    r2 = r.clone()
    r2[0, 0] += 10.0
    assert torch.equal(group_advantages(r2, eps=0.0)[1:], a[1:])


def test_constant_group_gets_zero_advantage():
    a = group_advantages(torch.full((2, 4), 0.7))
    assert torch.equal(a, torch.zeros(2, 4))


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="N >= 2"):
        group_advantages(torch.ones(3, 1))
    with pytest.raises(ValueError, match="N >= 2"):
        group_advantages(torch.tensor(1.0))
    with pytest.raises(ValueError, match="ddof"):
        group_advantages(torch.ones(2, 3), ddof=2)


def test_common_rl_reexports_it():
    assert reexported is group_advantages
