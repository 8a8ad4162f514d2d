"""Tests for methods/kmkc: signals (E1–E3), decay law, profiles, regions, metrics, augmentation."""

from __future__ import annotations

import itertools
import json
import math
import random

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from common.llm import ScriptedChat
from methods.kmkc import (
    AugmentConfig,
    BehaviorProfile,
    RegionConfig,
    SampleOut,
    assign_regions,
    bin_by_uncertainty,
    build_cgke_dataset,
    build_profile,
    expected_calibration_error,
    fit_structural_decay,
    mean_token_entropy,
    parse_region_reply,
    qa_correct,
    rule_region,
    self_evaluate_region,
    self_knowledge_metrics,
    sequence_confidence,
    sequence_nll,
)


# ---------------------------------------------------------------- signals (E1–E3)
def test_sequence_nll_matches_brute_force_and_ignores_padding():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=g)  # [B, T, V]
    labels = torch.randint(0, 11, (3, 5), generator=g)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    lp = torch.log_softmax(logits, -1).gather(-1, labels[..., None])[..., 0]  # [B, T]
    expect = []
    for b in range(3):
        vals = [
            -float(torch.log_softmax(logits[b, t], -1)[labels[b, t]])
            for t in range(5)
            if mask[b, t]
        ]
        expect.append(sum(vals) / len(vals))
    assert_close(sequence_nll(lp, mask), torch.tensor(expect), rtol=1e-5, atol=1e-6)
    # Padding filled with garbage (±1e4, NaN) changes nothing.
    junk = lp.clone()
    junk[~mask] = float("nan")
    junk[0, 3] = 1e4
    assert_close(sequence_nll(junk, mask), sequence_nll(lp, mask))


def test_sequence_nll_hand_case():
    # log-probs log(1/2), log(1/4): U = (ln2 + ln4)/2 = 1.5 ln2 ; c = 2^-1.5
    lp = torch.tensor([[math.log(0.5), math.log(0.25)]])
    u = sequence_nll(lp, torch.ones(1, 2, dtype=torch.bool))
    assert_close(u, torch.tensor([1.5 * math.log(2)]))
    assert_close(sequence_confidence(u), torch.tensor([2**-1.5]))


def test_sequence_confidence_monotone_and_bounds():
    u = torch.linspace(0, 5, 50)
    c = sequence_confidence(u)
    assert c[0] == 1.0
    assert (c[1:] < c[:-1]).all()
    with pytest.raises(ValueError, match="u must"):
        sequence_confidence(torch.tensor([-0.1]))


def test_mean_token_entropy_closed_forms():
    V = 7
    mask = torch.tensor([[1, 1, 0]], dtype=torch.bool)
    uniform = torch.zeros(1, 3, V)
    assert_close(mean_token_entropy(uniform, mask), torch.tensor([math.log(V)]))
    onehot = torch.full((1, 3, V), -1e4)
    onehot[..., 2] = 0.0
    assert mean_token_entropy(onehot, mask).item() < 1e-6
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 6, V, generator=g)
    m = torch.rand(4, 6, generator=g) > 0.3
    m[:, 0] = True
    ref = torch.distributions.Categorical(logits=logits).entropy()  # [B, T]
    expect = (ref * m).sum(1) / m.sum(1)
    for chunk in (1, 4, 64):
        assert_close(mean_token_entropy(logits, m, chunk_size=chunk), expect, rtol=1e-5, atol=1e-6)


def test_signal_bad_input():
    with pytest.raises(ValueError, match="mask"):
        sequence_nll(torch.zeros(2, 3), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="T >= 1"):
        sequence_nll(torch.zeros(2, 3), torch.tensor([[1, 0, 0], [0, 0, 0]], dtype=torch.bool))
    with pytest.raises(ValueError, match="logits"):
        mean_token_entropy(torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool))


# ---------------------------------------------------------------- decay law
def test_fit_structural_decay_recovers_parameters():
    x = np.linspace(0.05, 2.0, 40)
    y = 0.9 * np.exp(-3.0 * x) + 0.05
    fit = fit_structural_decay(x, y)
    assert fit.converged
    assert abs(fit.a - 0.9) < 1e-3 and abs(fit.b - 3.0) < 1e-3 and abs(fit.c - 0.05) < 1e-3
    assert fit.r2 > 0.9999 and fit.spearman == pytest.approx(-1.0)
    rng = np.random.default_rng(0)
    noisy = fit_structural_decay(x, y + rng.normal(0, 0.01, x.size))
    assert abs(noisy.a - 0.9) / 0.9 < 0.1 and abs(noisy.b - 3.0) / 3.0 < 0.1
    assert abs(noisy.c - 0.05) < 0.02


def test_fit_structural_decay_flat_data_does_not_crash():
    fit = fit_structural_decay(np.arange(5.0), np.zeros(5))
    assert math.isnan(fit.r2) or not fit.converged


def test_bin_by_uncertainty_counts_and_centroids():
    rng = np.random.default_rng(0)
    u = rng.random(103)
    acc = rng.random(103)
    x, y, counts = bin_by_uncertainty(u, acc, n_bins=10)
    assert counts.sum() == 103 and counts.max() - counts.min() <= 1
    assert (np.diff(x) > 0).all()
    # Weighted centroid mean equals the global mean.
    assert np.isclose((x * counts).sum() / 103, u.mean())
    assert np.isclose((y * counts).sum() / 103, acc.mean())
    xw, _, cw = bin_by_uncertainty(u, acc, n_bins=4, scheme="equal_width")
    assert cw.sum() == 103
    with pytest.raises(ValueError, match="n_bins"):
        bin_by_uncertainty(u[:5], acc[:5], n_bins=10)
    with pytest.raises(ValueError, match="n_bins"):
        bin_by_uncertainty(u, acc, n_bins=1)


# ---------------------------------------------------------------- profiles and regions
def _samples(answers, lps):
    return [SampleOut(text=a, token_logprobs=list(lp)) for a, lp in zip(answers, lps, strict=True)]


def test_build_profile_statistics():
    s = _samples(["Paris", "paris.", "Lyon", "Paris"], [[-0.1, -0.1], [-0.2], [-2.0], [-0.3, -0.1]])
    p = build_profile("Capital of France?", ["Paris"], s)
    assert p.correct == [True, True, False, True]
    assert p.p_hat == 0.75 and p.kappa == 0.75 and p.n_distinct == 2
    assert p.U_correct == pytest.approx((0.1 + 0.2 + 0.2) / 3)
    assert p.U_wrong == pytest.approx(2.0)
    assert p.delta_U == pytest.approx(2.0 - 0.5 / 3)


def test_build_profile_empty_and_bad_input():
    s = _samples(["Paris", "  "], [[-0.1], []])
    p = build_profile("q", ["Paris"], s)
    assert p.n_empty == 1 and p.correct == [True, False] and math.isinf(p.U[1])
    assert p.U_mean == pytest.approx(0.1)  # the empty sample is excluded
    with pytest.raises(ValueError, match="K >= 2"):
        build_profile("q", ["Paris"], s[:1])
    with pytest.raises(ValueError, match="empty"):
        build_profile("q", ["Paris"], _samples(["", " "], [[], []]))
    with pytest.raises(TypeError, match="golds"):
        build_profile("q", "Paris", s)  # a bare string, not a list
    with pytest.raises(ValueError, match="golds"):
        build_profile("q", [], s)
    with pytest.raises(ValueError, match="token_logprobs"):
        build_profile("q", ["Paris"], _samples(["Paris", "Lyon"], [[-0.1], []]))


def _profile(answers, correct, u):
    k = len(answers)
    counts = {a: answers.count(a) for a in answers}
    return BehaviorProfile(
        question="q",
        golds=["g"],
        answers=answers,
        correct=correct,
        U=u,
        p_hat=sum(correct) / k,
        kappa=max(counts.values()) / k,
        n_distinct=len(counts),
        U_mean=float(np.mean(u)),
        U_correct=float(np.mean([x for x, c in zip(u, correct) if c]))
        if any(correct)
        else math.nan,
        U_wrong=float(np.mean([x for x, c in zip(u, correct) if not c]))
        if not all(correct)
        else math.nan,
    )


def test_rule_region_spec_cases():
    cfg = RegionConfig(stable_u_max=1.0)
    assert rule_region(_profile(["g"] * 8, [True] * 8, [0.1] * 8), cfg) == "mastered"
    scattered = [f"w{i}" for i in range(8)]
    assert rule_region(_profile(scattered, [False] * 8, [3.0] * 8), cfg) == "missing"
    assert rule_region(_profile(["w"] * 8, [False] * 8, [0.2] * 8), cfg) == "confused"
    # Identical wrong answers but very uncertain: not a stable belief -> missing.
    assert rule_region(_profile(["w"] * 8, [False] * 8, [3.0] * 8), cfg) == "missing"
    # Partly correct -> confused; the threshold 0.75 itself -> mastered.
    mixed = ["g"] * 3 + ["w"] * 5
    assert rule_region(_profile(mixed, [True] * 3 + [False] * 5, [0.5] * 8), cfg) == "confused"
    six = ["g"] * 6 + ["w"] * 2
    assert rule_region(_profile(six, [True] * 6 + [False] * 2, [0.5] * 8), cfg) == "mastered"


def test_rule_region_invariant_to_sample_order():
    rng = random.Random(0)
    answers = ["g", "g", "w", "x", "w", "w"]
    correct = [a == "g" for a in answers]
    u = [0.1, 0.2, 1.0, 2.0, 0.5, 0.4]
    base = build_profile("q", ["g"], _samples(answers, [[-x] for x in u]))
    for _ in range(5):
        perm = list(range(6))
        rng.shuffle(perm)
        p = build_profile("q", ["g"], _samples([answers[i] for i in perm], [[-u[i]] for i in perm]))
        assert rule_region(p) == rule_region(base)
        assert p.p_hat == base.p_hat and p.kappa == base.kappa
    assert sum(correct) / 6 == base.p_hat


def test_self_evaluate_region_parses_and_falls_back():
    p = _profile(
        ["w"] * 4, [False] * 4, [3.0] * 4
    )  # one wrong answer but uncertain: rule says missing
    cfg = RegionConfig(stable_u_max=1.0)
    assert rule_region(p, cfg) == "missing"
    llm = ScriptedChat(['Sure. {"region": "Confused", "rationale": "stable wrong"}'])
    assert self_evaluate_region(llm, p, cfg) == ("confused", "self_eval")
    assert "Question: q" in llm.calls[0][-1]["content"]
    for bad in ["not json", '{"region": "unknown"}', "", '{"region": 3}']:
        assert self_evaluate_region(ScriptedChat([bad]), p, cfg) == ("missing", "rule")
    # A failing client also falls back.
    assert self_evaluate_region(ScriptedChat([]), p, cfg) == ("missing", "rule")
    assert parse_region_reply('{"region": "mastered"}') == "mastered"


def test_assign_regions_counts_parse_failures():
    ps = [
        _profile(["g"] * 4, [True] * 4, [0.1] * 4),
        _profile(["a", "b", "c", "d"], [False] * 4, [3.0] * 4),
        _profile(["w"] * 4, [False] * 4, [0.2] * 4),
    ]
    stats = assign_regions(ps, llm=ScriptedChat(["garbage", '{"region":"missing"}', "{bad"]))
    assert stats["parse_failures"] == 2.0
    assert [p.region_source for p in ps] == ["rule", "self_eval", "rule"]
    assert [p.region for p in ps] == ["mastered", "missing", "confused"]
    assert stats["stable_u_max"] == pytest.approx(0.2)  # median of (0.1, 3.0, 0.2)


# ---------------------------------------------------------------- metrics
def test_equal_mass_ece_closed_forms():
    rng = np.random.default_rng(0)
    conf = rng.random(200_000)
    correct = rng.random(200_000) < conf
    assert expected_calibration_error(conf, correct) < 0.01
    # Constant confidence 1 with 70% accuracy: ECE = 0.3 exactly.
    assert expected_calibration_error(np.ones(10), np.arange(10) < 7) == pytest.approx(0.3)
    # Hand case, 2 equal-mass bins: {0.1,0.2} acc 0 -> 0.15 ; {0.8,0.9} acc 1 -> 0.15 ; ECE 0.15.
    assert expected_calibration_error(
        np.array([0.9, 0.1, 0.8, 0.2]), np.array([1, 0, 1, 0]), n_bins=2
    ) == pytest.approx(0.15)
    with pytest.raises(ValueError, match="conf"):
        expected_calibration_error(np.array([1.2]), np.array([1]))
    with pytest.raises(ValueError, match="n_bins"):
        expected_calibration_error(np.array([0.5, 0.5]), np.array([1, 0]), n_bins=3)


def test_self_knowledge_metrics_hand_case():
    # TP=3, FP=1, FN=2, TN=4
    answered = np.array([1, 1, 1, 1, 0, 0, 0, 0, 0, 0], dtype=bool)
    correct = np.array([1, 1, 1, 0, 1, 1, 0, 0, 0, 0], dtype=bool)
    m = self_knowledge_metrics(answered, correct)
    assert m["AR"] == pytest.approx(3 / 4) and m["KEI"] == pytest.approx(3 / 5)
    assert m["NPV"] == pytest.approx(4 / 6) and m["CAE"] == pytest.approx(7 / 10)
    assert m["CBS"] == pytest.approx(2 * 0.75 * 0.6 / 1.35) and m["undefined"] == 0
    none = self_knowledge_metrics(np.zeros(3, bool), np.array([1, 0, 0], bool))
    assert math.isnan(none["AR"]) and none["undefined"] >= 1


def test_qa_correct_cover_and_em():
    assert qa_correct("It is The Eiffel Tower.", ["eiffel tower"])
    assert not qa_correct("Eiffel Towers", ["eiffel tower"])
    assert not qa_correct("It is the Eiffel Tower", ["eiffel tower"], mode="em")
    assert qa_correct("the eiffel tower", ["Eiffel Tower"], mode="em")


def test_all_pairs_profile_region_is_total():
    # Brute force over all 2^4 correctness patterns: the rule always returns a valid region and
    # mastered iff p_hat >= 0.75.
    for bits in itertools.product([False, True], repeat=4):
        answers = ["g" if b else f"w{i}" for i, b in enumerate(bits)]
        p = build_profile("q", ["g"], _samples(answers, [[-0.5]] * 4))
        r = rule_region(p)
        assert r in ("mastered", "confused", "missing")
        assert (r == "mastered") == (sum(bits) >= 3)


# ---------------------------------------------------------------- augmentation / CGKE dataset
def _grounded_generator(messages):
    """A scripted generator that answers every augmentation prompt in the expected JSON."""
    text = messages[-1]["content"]
    if "neighbouring" in text:
        return json.dumps(
            [{"question": "reverse of q?", "answer": "g"}, {"question": "hard q?", "answer": "h"}]
        )
    if "explanations" in text:
        return json.dumps([{"explanation": "g, not w, because X"}, {"explanation": "w is Y"}])
    if "background" in text:
        return json.dumps(
            [{"background": "q is g.", "question": "q?"}, {"background": "g.", "question": "q2?"}]
        )
    return "g"  # the consistency re-asks: always answers g


def test_build_cgke_dataset_schema_and_allocation():
    ps = [
        _profile(["g"] * 4, [True] * 4, [0.1] * 4),
        _profile(["g", "w", "w", "g"], [True, False, False, True], [0.1, 1, 1, 0.2]),
        _profile(["a", "b", "c", "d"], [False] * 4, [3.0] * 4),
    ]
    for p, r, i in zip(ps, ["mastered", "confused", "missing"], range(3)):
        p.region, p.id = r, f"q{i}"
    ds, stats = build_cgke_dataset(ps, ScriptedChat(_grounded_generator), return_stats=True)
    assert set(ds.column_names) == {"id", "region", "strategy", "messages"}
    strategies = ds["strategy"]
    assert strategies.count("original") == 3
    # Boundary expansion keeps only the item the generator re-answers consistently ("g").
    assert strategies.count("boundary_expansion") == 1
    assert strategies.count("structural_disambiguation") == 2
    assert strategies.count("epistemic_foundation") == 2
    for msgs in ds["messages"]:
        assert [m["role"] for m in msgs] == ["user", "assistant"]
        assert msgs[1]["content"].endswith("Answer: g") or msgs[1]["content"].endswith("Answer: h")
    confused = [m for m, s in zip(ds["messages"], strategies) if s == "structural_disambiguation"]
    assert "not w" in confused[0][1]["content"]
    assert stats["dropped/missing"] == 0 and stats["items/original"] == 3


def test_build_cgke_dataset_malformed_generator_counts_and_aborts():
    p = _profile(["a", "b"], [False, False], [3.0, 3.0])
    p.region = "missing"
    good = _profile(["g", "g"], [True, True], [0.1, 0.1])
    good.region = "mastered"
    llm = ScriptedChat(lambda m: "not json at all")
    cfg = AugmentConfig(max_drop_frac=1.0, consistency_checks=0)
    ds, stats = build_cgke_dataset([p, good], llm, cfg, return_stats=True)
    assert stats["dropped/missing"] == 1 and stats["dropped/mastered"] == 1
    assert len(llm.calls) == 2 * (cfg.max_retries + 1)
    assert ds["strategy"] == ["original", "original"]
    with pytest.raises(ValueError, match="max_drop_frac"):
        build_cgke_dataset([p, good], llm, AugmentConfig(max_drop_frac=0.2))
    unassigned = _profile(["g", "g"], [True, True], [0.1, 0.1])
    with pytest.raises(ValueError, match="region"):
        build_cgke_dataset([unassigned], llm)
    with pytest.raises(ValueError, match="qa_template"):
        AugmentConfig(qa_template="no placeholder")


# ---------------------------------------------------------------- toy pieces
def test_toy_world_labels_and_generator():
    from methods.kmkc.toy import FactWorld, ToyConfig, _batch, toy_generator

    cfg = ToyConfig(n_per_tier=5)
    w = FactWorld(cfg, seed=0)
    assert [f[3] for f in w.facts].count("C") == 5
    ids, labels = _batch(w, [("R0 S0", "O1"), ("R1 S1", "O2 not O3")])
    # Loss only on the answer tokens after <a> (and <eos>), never on the question or padding.
    assert labels[0].tolist()[:4] == [-100] * 4 and labels[0, 4] == w.ids["O1"]
    assert labels[0, 5] == w.ids["<eos>"] and (labels[0, 6:] == -100).all()
    assert labels[1, 4:8].tolist() == [w.ids[t] for t in ["O2", "not", "O3", "<eos>"]]
    # The grounded generator's items are all in the toy vocabulary and keep the gold answer first.
    q = w.facts[7][0]
    p = build_profile(q, [w.gold[q]], _samples([w.distractor[q], "O99"], [[-1.0], [-2.0]]))
    for region in ("mastered", "confused", "missing"):
        p.region = region
        ds = build_cgke_dataset(
            [p],
            toy_generator(w),
            AugmentConfig(qa_template="{question}", answer_template="{answer} {rationale}"),
        )
        for m in ds["messages"]:
            words = (m[0]["content"] + " " + m[1]["content"]).split()
            assert all(t in w.ids for t in words), words
            assert m[1]["content"].split()[0] == w.gold[q]


# ---------------------------------------------------------------- CDKC pieces (our proposal)
def test_cdkc_entropy_loss_signs_gate_and_sgd_step():
    from methods.kmkc import CalibrationWeights, cdkc_entropy_loss, correctness_reward

    w = CalibrationWeights(band=(0.5, 1.0))
    h = torch.tensor([0.8, 0.8, 0.8, 1.5, 0.2, 0.8])
    corr = torch.tensor([True, False, True, True, False, False])
    regions = ["mastered", "mastered", "confused", "confused", "confused", "missing"]
    # Hand: +0.01*0.8 − 0.001*0.8 + 0 (inside band) + 0.003*1.5 − 0.003*0.2 − 0.01*0.8, over 6.
    expect = (0.008 - 0.0008 + 0.0 + 0.0045 - 0.0006 - 0.008) / 6
    assert cdkc_entropy_loss(h, corr, regions, w).item() == pytest.approx(expect)
    # All λ = 0 -> exactly zero (plain GRPO).
    zero = CalibrationWeights((0, 0), (0, 0), (0, 0))
    assert cdkc_entropy_loss(h, corr, regions, zero).item() == 0.0
    # One SGD step on logits: a correct rollout's entropy falls, a wrong one's rises.
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0), requires_grad=True)
    mask = torch.ones(2, 3, dtype=torch.bool)
    before = mean_token_entropy(logits, mask).detach()
    loss = cdkc_entropy_loss(
        mean_token_entropy(logits, mask), torch.tensor([True, False]), ["mastered", "missing"]
    )
    loss.backward()
    with torch.no_grad():
        after = mean_token_entropy(logits - 50.0 * logits.grad, mask)
    assert after[0] < before[0] and after[1] > before[1]
    with pytest.raises(ValueError, match="regions"):
        cdkc_entropy_loss(h[:1], corr[:1], ["unknown"])
    assert correctness_reward(["p", "p"], ["Answer: Paris", "Lyon"], [["paris"], ["paris"]]) == [
        1.0,
        0.0,
    ]
    with pytest.raises(ValueError, match="golds"):
        correctness_reward(["p"], ["x"], [])


# ---------------------------------------------------------------- CDKC trainer (E5–E8)
def _cdkc_setup(tmp_path, steps=2, regions=True, **cfg):
    import copy

    from datasets import Dataset

    from common.rl import cpu_grpo_kwargs
    from common.tiny import tiny_causal_lm
    from methods.kmkc import CDKCConfig

    model, tok = tiny_causal_lm("qwen2", seed=0)
    rows = {"prompt": ["1+1=", "2+3=", "hello", "abc"] * 2}
    if regions:
        rows["region"] = ["mastered", "confused", "missing", "missing"] * 2

    def half_right(completions, **kw):  # a 0/1 "correctness" with spread inside each group
        return [float(len(c) % 2 == 0) for c in completions]

    cfg.setdefault("per_device_train_batch_size", 8)
    args = CDKCConfig(**cpu_grpo_kwargs(output_dir=str(tmp_path), max_steps=steps, **cfg))
    return copy.deepcopy(model), tok, half_right, args, Dataset.from_dict(rows)


def _train_cdkc(tmp_path, trainer_cls=None, **cfg):
    from methods.kmkc import CDKCTrainer

    model, tok, reward, args, ds = _cdkc_setup(tmp_path, **cfg)
    trainer = (trainer_cls or CDKCTrainer)(
        model=model, reward_funcs=reward, args=args, train_dataset=ds, processing_class=tok
    )
    trainer.train()
    return trainer, {k: v.detach().clone() for k, v in model.named_parameters()}


def test_cdkc_with_zero_weights_is_grpo_bit_for_bit(tmp_path):
    """λ = 0 (loss mode) and α = 0 (reward mode) both reproduce plain GRPO exactly (E8)."""
    from common.rl import GroupAdvantageGRPOTrainer

    torch.set_num_threads(1)
    zero = {"mastered": [0.0, 0.0], "confused": [0.0, 0.0], "missing": [0.0, 0.0]}
    _, ref = _train_cdkc(tmp_path / "ref", trainer_cls=GroupAdvantageGRPOTrainer, steps=1)
    _, loss0 = _train_cdkc(tmp_path / "l0", region_weights=zero, steps=1)
    _, rew0 = _train_cdkc(
        tmp_path / "r0",
        steps=1,
        calibration_mode="reward",
        reward_alpha={"mastered": 0.0, "confused": 0.0, "missing": 0.0},
    )
    _, rew = _train_cdkc(tmp_path / "r1", calibration_mode="reward", steps=1)
    for k in ref:
        assert torch.equal(loss0[k], ref[k]), k
        assert torch.equal(rew0[k], ref[k]), k
    assert any(not torch.equal(rew[k], ref[k]) for k in ref), "α > 0 must change the update"


@pytest.mark.parametrize("signal", ["nll", "entropy"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_cdkc_policy_loss_adds_the_signed_term(tmp_path, signal, mode):
    """On a fixed batch with zero advantages the loss is exactly (1/b) Σ λ[g, s]·s·H̄ (E7), the
    per-token term reduced by common.rl.reduce_token_loss: divided by the accumulation steps in
    training, not in evaluation (TRL's eval branch)."""
    from methods.kmkc import CDKCTrainer

    torch.set_num_threads(1)
    model, tok, reward, args, ds = _cdkc_setup(
        tmp_path, stabilize_batches=1, beta=0.0, signal=signal
    )
    trainer = CDKCTrainer(
        model=model, reward_funcs=reward, args=args, train_dataset=ds, processing_class=tok
    )
    trainer.current_gradient_accumulation_steps = 2
    g = torch.Generator().manual_seed(0)
    b, p, t = 4, 3, 5
    batch = {
        "prompt_ids": torch.randint(5, 100, (b, p), generator=g),
        "prompt_mask": torch.ones(b, p, dtype=torch.long),
        "completion_ids": torch.randint(5, 100, (b, t), generator=g),
        "completion_mask": torch.tensor([[1] * 5, [1] * 3 + [0] * 2, [1] * 5, [1] * 4 + [0]]),
        "advantages": torch.zeros(b),
        "num_items_in_batch": torch.tensor(17),
        "cdkc_correct": torch.tensor([True, False, True, False]),
        "cdkc_region": torch.tensor([0, 0, 2, 2]),  # mastered, mastered, missing, missing
    }
    model.train(mode == "train")
    loss = trainer.policy_loss(model, batch)
    with torch.no_grad():
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        logits = model(input_ids=ids).logits[:, p - 1 : -1] / trainer.temperature
        logp = torch.log_softmax(logits.float(), -1)
        if signal == "nll":
            tok_h = -logp.gather(-1, batch["completion_ids"][..., None])[..., 0]
        else:
            tok_h = -(logp.exp() * logp).sum(-1)
        m = batch["completion_mask"].float()
        h = (tok_h * m).sum(1) / m.sum(1)
    lam_sign = torch.tensor([1e-2, -1e-3, 1e-3, -1e-2])  # λ[g, s]·s, the default table
    accum = 2 if mode == "train" else 1
    expected = float((lam_sign * h).mean()) / accum
    assert loss.item() == pytest.approx(expected, rel=1e-4, abs=1e-8)
    assert trainer.band is not None  # frozen after stabilize_batches=1


def test_signal_default_follows_the_paper_figure(tmp_path):
    """The paper's method figure: confidence via entropy over the token distribution (issue 27)."""
    from methods.kmkc import CDKCConfig
    from methods.kmkc.toy import ToyConfig

    assert CDKCConfig(output_dir=str(tmp_path), use_cpu=True).signal == "entropy"
    assert ToyConfig().cdkc_signal == "entropy"


def test_cdkc_rollout_weights_follow_the_input_dtype_and_device():
    """Issue 29: the per-rollout factors are built on the signal's device, in its dtype."""
    from methods.kmkc import CalibrationWeights, cdkc_entropy_loss, cdkc_rollout_weights

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for dev in devices:
        h = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64, device=dev, requires_grad=True)
        corr = torch.tensor([True, False, True], device=dev)
        f = cdkc_rollout_weights(h, corr, ["mastered", "missing", "missing"], CalibrationWeights())
        assert f.dtype == torch.float64 and f.device == h.device
        assert f.tolist() == pytest.approx([1e-2, -1e-2, 1e-3])
        loss = cdkc_entropy_loss(h, corr, ["mastered", "missing", "missing"])
        loss.backward()
        assert h.grad.device == h.device


def test_cdkc_reward_mode_rejects_normalize_then_sum(tmp_path):
    from methods.kmkc import CDKCTrainer

    model, tok, reward, args, ds = _cdkc_setup(
        tmp_path, calibration_mode="reward", multi_objective_aggregation="normalize_then_sum"
    )
    with pytest.raises(ValueError, match="multi_objective_aggregation"):
        CDKCTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds,
                    processing_class=tok)  # fmt: skip


def test_cdkc_trainer_bad_input(tmp_path):
    from methods.kmkc import CDKCConfig

    with pytest.raises(ValueError, match="calibration_loss_type"):
        CDKCConfig(output_dir=str(tmp_path), calibration_loss_type="token_mean", use_cpu=True)
    with pytest.raises(ValueError, match="calibration_mode"):
        CDKCConfig(output_dir=str(tmp_path), calibration_mode="both", use_cpu=True)
    with pytest.raises(ValueError, match="region_weights"):
        CDKCConfig(output_dir=str(tmp_path), region_weights={"known": [1, 1]}, use_cpu=True)
    with pytest.raises(ValueError, match="region"):
        _train_cdkc(tmp_path / "noreg", regions=False, steps=1)


def test_toy_calibration_arm_runs_cdkc_on_the_word_model(tmp_path):
    """The toy's GRPO/CDKC stage: word tokenizer round-trips the prompts; one CDKC step moves θ."""
    from methods.kmkc.toy import (
        FactWorld,
        ToyConfig,
        calibrate,
        greedy_eval,
        make_model,
        word_tokenizer,
    )

    torch.set_num_threads(1)
    cfg = ToyConfig(n_per_tier=4, grpo_steps=1, grpo_generations=4, grpo_prompts_per_step=2)
    world = FactWorld(cfg, seed=0)
    tok = word_tokenizer(world)
    q = world.facts[0][0]
    assert tok(f"<q> {q} <a>")["input_ids"] == world.encode(q, "")[:4]
    model = make_model(world, cfg, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    regions = {f[0]: "missing" for f in world.facts}
    calibrate(model, world, cfg, regions, "cdkc", seed=0, out=str(tmp_path))
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    held = {f[0] for f in world.facts if f[3] == "C"}
    out = greedy_eval(model, world, held)
    assert 0.0 < out["conf_withheld"] <= 1.0 and 0.0 <= out["ece"] <= 1.0


# ---------------------------------------------------------------- paper pipeline (App. B data)
def _flashrag_fixture(root, name, split, n):
    """A few lines in the FlashRAG QA format (id, question, golden_answers, metadata)."""
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    with open(d / f"{split}.jsonl", "w") as f:
        for i in range(n):
            rec = {
                "id": f"{split}_{i}",
                "question": f"what is {i} plus {i}?",
                "golden_answers": [str(2 * i), f"{2 * i}.0"],
                "metadata": {},
            }
            f.write(json.dumps(rec) + "\n")


def test_load_qa_jsonl_sampling_and_errors(tmp_path):
    from methods.kmkc.pipeline import extract_answer, load_qa_jsonl

    _flashrag_fixture(tmp_path, "nq", "dev", 10)
    full = load_qa_jsonl(tmp_path / "nq" / "dev.jsonl")
    assert [it["id"] for it in full] == [f"dev_{i}" for i in range(10)]
    a = load_qa_jsonl(tmp_path / "nq" / "dev.jsonl", n=4, seed=3)
    b = load_qa_jsonl(tmp_path / "nq" / "dev.jsonl", n=4, seed=3)
    assert a == b and len(a) == 4 and len({it["id"] for it in a}) == 4
    (tmp_path / "bad.jsonl").write_text('{"question": "q"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        load_qa_jsonl(tmp_path / "bad.jsonl")
    with pytest.raises(FileNotFoundError):
        load_qa_jsonl(tmp_path / "missing.jsonl")
    assert extract_answer("thinking...\nAnswer: Paris\n") == "Paris"
    assert extract_answer("Paris") == "Paris"


_SETS = ("popqa", "musique", "squad", "nq", "hotpotqa", "twowiki", "beerqa",
         "web_questions", "bamboogle", "searchqa", "triviaqa")  # fmt: skip
_CPU = ["method.sft.bf16=false", "method.cdkc.bf16=false", "method.cdkc.use_vllm=false"]
_PAPER = [
    "model.path={tiny_qwen2}",
    "model.dtype=float32",
    *(
        f"method.train_sets.{s}.path={{kmkc_data}}/{s}/train.jsonl"
        for s in ("nq", "hotpotqa", "twowiki")
    ),
    *(f"method.train_sets.{s}.limit=2" for s in ("nq", "hotpotqa", "twowiki")),
    *(f"benchmark.sets.{s}.path={{kmkc_data}}/{s}/dev.jsonl" for s in _SETS),
    *(f"benchmark.sets.{s}.limit=2" for s in _SETS),
    "method.paper.engine=hf",
    "method.paper.samples=2",
    "method.paper.max_new_tokens=4",
    "method.paper.rounds=1",
    "+method.paper.augment.max_drop_frac=1.0",
    "+method.paper.augment.max_retries=0",
    *_CPU,
    "+method.sft.max_steps=1",
    "method.sft.per_device_train_batch_size=2",
    "method.sft.max_length=64",
    "+method.cdkc.max_steps=1",
    "+method.cdkc.num_generations=2",
    "+method.cdkc.per_device_train_batch_size=4",
    "method.cdkc.max_completion_length=4",
]
_FROM_PROFILES = [*_PAPER, "method.paper.profiles_path={kmkc_profiles}"]
PAPER_SMOKE = {
    "paper": _PAPER,
    "profile": _PAPER,
    "sft": _FROM_PROFILES,
    "cdkc": _FROM_PROFILES,
    "eval": _PAPER,
}


def _profile_fixture(path):
    """Three profiled questions, one per region, in the ``profile.jsonl`` layout."""
    from methods.kmkc import SampleOut, build_profile
    from methods.kmkc.pipeline import save_profiles

    profiles = []
    for i, region in enumerate(("mastered", "confused", "missing")):
        answers = [str(2 * i), "7"] if region == "confused" else [str(2 * i)] * 2
        if region == "missing":
            answers = ["9", "8"]
        samples = [SampleOut(text=a, token_logprobs=[-0.5, -0.2], answer=a) for a in answers]
        p = build_profile(f"what is {i} plus {i}?", [str(2 * i)], samples, qid=f"train_{i}")
        p.region, p.region_source = region, "fixture"
        profiles.append(p)
    save_profiles(profiles, path)
    return profiles


def paper_smoke_setup(tmp_path):
    """FlashRAG-format train/dev files for every set the kmkc_paper preset names, and a
    ``profile.jsonl`` for the sft and cdkc stages."""
    data = tmp_path / "flashrag"
    for s in ("nq", "hotpotqa", "twowiki"):
        _flashrag_fixture(data, s, "train", 3)
    for s in _SETS:
        _flashrag_fixture(data, s, "dev", 2)
    _profile_fixture(tmp_path / "profile.jsonl")
    return {"kmkc_data": str(data), "kmkc_profiles": str(tmp_path / "profile.jsonl")}


def test_profiles_round_trip_and_load_errors(tmp_path):
    from methods.kmkc.pipeline import load_profiles

    written = _profile_fixture(tmp_path / "p.jsonl")
    read = load_profiles(tmp_path / "p.jsonl")
    assert [json.dumps(p.to_dict()) for p in read] == [json.dumps(p.to_dict()) for p in written]
    assert [p.region for p in read] == ["mastered", "confused", "missing"]
    with pytest.raises(FileNotFoundError, match="stage=profile"):
        load_profiles(tmp_path / "none.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"question": "q"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        load_profiles(tmp_path / "bad.jsonl")


@pytest.mark.slow  # two paper stages end to end: make test-all
def test_sft_then_cdkc_stages_chain_through_checkpoints(tmp_path):
    """stage=sft trains on the profiles and saves a checkpoint that stage=cdkc starts from."""
    from common.registry import compose, run_method
    from common.tiny import save_tiny, tiny_causal_lm

    torch.set_num_threads(1)
    model_dir = save_tiny(*tiny_causal_lm("qwen2", seed=0), tmp_path / "tiny")
    subs = {"tiny_qwen2": str(model_dir), **paper_smoke_setup(tmp_path)}
    base = [o.format(**subs) for o in _FROM_PROFILES]
    sft = run_method(
        compose(["experiment=kmkc_paper", "method.stage=sft", *base], run_dir=str(tmp_path / "a"))
    )
    assert sft["cgke/n_profiles"] == 3.0
    ckpt = tmp_path / "a" / "paper" / "cgke" / "checkpoint"
    rows = (tmp_path / "a" / "paper" / "cgke" / "cgke.jsonl").read_text().splitlines()
    assert {json.loads(r)["region"] for r in rows} <= {"mastered", "confused", "missing"}
    from transformers import AutoModelForCausalLM

    before = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    after = AutoModelForCausalLM.from_pretrained(ckpt).state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)  # SFT moved the weights
    overrides = [o.replace(str(model_dir), str(ckpt)) for o in base]
    cdkc = run_method(
        compose(
            ["experiment=kmkc_paper", "method.stage=cdkc", *overrides], run_dir=str(tmp_path / "b")
        )
    )
    assert (cdkc["cdkc/n_mastered"], cdkc["cdkc/n_confused"], cdkc["cdkc/n_missing"]) == (1, 1, 1)
    res = json.loads((tmp_path / "b" / "results.json").read_text())
    assert res["models_loaded"][0]["spec"] == str(ckpt)
    assert (tmp_path / "b" / "paper" / "cdkc" / "checkpoint" / "config.json").is_file()


@pytest.mark.slow  # a paper stage end to end (about 5 s): make test-all
def test_paper_stage_runs_one_round_and_writes_profiles(tmp_path):
    """kmkc_paper through the registry on a saved tiny Qwen2 and FlashRAG-format fixtures."""
    from common.registry import compose, run_method
    from common.tiny import save_tiny, tiny_causal_lm

    torch.set_num_threads(1)
    model_dir = save_tiny(*tiny_causal_lm("qwen2", seed=0), tmp_path / "tiny")
    subs = {"tiny_qwen2": str(model_dir), **paper_smoke_setup(tmp_path)}
    overrides = [o.format(**subs) for o in PAPER_SMOKE["paper"]]
    for s in _SETS[:9]:  # two evaluation sets are enough here
        overrides.append(f"~benchmark.sets.{s}")
    out = run_method(compose(["experiment=kmkc_paper", *overrides], run_dir=str(tmp_path / "run")))
    for stage in ("base", "round1"):
        for name in ("searchqa", "triviaqa"):
            assert 0.0 <= out[f"{stage}/{name}/acc"] <= 1.0
            assert 0.0 < out[f"{stage}/{name}/mean_conf"] <= 1.0
    paper_dir = tmp_path / "run" / "paper"
    ids = json.loads((paper_dir / "sampled_ids.json").read_text())
    assert sorted(ids) == ["searchqa", "triviaqa"] and len(ids["triviaqa"]) == 2
    profiles = (paper_dir / "round1" / "profile.jsonl").read_text().splitlines()
    assert len(profiles) == 6  # 2 sampled items from each of the 3 seed sets
    assert all(json.loads(p)["region"] in ("mastered", "confused", "missing") for p in profiles)
    assert (paper_dir / "round1" / "cgke.jsonl").is_file()


def test_run_config_rejects_wrong_types_and_keys():
    from common.registry import compose

    assert compose(["experiment=kmkc_toy"]).method.toy.cdkc_signal == "entropy"
    with pytest.raises(Exception, match="sft_steps"):
        compose(["experiment=kmkc_toy", "method.toy.sft_steps=abc"])
    with pytest.raises(Exception, match="sft_stepz"):
        compose(["experiment=kmkc_toy", "method.toy.sft_stepz=3"])
    with pytest.raises(ValueError, match="arms"):
        compose(["experiment=kmkc_toy", "method.arms=[ppo]"])
    with pytest.raises(ValueError, match="engine"):
        compose(["experiment=kmkc_paper", "method.paper.engine=sglang"])
    with pytest.raises(Exception, match="signl"):
        compose(["experiment=kmkc_paper", "+method.cdkc.signl=nll"])
