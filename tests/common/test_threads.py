"""Tests for common/threads.py: the thread count is set inside the block and restored after it."""

from __future__ import annotations

import pytest
import torch

from common.threads import torch_threads


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_sets_inside_and_restores_after(two_threads):
    with torch_threads(1) as n:
        assert n == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


def test_restores_when_the_block_raises(two_threads):
    with pytest.raises(RuntimeError, match="boom"), torch_threads(1):
        raise RuntimeError("boom")
    assert torch.get_num_threads() == 2


def test_nested_scopes_unwind_in_order(two_threads):
    with torch_threads(1):
        with torch_threads(3):
            assert torch.get_num_threads() == 3
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


def test_decorator_form_restores_per_call(two_threads):
    @torch_threads(1)
    def inner():
        return torch.get_num_threads()

    assert inner() == 1 and inner() == 1
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize(
    ("n", "err"), [(0, ValueError), (-2, ValueError), (1.0, TypeError), (True, TypeError)]
)
def test_bad_count_is_refused_naming_n(two_threads, n, err):
    with pytest.raises(err, match="n must be"), torch_threads(n):
        pass
    assert torch.get_num_threads() == 2
