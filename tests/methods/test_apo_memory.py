"""APO loss without a full-vocabulary log-softmax (issue 33 point 3) and NaN reference log-probs
(issue 32): same loss and gradients as the dense path, a clear error on NaN."""

from __future__ import annotations

import pytest
import torch

from methods.apo import apo_policy_loss, topk_from_logits
from methods.apo.loss import policy_entropy, policy_logps_at


def _inputs(b=3, t=7, v=50, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, v, generator=g, dtype=torch.float64) * 2
    ids, lp = topk_from_logits(logits + torch.randn(b, t, v, generator=g, dtype=torch.float64), k)
    sampled = torch.randint(0, v, (b, t), generator=g)
    sampled[0, 0] = ids[0, 0, 0]  # one sampled token inside the Top-K (exclusive anchoring)
    adv = torch.tensor([-1.0, 0.5, -0.3], dtype=torch.float64)[:b]
    mask = torch.ones(b, t, dtype=torch.float64)
    mask[1, -2:] = 0
    old = torch.log_softmax(logits, -1).gather(-1, sampled[..., None]).squeeze(-1) - 0.05
    return logits, ids, lp.double(), sampled, adv, mask, old


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("ratio_to", ["ref", "old"])
def test_gathered_loss_and_grad_equal_dense_log_softmax(temperature, ratio_to):
    logits, ids, lp, sampled, adv, mask, old = _inputs()
    kw = dict(anchor_ratio_to=ratio_to, lam=1.05, beta=0.3)

    z1 = logits.clone().requires_grad_(True)
    dense = torch.log_softmax(z1 / temperature, -1)  # the old path: [B, T, V] log-softmax
    loss1, st1 = apo_policy_loss(dense, old, sampled, adv, mask, ids, lp, **kw)
    loss1.backward()

    z2 = logits.clone().requires_grad_(True)
    ls, lk = policy_logps_at(z2, sampled, ids, temperature=temperature)
    loss2, st2 = apo_policy_loss(lk, old, sampled, adv, mask, ids, lp, gathered=True,
                                 logp_sampled=ls, **kw)  # fmt: skip
    loss2.backward()
    # float64 throughout: agreement to 1e-10 (the two differ only in summation order)
    assert torch.allclose(loss1, loss2, atol=1e-10, rtol=0)
    assert z1.grad.abs().sum() > 0
    assert torch.allclose(z1.grad, z2.grad, atol=1e-10, rtol=0)
    assert st1["r_anchor_neg"] == pytest.approx(st2["r_anchor_neg"], abs=1e-10)


def test_policy_entropy_matches_closed_form():
    p = torch.tensor([[[0.5, 0.25, 0.25], [1 / 3, 1 / 3, 1 / 3]]], dtype=torch.float64)
    ent = policy_entropy(p.log(), 1.0)
    expect = torch.tensor([[1.5 * torch.log(torch.tensor(2.0)), torch.log(torch.tensor(3.0))]])
    assert torch.allclose(ent.double(), expect.double(), atol=1e-6)


def test_policy_logps_at_rejects_bad_ids():
    logits, ids, lp, sampled, *_ = _inputs()
    with pytest.raises(ValueError, match="sampled ids"):
        policy_logps_at(logits, sampled + 100, ids)
    with pytest.raises(ValueError, match="topk_ids must index"):
        policy_logps_at(logits, sampled, ids + 100)


@pytest.mark.parametrize("gathered", [False, True])
def test_nan_reference_logprobs_raise(gathered):
    logits, ids, lp, sampled, adv, mask, old = _inputs()
    lp = lp.clone()
    lp[2, 3, 1] = float("nan")
    if gathered:
        ls, lk = policy_logps_at(logits, sampled, ids)
        args = (lk, old, sampled, adv, mask, ids, lp)
        kw = dict(gathered=True, logp_sampled=ls)
    else:
        args = (torch.log_softmax(logits, -1), old, sampled, adv, mask, ids, lp)
        kw = {}
    with pytest.raises(ValueError, match="topk_logp_ref.*NaN"):
        apo_policy_loss(*args, **kw)
