"""The knobs of APO's toy diagnosis (docs/methods/apo.md, "Diagnosis"): ``hard_rank_band``,
``BanditArm.kl_coef``, ``grad_probe`` and the paired statistics of ``methods.apo.diagnose``."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from common.threads import torch_threads
from methods.apo.config import HARD_RANK_BANDS, BanditArm, BanditConfig
from methods.apo.probe import PROBE_KEYS, probe_step
from methods.apo.toy import arm_loss, base_metrics, make_bandit, run_bandit_arm


def _ref_rank_of_hard_action(prob) -> torch.Tensor:
    order = prob.ref_logp.argsort(dim=-1, descending=True)  # [P, A]
    ranks = order.argsort(dim=-1)  # [P, A] rank of each action
    return ranks[prob.hard][prob.valid[prob.hard]]  # one valid action per hard prompt


@pytest.mark.parametrize("band", list(HARD_RANK_BANDS))
def test_hard_rank_band_places_the_hard_action_and_leaves_easy_prompts(band):
    base = make_bandit(BanditConfig(), seed=3)  # default band "current"
    prob = make_bandit(BanditConfig(hard_rank_band=band), seed=3)
    lo, hi = HARD_RANK_BANDS[band]
    ranks = _ref_rank_of_hard_action(prob)
    assert ranks.min() >= lo and ranks.max() < hi
    # the knob moves only the hard prompts' valid action: same instance, same easy valid sets
    assert torch.equal(prob.hard, base.hard) and torch.equal(prob.ref_logp, base.ref_logp)
    assert torch.equal(prob.valid[~prob.hard], base.valid[~base.hard])


def test_hard_rank_band_orders_the_reference_hard_pass_rate():
    cfg = {b: BanditConfig(hard_rank_band=b) for b in HARD_RANK_BANDS}
    p1 = {b: base_metrics(make_bandit(c, seed=0), c)["hard/pass@1"] for b, c in cfg.items()}
    assert p1["top"] > p1["current"] > p1["rare"]
    with pytest.raises(ValueError, match="hard_rank_band"):
        BanditConfig(hard_rank_band="middle")


def _batch(prob, cfg, k=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs = torch.randperm(cfg.n_prompts, generator=g)[: cfg.prompts_per_step]
    acts = torch.multinomial(prob.ref_logp[xs].exp(), cfg.group_size, True, generator=g)
    top_lp, top_ids = prob.ref_logp.topk(k, dim=-1)
    return xs, acts, top_ids, top_lp


def test_arm_kl_coef_overrides_the_toy_coefficient():
    cfg = BanditConfig(kl_coef=0.05)
    prob = make_bandit(cfg, seed=0)
    # the KL of π_ref to itself is 0: move the policy first
    logits = prob.logits(prob.s0, prob.w0) + torch.randn(cfg.n_prompts, cfg.n_actions).double()
    batch = _batch(prob, cfg)
    _, kl_default, _ = arm_loss(prob, cfg, BanditArm("kl", kl="all"), logits, batch)
    _, kl_same, _ = arm_loss(prob, cfg, BanditArm("kl", kl="all", kl_coef=0.05), logits, batch)
    _, kl_big, _ = arm_loss(prob, cfg, BanditArm("kl", kl="all", kl_coef=1.0), logits, batch)
    assert kl_default > 0 and torch.equal(kl_default, kl_same)
    torch.testing.assert_close(kl_big, kl_default * 20)  # linear in the coefficient
    with pytest.raises(ValueError, match="kl_coef"):
        BanditArm("kl", kl="all", kl_coef=-1.0)


@pytest.mark.parametrize("to", ["ref", "old"])
def test_detach_anchor_keeps_the_loss_value_and_drops_only_the_pull(to):
    cfg = BanditConfig()
    prob = make_bandit(cfg, seed=1)
    logits = prob.logits(prob.s0, prob.w0).detach().requires_grad_(True)
    batch = _batch(prob, cfg)
    apo = BanditArm("apo", lam=1.05, beta=0.1, anchor_ratio_to=to)
    full, _, _ = arm_loss(prob, cfg, apo, logits, batch)
    cut, _, _ = arm_loss(prob, cfg, apo, logits, batch, detach_anchor=True)
    grpo, _, _ = arm_loss(prob, cfg, BanditArm("g", lam=1.05, beta=0.0), logits, batch)
    torch.testing.assert_close(full, cut)  # same values, so the same clipping
    (g_full,) = torch.autograd.grad(full, logits)
    (g_cut,) = torch.autograd.grad(cut, logits)
    (g_grpo,) = torch.autograd.grad(grpo, logits)
    # without the pull only the λ push remains: the β = 0 arm's gradient (no clip hit at π_ref)
    torch.testing.assert_close(g_cut, g_grpo)
    assert (g_full - g_cut).abs().sum() > 1e-6


def test_grad_probe_changes_no_trained_number_and_splits_the_update():
    cfg = BanditConfig(steps=30, eval_every=10)
    prob = make_bandit(cfg, seed=2)
    apo = BanditArm("apo", lam=1.05, beta=0.5, clip_mode="token_only", anchor_ratio_to="old")
    with torch_threads(1):
        plain, _ = run_bandit_arm(prob, cfg, apo, seed=2)
        probed, curve = run_bandit_arm(prob, dataclasses.replace(cfg, grad_probe=True), apo, 2)
        grpo, g_curve = run_bandit_arm(
            prob, dataclasses.replace(cfg, grad_probe=True), BanditArm("grpo"), 2
        )
    assert {k: probed[k] for k in plain} == plain
    assert set(PROBE_KEYS) <= set(curve[-1])
    assert g_curve[-1]["probe/drift_anchor"] == 0.0 and g_curve[-1]["probe/anchor_logit_share"] == 0
    assert any(abs(r.get("probe/drift_anchor", 0.0)) > 0 for r in curve)


def test_probe_parts_sum_to_the_whole_update():
    cfg = BanditConfig(lr=0.3)
    prob = make_bandit(cfg, seed=4)
    s = prob.s0.clone().requires_grad_(True)
    w = prob.w0.clone().requires_grad_(True)
    arm = BanditArm("mix", lam=1.05, beta=0.3, clip_mode="token_only", kl="all", kl_coef=0.5)
    with torch.no_grad():  # move off π_ref so the KL has a gradient
        w += 0.3 * torch.randn_like(w)
    batch = _batch(prob, cfg, seed=5)
    out = probe_step(prob, cfg, arm, s, w, batch)
    apo, kl, _ = arm_loss(prob, cfg, arm, prob.logits(s, w), batch)
    gs, gw = torch.autograd.grad(apo + kl, [s, w])
    logp = torch.log_softmax(prob.logits(s, w), -1)
    j = torch.logsumexp(logp.masked_fill(~prob.valid, -math.inf), -1)[prob.hard].mean()
    js, jw = torch.autograd.grad(j, [s, w])
    whole = float(-cfg.lr * ((gs * js).sum() + (gw * jw).sum()))
    parts = out["probe/drift_pg"] + out["probe/drift_anchor"] + out["probe/drift_kl"]
    assert parts == pytest.approx(whole, rel=1e-9, abs=1e-12)
    assert out["probe/drift_anchor"] != 0 and out["probe/drift_kl"] != 0
    assert 0 < out["probe/anchor_logit_share"] < 1 and 0 < out["probe/kl_logit_share"] < 1


def test_paired_rows_hand_worked():
    from methods.apo.diagnose import paired_rows

    raw = {
        "rare": {
            "grpo": {"hard/pass@64": [0.1, 0.2, 0.3], "easy/pass@1": [0.5, 0.5, 0.5]},
            "x": {"hard/pass@64": [0.2, 0.4, 0.3], "easy/pass@1": [0.5, 0.6, 0.7]},
        }
    }
    row = next(r for r in paired_rows(raw) if r["arm"] == "x")
    # differences 0.1, 0.2, 0.0: mean 0.1, sd 0.1, t_{0.975, 2} = 4.3027 → half-width 0.2484
    assert row["hard/pass@64/delta"] == pytest.approx(0.1)
    assert row["hard/pass@64/ci95"] == pytest.approx(4.302653 * 0.1 / math.sqrt(3), rel=1e-5)
    assert row["easy/pass@1/delta"] == pytest.approx(0.1) and row["seeds"] == 3


def test_diagnose_cli_writes_paired_results(tmp_path):
    from methods.apo.diagnose import DIAGNOSIS_ARMS, main

    out = main(["--seeds", "0", "1", "--bands", "rare", "--steps", "10", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "results.json").read_text())
    assert {r["arm"] for r in data["rows"]} == {"base", *DIAGNOSIS_ARMS}
    assert all(r["band"] == "rare" and r["seeds"] == 2 for r in out["rows"])
    assert (tmp_path / "frontier.png").stat().st_size > 0
    assert "Δ vs grpo [95% CI]" in (tmp_path / "results.md").read_text()


def test_diagnose_cli_arm_subset_pairs_against_the_named_baseline(tmp_path):
    from methods.apo.diagnose import main

    args = ["--seeds", "0", "1", "--bands", "current", "--steps", "10", "--kl-coefs", "0.3"]
    out = main([*args, "--arms", "grpo_kl0.3", "apo_old_b0.1", "--baseline", "grpo_kl0.3",
                "--out", str(tmp_path)])  # fmt: skip
    rows = {r["arm"]: r for r in out["rows"]}
    assert set(rows) == {"base", "grpo_kl0.3", "apo_old_b0.1"}
    assert rows["grpo_kl0.3"]["hard/pass@64/delta"] == 0.0
    assert "Δ vs grpo_kl0.3" in (tmp_path / "results.md").read_text()
    with pytest.raises(ValueError, match="--baseline"):
        main([*args, "--arms", "apo_old_b0.1", "--out", str(tmp_path)])
