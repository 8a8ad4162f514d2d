"""Tests for methods/apo: the rectified-ratio loss, anchor ratio, reference Top-K, toy and trainer.

The math tests pin the anchor ratio, the rectified ratio and their logit gradients (derived in
docs/methods/apo.md) with closed forms, brute force over the
vocabulary, finite differences and first-order SGD steps on small fp64 cases.
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from torch.testing import assert_close

from methods.apo import (
    apo_policy_loss,
    grpo_clipped_loss,
    kl_on_wrong_penalty,
    reference_topk,
    safe_manifold_mass,
    topk_coverage,
    virtual_anchor_ratio,
)
from methods.apo.topk import topk_from_logits

B, T, V, K = 3, 4, 11, 4


def _case(seed: int = 0, dtype=torch.float64, off_policy: bool = True):
    """Random policy/reference/behaviour distributions with sampled tokens and mixed advantages."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, dtype=dtype)
    ref_logits = logits + 0.7 * torch.randn(B, T, V, generator=g, dtype=dtype)
    logp = torch.log_softmax(logits, -1)
    sampled = torch.randint(0, V, (B, T), generator=g)
    old_logp = logp.gather(-1, sampled[..., None]).squeeze(-1)
    if off_policy:
        old_logp = old_logp + 0.3 * torch.randn(B, T, generator=g, dtype=dtype)
    topk_ids, topk_lp = topk_from_logits(ref_logits, K)
    adv = torch.tensor([-1.2, 0.8, -0.4], dtype=dtype)
    mask = torch.ones(B, T, dtype=dtype)
    mask[2, :1] = 0  # one padded position
    return logits, ref_logits, sampled, old_logp, topk_ids, topk_lp, adv, mask


# ---------------------------------------------------------------- reduction and invariants
def test_identity_reduction_equals_grpo_clipped_loss_exactly():
    logits, _, sampled, old_logp, ids, lp, adv, mask = _case()
    logp = torch.log_softmax(logits, -1)
    apo, _ = apo_policy_loss(
        logp, old_logp, sampled, adv, mask, ids, lp, lam=1.0, beta=0.0, dual_clip=None
    )
    grpo = grpo_clipped_loss(logp.gather(-1, sampled[..., None]).squeeze(-1), old_logp, adv, mask)
    assert torch.equal(apo, grpo)
    # independent hand formula: -min(A r, A clip(r)) token-mean
    r = torch.exp(logp.gather(-1, sampled[..., None]).squeeze(-1) - old_logp)
    a = adv[:, None]
    per = -torch.min(a * r, a * r.clamp(0.8, 1.2))
    assert_close(apo, (per * mask).sum() / mask.sum())


@pytest.mark.parametrize("clip_mode", ["rectified", "token_only", "none"])
def test_positive_advantage_tokens_untouched_by_lambda_beta(clip_mode):
    logits, _, sampled, old_logp, ids, lp, adv, mask = _case(1)
    grads = []
    for lam, beta in [(1.0, 0.0), (1.7, 0.9)]:
        z = logits.clone().requires_grad_(True)
        loss, _ = apo_policy_loss(
            torch.log_softmax(z, -1), old_logp, sampled, adv, mask, ids, lp,
            lam=lam, beta=beta, clip_mode=clip_mode,
        )  # fmt: skip
        loss.backward()
        grads.append(z.grad)
    pos = adv > 0
    assert torch.equal(grads[0][pos], grads[1][pos])  # row 1 has A > 0
    assert not torch.allclose(grads[0][~pos], grads[1][~pos])  # negatives do change


def test_anchor_ratio_matches_brute_force_over_vocabulary():
    logits, ref_logits, sampled, _, ids, lp, _, _ = _case(2)
    logp = torch.log_softmax(logits, -1)
    r_anchor, z = virtual_anchor_ratio(logp, sampled, ids, lp)
    p, q = logp.exp(), torch.softmax(ref_logits, -1)
    for b in range(B):
        for t in range(T):
            order = sorted(range(V), key=lambda v: -q[b, t, v].item())[:K]
            s = [v for v in order if v != sampled[b, t].item()]
            assert_close(z[b, t], q[b, t, s].sum())
            # ω-weighted ratio form of the paper (as restated), computed term by term
            w = q[b, t, s] / q[b, t, s].sum()
            assert_close(r_anchor[b, t], (w * p[b, t, s] / q[b, t, s]).sum())


def test_initial_value_r_anchor_one_and_rectified_lambda_minus_beta():
    # π_θ = π_old = π_ref: r = 1, r_anchor = 1, r̃ = λ − β = 0.95 inside the clip range.
    logits, _, sampled, _, _, _, adv, mask = _case(3, off_policy=False)
    logp = torch.log_softmax(logits, -1)
    ids, lp = topk_from_logits(logits, K)
    old = logp.gather(-1, sampled[..., None]).squeeze(-1)
    r_anchor, _ = virtual_anchor_ratio(logp, sampled, ids, lp)
    assert_close(r_anchor, torch.ones_like(r_anchor))
    loss, stats = apo_policy_loss(logp, old, sampled, adv, mask, ids, lp, lam=1.05, beta=0.1)
    rho = torch.where(adv[:, None] < 0, torch.full_like(old, 0.95), torch.ones_like(old))
    expected = (-adv[:, None] * rho * mask).sum() / mask.sum()
    assert_close(loss, expected)
    assert stats["r_anchor_neg"] == pytest.approx(1.0)


def test_exclusive_anchoring_sampled_slot_gets_no_pull_gradient():
    # token 2 is the reference top-1 and is sampled at t=0; at t=1 the sampled token 9 is outside.
    ref_logits = torch.tensor([[[5.0, 4, 6, 3, 2, 1, 0, -1, -2, -3, -4]] * 2], dtype=torch.float64)
    ids, lp = topk_from_logits(ref_logits, 3)  # [[2, 0, 1]] at both positions
    sampled = torch.tensor([[2, 9]])
    logp_topk = torch.log_softmax(torch.randn(1, 2, V, dtype=torch.float64), -1).gather(-1, ids)
    logp_topk.requires_grad_(True)
    r_anchor, z = virtual_anchor_ratio(logp_topk, sampled, ids, lp, gathered=True)
    r_anchor.sum().backward()
    g = logp_topk.grad[0]
    assert g[0, 0] == 0 and (g[0, 1:] != 0).all()  # |S| = K − 1, y_t excluded
    assert (g[1] != 0).all()  # |S| = K
    q = torch.softmax(ref_logits[0, 0], -1)
    assert_close(z[0], torch.stack([q[[0, 1]].sum(), q[[2, 0, 1]].sum()]))


def test_gradient_matches_finite_differences():
    logits, _, sampled, old_logp, ids, lp, adv, mask = _case(4)
    for mode in ["rectified", "token_only", "none"]:

        def f(z, mode=mode):
            return apo_policy_loss(
                torch.log_softmax(z, -1), old_logp, sampled, adv, mask, ids, lp,
                lam=1.05, beta=0.4, clip_mode=mode,
            )[0]  # fmt: skip

        assert torch.autograd.gradcheck(f, (logits.clone().requires_grad_(True),), fast_mode=True)


def _single_token(seed: int):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(1, 1, 7, generator=g, dtype=torch.float64)
    ref = z + 0.5 * torch.randn(1, 1, 7, generator=g, dtype=torch.float64)
    ids, lp = topk_from_logits(ref, 4)
    return z, ids, lp


@pytest.mark.parametrize("seed", range(3))
def test_closed_form_logit_gradient_on_negatives(seed):
    # derived: ∇_z L = |A| [λ (e_y − π) − (β/Z)(π_S − M π)] on-policy, unclipped.
    z, ids, lp = _single_token(seed)
    outside = [v for v in range(7) if v not in ids[0, 0].tolist()]
    y = int(ids[0, 0, 1]) if seed % 2 else outside[0]  # inside (|S| = K−1) or outside (|S| = K)
    sampled = torch.tensor([[y]])
    a, lam, beta = -0.7, 1.05, 0.3
    zz = z.clone().requires_grad_(True)
    logp = torch.log_softmax(zz, -1)
    old = logp.detach().gather(-1, sampled[..., None]).squeeze(-1)
    loss, _ = apo_policy_loss(
        logp, old, sampled, torch.tensor([a], dtype=torch.float64), torch.ones(1, 1),
        ids, lp, lam=lam, beta=beta, clip_mode="none", dual_clip=None,
    )  # fmt: skip
    loss.backward()
    pi = torch.softmax(z[0, 0], -1)
    s = [int(k) for k in ids[0, 0] if int(k) != y]
    pi_s = torch.zeros_like(pi)
    pi_s[s] = pi[s]
    m, zref = pi[s].sum(), lp[0, 0].exp()[[i for i, k in enumerate(ids[0, 0]) if int(k) != y]].sum()
    e_y = torch.zeros_like(pi)
    e_y[y] = 1
    expected = abs(a) * (lam * (e_y - pi) - beta / zref * (pi_s - m * pi))
    assert_close(zz.grad[0, 0], expected)


def test_support_alignment_and_pull_increment():
    # derived: with λ = 1, the first-order gain of anchor mass over GRPO is
    # η|A|(β/Z)‖π_S − Mπ‖² ≥ 0, and the pull term alone moves logits by η|A|(β/Z)π_k(1−M) on S.
    z, ids, lp = _single_token(7)
    y = int(ids[0, 0, 0])
    sampled, a, beta, eta = torch.tensor([[y]]), -0.9, 0.5, 1e-4
    adv = torch.tensor([a], dtype=torch.float64)

    def step(lam, b):
        zz = z.clone().requires_grad_(True)
        logp = torch.log_softmax(zz, -1)
        old = logp.detach().gather(-1, sampled[..., None]).squeeze(-1)
        loss, _ = apo_policy_loss(
            logp, old, sampled, adv, torch.ones(1, 1), ids, lp,
            lam=lam, beta=b, clip_mode="none", dual_clip=None,
        )  # fmt: skip
        loss.backward()
        return z - eta * zz.grad

    pi = torch.softmax(z[0, 0], -1)
    s = [int(k) for k in ids[0, 0] if int(k) != y]
    m = pi[s].sum()
    zref = lp[0, 0].exp()[1:].sum()  # slots 1..K-1 form S (slot 0 is y)
    pi_s = torch.zeros_like(pi)
    pi_s[s] = pi[s]
    mass = lambda zz: torch.softmax(zz[0, 0], -1)[s].sum()  # noqa: E731
    gain = mass(step(1.0, beta)) - mass(step(1.0, 0.0))
    predicted = eta * abs(a) * beta / zref * ((pi_s - m * pi) ** 2).sum()
    assert gain > 0
    assert_close(gain, predicted, rtol=1e-3, atol=0)
    # pull term alone (λ = 0): logit increments
    dz = step(0.0, beta)[0, 0] - z[0, 0]
    inc = eta * abs(a) * beta / zref
    outside = [v for v in range(7) if v not in s]
    assert_close(dz[s], inc * pi[s] * (1 - m))
    assert_close(dz[outside], -inc * m * pi[outside])


def test_grpo_negative_step_squeezes_towards_likely_tokens():
    # the paper's squeezing argument: a GRPO step on a wrong token raises log π(k) − log π(j) whenever π(k) > π(j).
    z, ids, lp = _single_token(11)
    y = 3
    sampled, adv = torch.tensor([[y]]), torch.tensor([-1.0], dtype=torch.float64)
    zz = z.clone().requires_grad_(True)
    logp = torch.log_softmax(zz, -1)
    old = logp.detach().gather(-1, sampled[..., None]).squeeze(-1)
    grpo_clipped_loss(logp[..., :].gather(-1, sampled[..., None]).squeeze(-1), old, adv,
                      torch.ones(1, 1)).backward()  # fmt: skip
    new = torch.log_softmax(z - 0.01 * zz.grad, -1)[0, 0]
    before = torch.log_softmax(z, -1)[0, 0]
    gain = new - before
    others = [v for v in range(7) if v != y]
    for k in others:
        for j in others:
            if before[k] > before[j]:
                assert gain[k] > gain[j]


def test_k1_with_top1_sampled_has_empty_anchor_and_no_nan():
    logits = torch.randn(1, 2, V, dtype=torch.float64)
    ids, lp = topk_from_logits(logits, 1)
    sampled = ids[..., 0]
    logp = torch.log_softmax(logits, -1)
    old = logp.gather(-1, sampled[..., None]).squeeze(-1)
    r_anchor, z = virtual_anchor_ratio(logp, sampled, ids, lp)
    assert torch.equal(r_anchor, torch.zeros_like(r_anchor)) and torch.equal(z, torch.zeros_like(z))
    adv, mask = torch.tensor([-1.0], dtype=torch.float64), torch.ones(1, 2)
    loss, _ = apo_policy_loss(logp, old, sampled, adv, mask, ids, lp, lam=1.05, beta=0.5)
    assert_close(loss, torch.tensor(1.05, dtype=torch.float64))  # |A|·λ·r with r = 1


def test_padding_garbage_changes_nothing():
    logits, _, sampled, old_logp, ids, lp, adv, mask = _case(5)
    logp = torch.log_softmax(logits, -1)
    base, _ = apo_policy_loss(logp, old_logp, sampled, adv, mask, ids, lp)
    pad = mask == 0
    logp2, old2, lp2 = logp.clone(), old_logp.clone(), lp.clone()
    logp2[pad] = -1e4
    old2[pad] = 1e4
    lp2[pad] = float("-inf")
    loss, _ = apo_policy_loss(logp2, old2, sampled, adv, mask, ids, lp2)
    assert torch.equal(base, loss)


def test_dual_clip_caps_negative_loss():
    logits, _, sampled, old_logp, ids, lp, _, mask = _case(6)
    logp = torch.log_softmax(logits, -1)
    old = logp.gather(-1, sampled[..., None]).squeeze(-1) - 3.0  # ratio e^3 ≈ 20 > c
    adv = -torch.ones(B, dtype=torch.float64)
    loss, stats = apo_policy_loss(logp, old, sampled, adv, mask, ids, lp, dual_clip=3.0)
    assert_close(loss, torch.tensor(3.0, dtype=torch.float64))  # every token capped at −A·c
    assert stats["dual_clip_frac"] == pytest.approx(1.0)


def test_kl_on_wrong_penalty_closed_form():
    lp_pol = torch.tensor([[-1.0, -2.0], [-0.5, -0.1]])
    lp_ref = torch.tensor([[-1.5, -2.0], [-0.2, -3.0]])
    pen = kl_on_wrong_penalty(lp_pol, lp_ref, torch.tensor([-1.0, 2.0]), torch.ones(2, 2), 0.1)
    d = torch.tensor([-0.5, 0.0])
    assert_close(pen[0], 0.1 * (d.exp() - d - 1))
    assert torch.equal(pen[1], torch.zeros(2))  # positive advantage: no penalty
    assert (pen >= 0).all()


def test_safe_manifold_mass_equals_brute_force():
    logits, ref_logits, _, _, ids, _, _, mask = _case(8)
    logp = torch.log_softmax(logits, -1)
    got = safe_manifold_mass(logp, ids, mask)
    p = logp.exp()
    per = torch.stack([torch.stack([p[b, t, ids[b, t]].sum() for t in range(T)]) for b in range(B)])
    assert_close(got, (per * mask).sum() / mask.sum())


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lam": -0.1}, "lam"),
        ({"beta": -1.0}, "beta"),
        ({"clip_mode": "sometimes"}, "clip_mode"),
        ({"anchor_form": "quadratic"}, "anchor_form"),
        ({"agg": "sum"}, "agg"),
        ({"dual_clip": 0.5}, "dual_clip"),
    ],
)
def test_bad_hyper_parameters_raise(kwargs, match):
    logits, _, sampled, old_logp, ids, lp, adv, mask = _case()
    with pytest.raises(ValueError, match=match):
        apo_policy_loss(
            torch.log_softmax(logits, -1), old_logp, sampled, adv, mask, ids, lp, **kwargs
        )


def test_bad_tensors_raise():
    logits, _, sampled, old_logp, ids, lp, adv, mask = _case()
    logp = torch.log_softmax(logits, -1)
    with pytest.raises(ValueError, match="topk_ids"):
        apo_policy_loss(logp, old_logp, sampled, adv, mask, ids[:, :-1], lp[:, :-1])
    with pytest.raises(ValueError, match="vocabulary"):
        apo_policy_loss(logp, old_logp, sampled, adv, mask, ids + V, lp)
    with pytest.raises(ValueError, match="advantages"):
        apo_policy_loss(logp, old_logp, sampled, adv * float("nan"), mask, ids, lp)
    with pytest.raises(ValueError, match="advantages"):
        apo_policy_loss(logp, old_logp, sampled, adv[:2], mask, ids, lp)
    with pytest.raises(ValueError, match="old_logp"):
        apo_policy_loss(logp, old_logp.fill_(float("nan")), sampled, adv, mask, ids, lp)
    with pytest.raises(TypeError, match="topk_ids"):
        apo_policy_loss(logp, logp[..., 0], sampled, adv, mask, ids.double(), lp)
    with pytest.raises(ValueError, match="K="):
        full_ids, full_lp = torch.arange(V).expand(B, T, V), torch.zeros(B, T, V)
        apo_policy_loss(logp, logp[..., 0], sampled, adv, mask, full_ids, full_lp)
    with pytest.raises(ValueError, match="k must be"):
        topk_from_logits(logits, V)


def test_beta_above_lambda_warns(caplog):
    logits, _, sampled, old_logp, ids, lp, adv, mask = _case()
    with caplog.at_level("WARNING", logger="methods.apo.loss"):
        apo_policy_loss(torch.log_softmax(logits, -1), old_logp, sampled, adv, mask, ids, lp,
                        lam=0.5, beta=1.0)  # fmt: skip
    assert "beta" in caplog.text


# ---------------------------------------------------------------- reference Top-K on a tiny LM
@pytest.fixture(scope="module")
def tiny_lm():
    from common.tiny import tiny_causal_lm

    model, tok = tiny_causal_lm(seed=0)
    return model, tok


def test_reference_topk_chunked_equals_unchunked_and_brute_force(tiny_lm):
    model, _ = tiny_lm
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, model.config.vocab_size, (3, 12), generator=g)
    am = torch.ones_like(ids)
    am[0, :3] = 0  # left-padded prompt
    am[1, -2:] = 0  # right-padded completion
    t = 6
    a_ids, a_lp = reference_topk(model, ids, am, t, k=5, chunk_size=1000)
    b_ids, b_lp = reference_topk(model, ids, am, t, k=5, chunk_size=2, batch_size=1)
    assert a_ids.shape == (3, t, 5) and a_lp.dtype == torch.float32
    assert torch.equal(a_ids, b_ids)
    assert_close(a_lp, b_lp)
    full = torch.log_softmax(model(input_ids=ids, attention_mask=am).logits.float(), -1)
    full = full[:, -t - 1 : -1]  # positions predicting the completion
    assert_close(a_lp[0], full[0].topk(5, -1).values)
    assert torch.isneginf(a_lp[1, -2:]).all() and (a_ids[1, -2:] == 0).all()
    with pytest.raises(ValueError, match="expected_vocab_size"):
        reference_topk(model, ids, am, t, k=5, expected_vocab_size=model.config.vocab_size + 1)
    with pytest.raises(ValueError, match="logits_to_keep"):
        reference_topk(model, ids, am, 12)


def test_topk_coverage_monotone_and_full_at_vocab(tiny_lm):
    model, _ = tiny_lm
    torch.manual_seed(0)
    # sequences sampled from the model itself: the reference is the data-generating distribution
    start = torch.full((4, 1), 7)
    with torch.no_grad():
        seqs = model.generate(start, max_new_tokens=10, do_sample=True, pad_token_id=0)
    v = model.config.vocab_size
    cov = topk_coverage(model, seqs.tolist(), ks=(1, 4, 32, v))
    vals = [cov[k] for k in (1, 4, 32, v)]
    assert vals == sorted(vals) and cov[v] == 1.0
    assert cov[32] > 32 / v  # better than chance: the sampler is the model


# ---------------------------------------------------------------- trainer on a tiny Qwen2
def _distinct_chars(completions, **kwargs):
    """Text-dependent reward with spread inside a group (so that negatives exist)."""
    return [len(set(c if isinstance(c, str) else c[0]["content"])) / 10.0 for c in completions]


def _apo_trainer(tiny_lm, tmp_path, steps=2, trainer_cls=None, peft_config=None, **apo):
    import copy

    from common.rl import cpu_grpo_kwargs
    from common.tasks import make_arithmetic_dataset
    from common.tasks.arithmetic import arithmetic_reward
    from methods.apo import APOConfig, APOTrainer

    model, tok = tiny_lm
    kw = cpu_grpo_kwargs(output_dir=str(tmp_path), max_steps=steps, per_device_train_batch_size=8)
    kw.update(apo)
    cls = trainer_cls or APOTrainer
    args = (APOConfig if cls is APOTrainer else __import__("trl").GRPOConfig)(**kw)
    trainer = cls(
        model=copy.deepcopy(model),
        reward_funcs=[arithmetic_reward, _distinct_chars],
        args=args,
        train_dataset=make_arithmetic_dataset(8, seed=0),
        processing_class=tok,
        **({"peft_config": peft_config} if peft_config is not None else {}),
    )
    return trainer


def test_apo_trainer_smoke_logs_anchor_ratio_and_safe_mass(tiny_lm, tmp_path):
    torch.manual_seed(0)
    trainer = _apo_trainer(tiny_lm, tmp_path, steps=2)
    before = {k: v.clone() for k, v in trainer.model.named_parameters()}
    out = trainer.train()
    assert torch.isfinite(torch.tensor(out.training_loss))
    logs = [h for h in trainer.state.log_history if "apo/safe_manifold_mass" in h]
    assert len(logs) == 2
    # step 0 is on-policy with π_θ = π_ref: the anchor ratio is exactly 1 up to fp32 rounding
    assert logs[0]["apo/r_anchor_neg"] == pytest.approx(1.0, abs=1e-4)
    assert 0 < logs[0]["apo/safe_manifold_mass"] <= 1 + 1e-6
    assert logs[0]["apo/frac_neg_tokens"] > 0
    moved = [k for k, v in trainer.model.named_parameters() if not torch.equal(v, before[k])]
    assert moved
    # the reference stays frozen at the initial policy
    ref = trainer._apo_ref
    assert all(torch.equal(p, before[n]) for n, p in ref.named_parameters() if n in before)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_apo_trainer_identity_matches_trl_grpo(tiny_lm, tmp_path, loss_type):
    # λ = 1, β = 0, no dual clip: one step equals TRL's own GRPO step for TRL's loss_type
    # (the per-token APO loss is reduced by common.rl.reduce_token_loss).
    # Plain SGD, so that fp32 noise in near-zero gradients is not amplified to ±lr as by Adam.
    from trl import GRPOTrainer

    params = []
    for cls, extra in [
        (None, {"apo_lambda": 1.0, "apo_beta": 0.0, "apo_dual_clip": None}),
        (GRPOTrainer, {}),
    ]:  # fmt: skip
        torch.manual_seed(0)
        extra = {**extra, "optim": "sgd", "learning_rate": 0.1, "loss_type": loss_type}
        tr = _apo_trainer(tiny_lm, tmp_path / str(cls), steps=1, trainer_cls=cls, **extra)
        tr.train()
        params.append({k: v.detach().clone() for k, v in tr.model.named_parameters()})
    for k in params[0]:
        assert_close(params[0][k], params[1][k], atol=1e-6, rtol=1e-5)


def test_apo_config_rejects_bad_values(tmp_path):
    from common.rl import cpu_grpo_kwargs
    from methods.apo import APOConfig

    for bad, match in [({"apo_k": 0}, "apo_k"), ({"apo_beta": -1.0}, "apo_beta"),
                       ({"apo_clip_mode": "x"}, "apo_clip_mode")]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            APOConfig(**cpu_grpo_kwargs(output_dir=str(tmp_path), **bad))


# ---------------------------------------------------------------- run.py: toy and paper code paths
def test_bandit_toy_shows_collapse_and_identity_arm(tmp_path):
    from methods.apo.toy import BanditArm, BanditConfig, base_metrics, make_bandit, run_bandit_arm

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threading only adds overhead
    try:
        cfg = BanditConfig(steps=40, eval_every=40)
        prob = make_bandit(cfg, seed=0)
        assert (
            prob.valid[prob.hard].sum(-1).eq(1).all() and prob.valid[~prob.hard].sum(-1).eq(2).all()
        )
        base = base_metrics(prob, cfg)
        grpo, _ = run_bandit_arm(prob, cfg, BanditArm("grpo"), seed=0)
        # RSC: sharpening raises easy Pass@1 and lowers hard Pass@64 (the paper's exploration collapse)
        assert (
            grpo["easy/pass@1"] > base["easy/pass@1"]
            and grpo["hard/pass@64"] < base["hard/pass@64"]
        )
        # APO with λ = 1, β = 0 is GRPO exactly (same sampling stream)
        same, _ = run_bandit_arm(prob, cfg, BanditArm("apo0", lam=1.0, beta=0.0, k=8), seed=0)
        assert same == grpo
    finally:
        torch.set_num_threads(threads)


def test_demo_run_writes_results_with_headline(tmp_path):
    from common.registry import compose, run_method
    from methods.apo.run import DEMO_OVERRIDES, HEADLINE

    cfg = compose(["experiment=apo_toy", *DEMO_OVERRIDES, "method.toy.steps=10"], tmp_path)
    out = run_method(cfg)
    assert all(isinstance(v, float) for v in out.values())
    assert set(HEADLINE) <= set(out)
    assert (tmp_path / "results.json").exists() and (tmp_path / "curves.png").exists()


def test_run_config_schema_checks_at_compose():
    """A wrong type, a misspelt key and bad values are rejected when the config is composed."""
    from common.registry import compose

    cfg = compose(["experiment=apo_toy"])
    assert cfg.method.apo_arm.lam == 1.05 and cfg.method.stage == "toy"
    assert [a.name for a in cfg.method.extra_arms][0] == "apo_anchor_old"
    with pytest.raises(Exception, match="lam"):
        compose(["experiment=apo_toy", "method.apo_arm.lam=abc"])
    with pytest.raises(Exception, match="lamda"):
        compose(["experiment=apo_toy", "method.apo_arm.lamda=1.0"])
    with pytest.raises(ValueError, match="anchor_ratio_to"):
        compose(["experiment=apo_toy", "method.apo_arm.anchor_ratio_to=behaviour"])
    with pytest.raises(ValueError, match="arms"):
        compose(["experiment=apo_paper", "method.arms=[ppo]"])
    with pytest.raises(Exception, match="apo_lamda"):
        compose(["experiment=apo_paper", "+method.trainer.apo_lamda=1.0"])


def test_config_name_tuples_match_the_library():
    from methods.apo import ANCHOR_FORMS, ANCHOR_RATIO_TO, CLIP_MODES
    from methods.apo.config import ANCHOR_FORM_NAMES, ANCHOR_RATIO_NAMES, CLIP_MODE_NAMES

    assert tuple(ANCHOR_FORMS) == ANCHOR_FORM_NAMES
    assert ANCHOR_RATIO_TO == ANCHOR_RATIO_NAMES and CLIP_MODES == CLIP_MODE_NAMES


def test_arm_overrides_turn_the_apo_node_into_each_baseline():
    from methods.apo.paper import arm_overrides

    node = {"apo_lambda": 1.05, "apo_beta": 0.1, "learning_rate": 1e-6}
    assert arm_overrides("apo", node, 0.01) == node
    grpo = arm_overrides("grpo", node, 0.01)
    assert grpo["apo_lambda"] == 1.0 and grpo["apo_beta"] == 0.0 and grpo["learning_rate"] == 1e-6
    assert arm_overrides("grpo_kl", node, 0.01)["apo_kl_coef"] == 0.01
    assert arm_overrides("kl_on_wrong", node, 0.01)["apo_kl_on_wrong"] == 0.01
    with pytest.raises(ValueError, match="arm"):
        arm_overrides("ppo", node, 0.01)


_MATH = "{repo}/common/tasks/fixtures/math500_mini.jsonl"
_SETS = ("aime24", "aime25", "amc23", "math500", "minerva")
_MODEL = ["model.path={tiny_qwen2}", "model.dtype=float32"]
_EVAL = [
    *(f"benchmark.sets.{s}.path={_MATH}" for s in _SETS),
    *(f"benchmark.sets.{s}.limit=1" for s in _SETS),
    "method.eval.n=2",
    "method.eval.max_new_tokens=4",
]
_TRAIN = [
    f"method.train_data.path={_MATH}",
    "method.train_data.limit=4",
    "method.trainer.max_steps=1",
    "method.trainer.per_device_train_batch_size=4",
    "method.trainer.gradient_accumulation_steps=1",
    "+method.trainer.num_generations=2",
    "method.trainer.max_completion_length=4",
    "method.trainer.use_vllm=false",
    "method.trainer.bf16=false",
]
PAPER_SMOKE = {
    "paper": [*_MODEL, *_TRAIN, *_EVAL],
    "train": [*_MODEL, *_TRAIN],
    "eval": [*_MODEL, *_EVAL],
}


def test_apo_trainer_peft_uses_disabled_adapter_as_reference(tiny_lm, tmp_path):
    from peft import LoraConfig

    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = _apo_trainer(tiny_lm, tmp_path, steps=1, peft_config=lora)
    assert trainer._apo_ref is None  # no second copy: the adapter is switched off instead
    trainer.train()
    logs = [h for h in trainer.state.log_history if "apo/r_anchor_neg" in h]
    # LoRA B starts at zero, so step 0 is on-reference: r_anchor = 1
    assert logs[0]["apo/r_anchor_neg"] == pytest.approx(1.0, abs=1e-4)


# ---------------------------------------------------------------- issue 27: anchor ratio to π_old
def test_anchor_ratio_to_old_is_one_on_policy_with_the_ref_xent_gradient():
    """On-policy the 'old' ratio is 1 and its gradient is Σ ω̂ ∇log π_θ (= ref_xent's); the
    'ref' ratio has a different value and gradient once π_θ ≠ π_ref."""
    logits, _, sampled, _, ids, lp, adv, mask = _case(off_policy=False)
    grads, r_neg = {}, {}
    for name, kw in {
        "ref": {"anchor_ratio_to": "ref"},
        "old": {"anchor_ratio_to": "old"},
        "ref_xent": {"anchor_form": "ref_xent"},
    }.items():
        z = logits.clone().requires_grad_(True)
        logp = torch.log_softmax(z, -1)
        old = logp.detach().gather(-1, sampled[..., None]).squeeze(-1)
        loss, stats = apo_policy_loss(
            logp, old, sampled, adv, mask, ids, lp, lam=1.05, beta=0.5, clip_mode="none",
            dual_clip=None, **kw,
        )  # fmt: skip
        loss.backward()
        grads[name], r_neg[name] = z.grad, stats["r_anchor_neg"]
    assert r_neg["old"] == pytest.approx(1.0, abs=1e-12)
    assert abs(r_neg["ref"] - 1.0) > 1e-3  # π_θ ≠ π_ref in this case
    assert_close(grads["old"], grads["ref_xent"])
    assert not torch.allclose(grads["old"], grads["ref"], atol=1e-4)


def test_anchor_ratio_to_old_uses_given_old_topk_logps():
    logits, _, sampled, old_logp, ids, lp, adv, mask = _case()
    logp = torch.log_softmax(logits, -1)
    old_topk = logp.gather(-1, ids) + 0.2  # π_old differs from π_θ at the Top-K ids
    _, stats = apo_policy_loss(
        logp, old_logp, sampled, adv, mask, ids, lp, anchor_ratio_to="old", topk_logp_old=old_topk
    )
    # r = Σ ω̂ exp(logπ_θ − logπ_old) = exp(−0.2) exactly, for every token
    assert stats["r_anchor_neg"] == pytest.approx(math.exp(-0.2), rel=1e-9)
    with pytest.raises(ValueError, match="anchor_ratio_to"):
        apo_policy_loss(logp, old_logp, sampled, adv, mask, ids, lp, anchor_ratio_to="pi_old")
    with pytest.raises(ValueError, match="ref_xent"):
        apo_policy_loss(
            logp, old_logp, sampled, adv, mask, ids, lp, anchor_ratio_to="old",
            anchor_form="ref_xent",
        )  # fmt: skip
    with pytest.raises(ValueError, match="topk_logp_old"):
        apo_policy_loss(
            logp, old_logp, sampled, adv, mask, ids, lp, anchor_ratio_to="old",
            topk_logp_old=old_topk[..., :2],
        )  # fmt: skip


def test_apo_config_anchor_ratio_to_validation(tmp_path):
    from common.rl import cpu_grpo_kwargs
    from methods.apo import APOConfig

    kw = cpu_grpo_kwargs(output_dir=str(tmp_path))
    assert APOConfig(**kw).apo_anchor_ratio_to == "ref"
    for bad, match in [
        ({"apo_anchor_ratio_to": "behaviour"}, "apo_anchor_ratio_to"),
        ({"apo_anchor_ratio_to": "old", "apo_anchor_form": "ref_xent"}, "ref_xent"),
        ({"apo_anchor_ratio_to": "old", "num_iterations": 2}, "num_iterations"),
    ]:
        with pytest.raises(ValueError, match=match):
            APOConfig(**{**kw, **bad})


# ---------------------------------------------------------------- issue 26: TRL's loss reduction
def _loss_batch(tiny_lm, b=8, p=3, t=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    vocab = tiny_lm[0].config.vocab_size
    lengths = torch.tensor([5, 2, 4, 1, 5, 3, 5, 2])[:b]
    return {
        "prompt_ids": torch.randint(3, vocab, (b, p), generator=g),
        "prompt_mask": torch.ones(b, p, dtype=torch.long),
        "completion_ids": torch.randint(3, vocab, (b, t), generator=g),
        "completion_mask": (torch.arange(t)[None] < lengths[:, None]).long(),
        "advantages": torch.randn(b, generator=g),
        "num_items_in_batch": lengths.sum() * 2,
    }


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo", "luspo"])
def test_apo_trainer_reduces_like_trl_loss_type_with_vllm_correction(tiny_lm, tmp_path, loss_type):
    """APOTrainer.policy_loss == reduce_token_loss(apo_per_token_loss) in train and eval mode; the
    vLLM importance-sampling ratio multiplies the per-token loss (the old loss dropped it)."""
    from common.rl import reduce_token_loss
    from methods.apo import apo_per_token_loss

    tr = _apo_trainer(
        tiny_lm, tmp_path, loss_type=loss_type, gradient_accumulation_steps=2,
        per_device_train_batch_size=4, apo_kl_on_wrong=0.05,
    )  # fmt: skip
    tr.current_gradient_accumulation_steps = 2
    batch = _loss_batch(tiny_lm)
    ratio = 0.5 + torch.rand(8, 5, generator=torch.Generator().manual_seed(1))
    for mode in ("train", "eval"):
        tr.model.train(mode == "train")
        tr.use_vllm = False
        plain = tr.policy_loss(tr.model, dict(batch))
        tr.use_vllm, tr.vllm_importance_sampling_correction = True, True
        corrected = tr.policy_loss(tr.model, {**batch, "importance_sampling_ratio": ratio})
        # expected, from the pieces
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        am = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        with torch.no_grad():
            topk_ids, topk_lp, ref_lp = tr.apo_reference(ids, am, batch["completion_ids"])
            logits = tr.model(input_ids=ids, attention_mask=am, logits_to_keep=6).logits[:, :-1]
            logp = torch.log_softmax(logits.float(), -1)
            lp_s = logp.gather(-1, batch["completion_ids"][..., None]).squeeze(-1)
            per_token, _ = apo_per_token_loss(
                logp, lp_s, batch["completion_ids"], batch["advantages"],
                batch["completion_mask"], topk_ids, topk_lp,
            )  # fmt: skip
            from methods.apo import kl_on_wrong_penalty

            kl = kl_on_wrong_penalty(
                lp_s, ref_lp, batch["advantages"], batch["completion_mask"], 0.05
            )
        kw = dict(
            mode=mode, max_completion_length=tr.max_completion_length,
            num_items_in_batch=batch["num_items_in_batch"],
            gradient_accumulation_steps=2 if mode == "train" else 1,
            steps_per_generation=tr.args.steps_per_generation, per_token_kl=kl, beta=1.0,
        )  # fmt: skip
        expected = reduce_token_loss(per_token, batch["completion_mask"], loss_type, **kw)
        expected_is = reduce_token_loss(
            per_token, batch["completion_mask"], loss_type, importance_sampling_ratio=ratio, **kw
        )
        assert_close(plain.detach(), expected, rtol=1e-5, atol=1e-7)
        assert_close(corrected.detach(), expected_is, rtol=1e-5, atol=1e-7)
        assert not torch.allclose(expected, expected_is)


def test_apo_trainer_rejects_loss_types_it_does_not_implement(tiny_lm, tmp_path):
    with pytest.raises(ValueError, match="loss_type='sapo'"):
        _apo_trainer(tiny_lm, tmp_path, loss_type="sapo")
