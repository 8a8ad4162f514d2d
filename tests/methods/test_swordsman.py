"""Tests for methods/swordsman.

Official-code fixture: ``methods/swordsman/fixtures/official_thresholds.json`` holds values computed with
``get_dynamic_threshold_by_entropy`` and ``get_transfer_index`` from zy-ansel/Swordsman
(commit 27e73371ed2130dbe91116eb3b82b9a0b9d040d3, ``Swordsman.zip:llada/generate.py``), run on a grid of
entropies/γ/schedules and on fp32 logits with near-tied top-1 probabilities (how: docs/methods/swordsman.md).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.testing import assert_close

from methods.swordsman import (
    SCHEDULES,
    DreamAdapter,
    HFDiffusionAdapter,
    HFMaskedLMAdapter,
    PhraseGrammar,
    SwordsmanConfig,
    boundary_alignment,
    dynamic_threshold,
    fixed_block_generate,
    next_block_length,
    select_transfer,
    swordsman_generate,
    tiny_mdm,
    token_entropy,
    uncertainty,
    vanilla_generate,
)
from methods.swordsman.toy_world import BOS, EOS, MASK, GrammarPosteriorLM

V = 23


# ----------------------------------------------------------------------------- fixtures / helpers
@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny matmuls: one thread avoids thread-pool overhead (restored after each test)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def mdm():
    torch.manual_seed(0)
    return tiny_mdm(vocab_size=V, hidden_size=32, num_layers=1, max_positions=64, seed=0)


class OracleModel(torch.nn.Module):
    """Logits = scaled one-hot of a fixed target sequence, independent of the input."""

    def __init__(self, target: torch.Tensor, vocab: int = V, scale: float = 20.0):
        super().__init__()
        self.register_buffer("z", torch.nn.functional.one_hot(target, vocab).float()[None] * scale)

    def forward(self, input_ids, **kw):
        return SimpleNamespace(logits=self.z[:, : input_ids.shape[1]])


class CountingAdapter:
    """Wraps an adapter and counts model calls and the lengths fed to cached passes."""

    def __init__(self, inner):
        self.inner, self.calls, self.block_calls = inner, 0, []
        self.mask_id, self.eos_ids, self.supports = inner.mask_id, inner.eos_ids, inner.supports

    def forward(self, x, use_cache=False):
        self.calls += 1
        return self.inner.forward(x, use_cache=use_cache)

    def block_forward(self, x, start, end, past, cache):
        self.calls += 1
        self.block_calls.append((start, end))
        return self.inner.block_forward(x, start, end, past, cache)


class RecomputeCacheModel(torch.nn.Module):
    """Fake KV-cache model: the 'cache' is the token ids; every call recomputes exactly.

    Prefix mode feeds ``x[q:]`` after a cache of ``x[:q]``; dual mode feeds the block and a boolean
    ``replace_position``. Records the length of every input it is fed.
    """

    def __init__(self, net: torch.nn.Module, shift: bool = False):
        super().__init__()
        self.net, self.shift, self.fed = net, shift, []

    def _logits(self, full):
        z = self.net(input_ids=full).logits
        if self.shift:  # next-token model: output j predicts j + 1 (undo the mdm alignment)
            z = torch.cat([z[:, 1:], z[:, -1:]], dim=1)
        return z

    def forward(self, input_ids, past_key_values=None, use_cache=False, replace_position=None):
        self.fed.append(input_ids.shape[1])
        if past_key_values is None:
            full, out = input_ids, slice(None)
        elif replace_position is not None:
            full = past_key_values.clone()
            full[replace_position] = input_ids.reshape(-1)
            idx = replace_position[0].nonzero().squeeze(-1)
            out = slice(int(idx[0]), int(idx[-1]) + 1)
        else:
            full = torch.cat([past_key_values, input_ids], dim=1)
            out = slice(past_key_values.shape[1], None)
        return SimpleNamespace(logits=self._logits(full)[:, out], past_key_values=full.clone())


def _prompt(n=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, V, (1, n), generator=g)


# ----------------------------------------------------------------------------- uncertainty
def test_entropy_closed_forms():
    z = torch.zeros(1, 2, 7)
    z[0, 1, 3] = 1e4  # effectively one-hot
    h = token_entropy(z)
    assert h.dtype == torch.float32 and h.shape == (1, 2)
    assert_close(h[0, 0], torch.tensor(math.log(7)), atol=1e-6, rtol=0)
    assert_close(h[0, 1], torch.tensor(0.0), atol=1e-6, rtol=0)
    r = torch.randn(2, 5, 11, generator=torch.Generator().manual_seed(1))
    ref = torch.distributions.Categorical(logits=r).entropy()
    assert_close(token_entropy(r), ref, atol=1e-6, rtol=0)
    assert_close(token_entropy(r.half()), ref, atol=2e-2, rtol=0)


def test_other_uncertainty_metrics_hand_worked():
    p = torch.tensor([[0.5, 0.3, 0.2]])
    z = p.log()[None]  # [1, 1, 3]
    assert_close(uncertainty(z, "confidence")[0, 0], torch.tensor(0.5))
    assert_close(uncertainty(z, "gap")[0, 0], torch.tensor(1 - 0.2))
    assert_close(uncertainty(z, "gini")[0, 0], torch.tensor(1 - (0.25 + 0.09 + 0.04)))
    h = -(p * p.log()).sum()
    var = (p * (-p.log() - h) ** 2).sum()
    assert_close(uncertainty(z, "varentropy")[0, 0], var)
    # top-2 entropy renormalises 0.5, 0.3 -> 0.625, 0.375
    q = torch.tensor([0.625, 0.375])
    assert_close(uncertainty(z, "topk_entropy", topk=2)[0, 0], -(q * q.log()).sum())


def test_entropy_bad_input():
    with pytest.raises(ValueError, match="NaN/Inf"):
        token_entropy(torch.tensor([[[0.0, float("nan")]]]))
    with pytest.raises(TypeError, match="floating-point"):
        token_entropy(torch.zeros(1, 2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="metric"):
        uncertainty(torch.zeros(1, 2, 3), "perplexity")


# ----------------------------------------------------------------------------- partition
def test_partition_single_jump_cuts_before_it():
    u = torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0, 3.0, 3.0, 3.0, 3.0, 3.0])
    # s=2: d_j for j in [3, 10): d_5 = 2 is the only positive jump -> block [2, 5), ℓ = 3
    assert next_block_length(u, 2, 1, 32, 0.01) == 3


def test_partition_largest_jump_wins_and_first_on_ties():
    u = torch.tensor([0.0, 1.0, 1.0, 1.5, 1.5, 3.5, 3.5])
    assert next_block_length(u, 0, 1, 32, 0.01) == 5  # d_5 = 2 > d_1 = 1 > d_3 = 0.5
    tie = torch.tensor([0.0, 0.0, 1.0, 1.0, 2.0, 2.0])
    assert next_block_length(tie, 0, 1, 32, 0.01) == 2  # d_2 = d_4 = 1: first maximiser


def test_partition_no_jump_and_sequence_end():
    u = torch.linspace(1.0, 0.0, 40)  # entropy only falls
    assert next_block_length(u, 0, 1, 32, 0.01) == 32
    assert next_block_length(u, 30, 1, 32, 0.01) == 10  # remainder
    assert next_block_length(u, 38, 4, 32, 0.01) == 2  # fewer than min_len left
    small = torch.tensor([0.0, 0.005, 0.0, 0.005])  # rises below δ
    assert next_block_length(small, 0, 1, 32, 0.01) == 4


def test_partition_min_len_respected_and_degenerate_fixed():
    u = torch.tensor([0.0, 5.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert next_block_length(u, 0, 1, 8, 0.01) == 1  # the jump at j=1 is allowed
    assert next_block_length(u, 0, 2, 8, 0.01) == 4  # j=1 excluded by m_min -> next jump at 4
    assert next_block_length(u, 0, 3, 3, 0.01) == 3  # m_min = M_max: fixed block


def test_partition_bounds_random_brute_force():
    rng = torch.Generator().manual_seed(0)
    for _ in range(300):
        n = int(torch.randint(2, 30, (1,), generator=rng))
        u = torch.rand(n, generator=rng) * 3
        s = int(torch.randint(0, n, (1,), generator=rng))
        lo = int(torch.randint(1, 6, (1,), generator=rng))
        hi = lo + int(torch.randint(0, 8, (1,), generator=rng))
        ell = next_block_length(u, s, lo, hi, 0.01)
        assert 1 <= ell <= min(hi, n - s)
        assert ell >= min(lo, n - s)
        # brute force of the rule
        a, e = s + lo, min(s + hi, n)
        if a >= e:
            assert ell == min(e, n) - s
            continue
        d = [float(u[j] - u[j - 1]) for j in range(a, e)]
        best = max(d)
        expect = (e - s) if best < 0.01 else (a + d.index(best) - s)
        assert ell == expect


def test_partition_bad_input():
    u = torch.zeros(10)
    with pytest.raises(ValueError, match="min_len"):
        next_block_length(u, 0, 0, 4)
    with pytest.raises(ValueError, match="max_len"):
        next_block_length(u, 0, 5, 4)
    with pytest.raises(ValueError, match="min_jump"):
        next_block_length(u, 0, 1, 4, -0.1)
    with pytest.raises(ValueError, match="start"):
        next_block_length(u, 10, 1, 4)
    with pytest.raises(ValueError, match="1-D"):
        next_block_length(torch.zeros(2, 5), 0)


# ----------------------------------------------------------------------------- threshold
def test_threshold_endpoints_clip_and_guard():
    assert dynamic_threshold(2.0, 2.0, 0.9, 0.7, 1.0) == pytest.approx(0.9)
    assert dynamic_threshold(0.0, 2.0, 0.9, 0.7, 1.0) == pytest.approx(0.7)
    assert dynamic_threshold(5.0, 2.0, 0.9, 0.7, 1.0) == pytest.approx(0.9)  # r clipped to 1
    # hand-worked: r = 0.5, γ = 0.5 -> τ = 0 + 0.9 * sqrt(0.5)
    assert dynamic_threshold(1.0, 2.0, 0.9, 0.0, 0.5) == pytest.approx(0.9 * math.sqrt(0.5))
    assert dynamic_threshold(0.3, 0.0, 0.9, 0.7, 1.0) == pytest.approx(0.7)  # h_ref = 0 guarded
    assert dynamic_threshold(1.0, 2.0, 0.9, 0.9, 3.0) == pytest.approx(0.9)  # tau_min = tau_max


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_threshold_monotone_and_bounded(schedule):
    hs = torch.linspace(0, 3, 61).tolist()
    taus = [dynamic_threshold(h, 2.0, 0.9, 0.3, 2.0, schedule) for h in hs]
    assert all(0.3 - 1e-12 <= t <= 0.9 + 1e-12 for t in taus)
    assert all(b >= a - 1e-12 for a, b in zip(taus, taus[1:]))
    assert taus[0] == pytest.approx(0.3) and taus[-1] == pytest.approx(0.9)


def test_power_decay_gamma_one_is_linear():
    for h in (0.1, 0.7, 1.3):
        a = dynamic_threshold(h, 1.5, 0.9, 0.7, 1.0, "power_decay")
        assert a == pytest.approx(dynamic_threshold(h, 1.5, 0.9, 0.7, 1.0, "linear"))


def test_threshold_bad_input():
    with pytest.raises(ValueError, match="tau_min"):
        dynamic_threshold(1.0, 1.0, 0.5, 0.7)
    with pytest.raises(ValueError, match="tau_max"):
        dynamic_threshold(1.0, 1.0, 1.5, 0.7)
    with pytest.raises(ValueError, match="gamma"):
        dynamic_threshold(1.0, 1.0, 0.9, 0.7, 0.0)
    with pytest.raises(ValueError, match="schedule"):
        dynamic_threshold(1.0, 1.0, 0.9, 0.7, 1.0, "zigzag")
    with pytest.raises(ValueError, match="h_cur"):
        dynamic_threshold(float("nan"), 1.0)


OFFICIAL = json.loads(
    (
        Path(__file__).resolve().parents[2] / "methods/swordsman/fixtures/official_thresholds.json"
    ).read_text()
)


def test_threshold_matches_official_every_schedule():
    """330 official values: every schedule incl. ``step``, γ in {0.05 .. 3} (rescaling, k floor)."""
    assert {r["method"] for r in OFFICIAL["thresholds"]} >= {"step", "exp", "log", "sigmoid"}
    for r in OFFICIAL["thresholds"]:
        ours = dynamic_threshold(
            r["h_cur"], r["h_ref"], r["tau_max"], r["tau_min"], r["gamma"], r["method"]
        )
        assert ours == pytest.approx(r["tau"], abs=1e-12), r


def test_threshold_official_rescaling_vs_unscaled():
    # γ = 2, r = 0.5: official rescales r -> 2*0.5 - 1 = 0 -> τ_min; unscaled linear gives the midpoint.
    assert dynamic_threshold(1.0, 2.0, 0.9, 0.3, 2.0, "linear") == pytest.approx(0.3)
    assert dynamic_threshold(1.0, 2.0, 0.9, 0.3, 2.0, "linear", rule="unscaled") == pytest.approx(
        0.6
    )
    # power_decay keeps the raw ratio under both rules: r**γ = 0.25
    for rule in ("official", "unscaled"):
        assert dynamic_threshold(1.0, 2.0, 0.9, 0.3, 2.0, "power_decay", rule) == pytest.approx(
            0.45
        )
    # k floor: γ = 0.01 behaves as k = 0.1 for exp (official), as k = 0.01 unscaled
    k = 0.1
    want = 0.3 + 0.6 * (1 - math.exp(-k * 0.5)) / (1 - math.exp(-k))
    assert dynamic_threshold(1.0, 2.0, 0.9, 0.3, 0.01, "exp") == pytest.approx(want)
    assert dynamic_threshold(1.0, 2.0, 0.9, 0.3, 0.01, "exp", "unscaled") != pytest.approx(want)
    # step: three levels
    assert [dynamic_threshold(h, 1.0, 0.9, 0.3, 1.0, "step") for h in (0.3, 0.5, 0.9)] == [
        pytest.approx(0.3),
        pytest.approx(0.3 + 0.6 * 0.7),
        pytest.approx(0.9),
    ]
    # old names are aliases of the official ones
    for old, new in (("cosine", "sigmoid"), ("circular", "elliptical"), ("exponential", "exp")):
        assert dynamic_threshold(0.7, 1.5, 0.9, 0.3, 1.5, old) == dynamic_threshold(
            0.7, 1.5, 0.9, 0.3, 1.5, new
        )
    with pytest.raises(ValueError, match="rule"):
        dynamic_threshold(1.0, 1.0, rule="official2")


def _official_case(c):
    z = torch.tensor(c["logits"], dtype=torch.float32)[None]  # fp32 model logits, [1, L, V]
    m = torch.tensor(c["mask"])[None]
    x = torch.where(m, torch.tensor(c["mask_id"]), torch.zeros((), dtype=torch.long))
    return z, m, x


def test_select_transfer_fp64_matches_official_on_near_ties():
    flips = 0
    for c in OFFICIAL["transfer"]:
        z, m, x = _official_case(c)
        x0, commit = select_transfer(z, x, c["mask_id"], c["tau"])  # default float64
        assert commit[0].tolist() == c["transfer"]
        assert x0[0][m[0]].tolist() == torch.tensor(c["x0"])[m[0]].tolist()
        _, commit32 = select_transfer(z, x, c["mask_id"], c["tau"], confidence_dtype=torch.float32)
        flips += commit32[0].tolist() != c["transfer"]
    assert flips > 0  # fp32 confidences tie and pick another position on some cases
    with pytest.raises(TypeError, match="confidence_dtype"):
        select_transfer(z, x, c["mask_id"], 0.9, confidence_dtype=torch.float16)


def test_config_rejects_bad_rule_and_dtype():
    with pytest.raises(ValueError, match="threshold_rule"):
        SwordsmanConfig(threshold_rule="x")
    with pytest.raises(ValueError, match="confidence_dtype"):
        SwordsmanConfig(confidence_dtype="bfloat16")


# ----------------------------------------------------------------------------- unmasking
def test_select_transfer_threshold_and_forced_top1():
    p = torch.tensor([[0.95, 0.05, 0.0], [0.6, 0.4, 0.0], [0.5, 0.5, 0.0], [0.99, 0.01, 0.0]])
    z = (p + 1e-9).log()[None]  # [1, 4, 3]
    x = torch.tensor([[2, 2, 2, 0]])  # mask id 2; last position already committed
    x0, commit = select_transfer(z, x, mask_id=2, tau=0.9)
    assert commit.tolist() == [[True, False, False, False]]
    assert x0[0, 3] == 0  # committed token kept although its logits are confident
    _, commit = select_transfer(z[:, 1:3], x[:, 1:3], mask_id=2, tau=0.9)
    assert commit.tolist() == [[True, False]]  # nothing clears τ: the most confident is forced
    _, commit = select_transfer(z, x, mask_id=2, tau=0.55)
    assert commit.tolist() == [[True, True, False, False]]


# ----------------------------------------------------------------------------- decoders
def test_oracle_exact_with_nfe_equal_blocks():
    target = torch.randint(3, V, (30,), generator=torch.Generator().manual_seed(2))
    prompt = target[None, :6].clone()
    ad = CountingAdapter(HFMaskedLMAdapter(OracleModel(target), mask_id=1))
    r = swordsman_generate(ad, prompt, SwordsmanConfig(gen_length=24, max_block_len=8))
    assert torch.equal(r.sequences[0], target)
    assert r.nfe == len(r.boundaries) == ad.calls  # every token clears τ at step 0
    assert r.boundaries[-1] == 30 and all(b > a for a, b in zip(r.boundaries, r.boundaries[1:]))


@pytest.mark.parametrize("block,gen", [(4, 16), (8, 16), (5, 13)])
def test_degenerate_swordsman_equals_fixed_block(mdm, block, gen):
    prompt = _prompt()
    ad = HFMaskedLMAdapter(mdm, mask_id=1)
    cfg = SwordsmanConfig(
        gen_length=gen, min_block_len=block, max_block_len=block, tau_max=0.3, tau_min=0.3
    )
    a = swordsman_generate(ad, prompt, cfg)
    b = fixed_block_generate(ad, prompt, gen, block_len=block, tau=0.3)
    assert torch.equal(a.sequences, b.sequences)
    assert a.nfe == b.nfe and a.boundaries == b.boundaries
    assert a.nfe > len(a.boundaries)  # the random model forces several steps per block


def test_every_position_unmasked_once_and_nfe_exact(mdm):
    prompt = _prompt(seed=3)
    ad = CountingAdapter(HFMaskedLMAdapter(mdm, mask_id=1))
    cfg = SwordsmanConfig(gen_length=20, max_block_len=6, tau_max=0.9, tau_min=0.0, gamma=0.5)
    r = swordsman_generate(ad, prompt, cfg)
    assert r.nfe == ad.calls == len(r.taus)  # one model call per denoising step
    assert torch.equal(r.sequences[:, :5], prompt)
    assert (r.generated != 1).all()
    assert (r.commit_step >= 0).all()
    # commit steps never decrease from block to block; NFE within [#blocks, G]
    assert len(r.boundaries) <= r.nfe <= 20
    starts = [5, *r.boundaries[:-1]]
    for s, e in zip(starts, r.boundaries):
        seg = r.commit_step[s - 5 : e - 5]
        assert seg.max() - seg.min() < e - s  # a block finishes within ℓ steps
    assert all(0.0 <= t <= 0.9 + 1e-9 for t in r.taus)


def test_dynamic_threshold_saves_calls_on_random_model(mdm):
    prompt = _prompt(seed=4)
    ad = HFMaskedLMAdapter(mdm, mask_id=1)
    base = dict(gen_length=24, min_block_len=8, max_block_len=8, tau_max=0.9)
    fixed = swordsman_generate(ad, prompt, SwordsmanConfig(**base, tau_min=0.9))
    dyn = swordsman_generate(ad, prompt, SwordsmanConfig(**base, tau_min=0.0, gamma=0.5))
    assert dyn.nfe <= fixed.nfe
    assert min(dyn.taus) < 0.9


def test_vanilla_commits_k_per_step(mdm):
    prompt = _prompt()
    ad = CountingAdapter(HFMaskedLMAdapter(mdm, mask_id=1))
    r = vanilla_generate(ad, prompt, gen_length=12, steps=6, block_len=6)
    assert r.nfe == ad.calls == 6 and (r.generated != 1).all()
    assert torch.bincount(r.commit_step).tolist() == [2] * 6


def test_determinism_with_temperature(mdm):
    prompt = _prompt()
    ad = HFMaskedLMAdapter(mdm, mask_id=1)
    cfg = SwordsmanConfig(gen_length=12, max_block_len=4, temperature=1.0)
    r1 = swordsman_generate(ad, prompt, cfg, torch.Generator().manual_seed(7))
    r2 = swordsman_generate(ad, prompt, cfg, torch.Generator().manual_seed(7))
    assert torch.equal(r1.sequences, r2.sequences)
    assert r1.boundaries == r2.boundaries and r1.taus == r2.taus


@pytest.mark.parametrize("shift", [False, True])
@pytest.mark.parametrize("cache", ["prefix", "dual"])
def test_cache_paths_match_no_cache(mdm, cache, shift):
    model = RecomputeCacheModel(mdm, shift=shift)
    ad = CountingAdapter(HFDiffusionAdapter(model, mask_id=1, shift_logits=shift))
    assert ad.supports == {"none", "prefix", "dual"}
    prompt = _prompt(seed=5)
    cfg = SwordsmanConfig(gen_length=16, max_block_len=5, tau_min=0.5)
    ref = swordsman_generate(ad, prompt, cfg)
    model.fed.clear()
    r = swordsman_generate(ad, prompt, SwordsmanConfig(**{**cfg.__dict__, "cache": cache}))
    assert torch.equal(r.sequences, ref.sequences) and r.nfe == ref.nfe
    full = prompt.shape[1] + 16
    block_feeds = [n for n in model.fed if n != full]
    lb = 1 if shift else 0
    if cache == "dual":  # only the block (plus one look-back token for next-token models)
        spans = [e - s + lb for s, e in ad.block_calls[-len(block_feeds) :]]
    else:  # the block and the masked suffix after the cached prefix
        spans = [full - s + lb for s, e in ad.block_calls[-len(block_feeds) :]]
    assert block_feeds == spans and len(block_feeds) == r.nfe - len(r.boundaries)


def test_dream_shift_aligns_logits():
    target = torch.randint(3, V, (12,), generator=torch.Generator().manual_seed(0))
    # A next-token model whose output at j is one-hot of target[j + 1]
    nxt = torch.cat([target[1:], target[-1:]])
    ad = DreamAdapter(OracleModel(nxt), mask_id=1)
    logits, _ = ad.forward(target[None])
    assert torch.equal(logits[0, 1:].argmax(-1), target[1:])


def test_dream_first_token_greedy_commits_block_start(mdm):
    ad = HFMaskedLMAdapter(mdm, mask_id=1)
    cfg = SwordsmanConfig(gen_length=12, max_block_len=4, dream_first_token_greedy=True)
    r = swordsman_generate(ad, _prompt(), cfg)
    for s in [5, *r.boundaries[:-1]]:
        assert r.commit_step[s - 5] == r.commit_step[: s - 5 + 1].max()  # first of its block


# ----------------------------------------------------------------------------- bad input
def test_decoder_bad_input(mdm):
    ad = HFMaskedLMAdapter(mdm, mask_id=1)
    cfg = SwordsmanConfig(gen_length=8, max_block_len=4)
    with pytest.raises(ValueError, match="mask id"):
        swordsman_generate(ad, torch.tensor([[2, 1, 3]]), cfg)
    with pytest.raises(ValueError, match="empty"):
        swordsman_generate(ad, torch.zeros(1, 0, dtype=torch.long), cfg)
    with pytest.raises(ValueError, match="batch size 1"):
        swordsman_generate(ad, torch.tensor([[2, 3], [4, 5]]), cfg)
    with pytest.raises(TypeError, match="LongTensor"):
        swordsman_generate(ad, torch.tensor([[2.0, 3.0]]), cfg)
    with pytest.raises(ValueError, match="cache='dual'"):
        swordsman_generate(ad, torch.tensor([[2, 3]]), SwordsmanConfig(gen_length=8, cache="dual"))
    with pytest.raises(ValueError, match="mask_id"):
        HFMaskedLMAdapter(mdm, mask_id=None)
    nan_model = OracleModel(torch.zeros(20, dtype=torch.long))
    nan_model.z[0, 7, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        swordsman_generate(HFMaskedLMAdapter(nan_model, 1), torch.tensor([[2, 3]]), cfg)


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(min_block_len=0), "min_block_len"),
        (dict(min_block_len=8, max_block_len=4), "min_block_len"),
        (dict(min_jump=-1.0), "min_jump"),
        (dict(tau_max=1.2), "tau_max"),
        (dict(tau_min=0.95), "tau_min"),
        (dict(gamma=0.0), "gamma"),
        (dict(schedule="zigzag"), "schedule"),
        (dict(metric="perplexity"), "metric"),
        (dict(cache="full"), "cache"),
        (dict(gen_length=0), "gen_length"),
        (dict(pivot="last"), "pivot"),
    ],
)
def test_config_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        SwordsmanConfig(**kw)


def test_config_warns_on_temperature_and_long_blocks(caplog):
    with caplog.at_level("WARNING"):
        SwordsmanConfig(temperature=0.5, gen_length=16, max_block_len=32)
    assert "temperature" in caplog.text and "max_block_len" in caplog.text


# ----------------------------------------------------------------------------- toy pieces
def test_alignment_hand_worked():
    assert boundary_alignment([3, 8, 12], [0, 3, 7, 12]) == pytest.approx(2 / 3)
    assert boundary_alignment([3, 8, 12], [0, 3, 7, 12], tol=1) == 1.0
    assert math.isnan(boundary_alignment([], [1]))


def test_grammar_samples_parse_valid_and_corruptions_fail():
    g = PhraseGrammar()
    rng = random.Random(0)
    for _ in range(50):
        prompt, resp, c0 = g.sample(rng)
        assert BOS in prompt and len(prompt) == 7 and len(resp) == g.gen_length and MASK not in resp
        ok, eos_at = g.parse(resp, c0)
        assert ok and all(t == EOS for t in resp[eos_at:])
        assert eos_at in g.gold_starts(c0)
        bad = list(resp)
        bad[0] = g.head((c0 + 2) % 4, 0)  # head of the wrong category
        assert not g.parse(bad, c0)[0]
    # mixing two body variants inside one phrase is invalid
    c = 3
    mixed = [g.head(c, 0), g.body(c, 0, 0), g.body(c, 1, 1), g.body(c, 0, 2), g.body(c, 0, 3)]
    mixed += [g.body(c, 0, 4)] + [EOS] * (g.gen_length - 6)
    assert not g.parse(mixed, c0=2)[0]
    mixed[2] = g.typo(c, 1)
    assert g.parse(mixed, c0=2)[0]


def test_model_that_predicts_mask_still_finishes():
    # Every position's argmax is the mask id itself: the decoder must propose real tokens and finish.
    ad = CountingAdapter(HFMaskedLMAdapter(OracleModel(torch.full((20,), 1)), mask_id=1))
    r = swordsman_generate(
        ad, torch.tensor([[2, 3]]), SwordsmanConfig(gen_length=10, max_block_len=4)
    )
    assert (r.generated != 1).all() and r.nfe <= 10


def test_generate_text_stops_and_counts_tokens():
    from common.tiny import tiny_tokenizer
    from methods.swordsman.eval_harness import _coerce, generate_text, summarize

    tok = tiny_tokenizer()
    vocab = len(tok) + 1
    ctx_ids = tok.encode("Question: two plus two", add_special_tokens=False)
    ans_ids = tok.encode(" four\nQuestion: more", add_special_tokens=False)
    eos = tok.eos_token_id
    gen = 16
    tail = (ans_ids + [eos] * gen)[:gen]
    target = torch.tensor(ctx_ids + tail)
    ad = HFMaskedLMAdapter(OracleModel(target, vocab=vocab), mask_id=len(tok), eos_ids={eos})
    cfg = SwordsmanConfig(gen_length=gen, max_block_len=4)
    r = generate_text(ad, tok, "Question: two plus two", cfg, until=["\nQuestion:"])
    assert r["text"] == " four"
    assert r["tokens"] == len(tok.encode(" four", add_special_tokens=False))
    assert r["nfe"] >= 4
    rb = generate_text(ad, tok, "Question: two plus two", cfg, ["\nQuestion:"], baseline="fixed")
    assert rb["text"] == " four"
    s = summarize(
        [{"tokens": 4, "nfe": 2, "seconds": 2.0}, {"tokens": 2, "nfe": 4, "seconds": 1.0}]
    )
    assert s == pytest.approx({"tps": 2.0, "latency_s": 1.5, "nfe": 3.0})
    assert _coerce({"tau_min": "0.5", "cache": "dual", "dream_first_token_greedy": "true"}) == {
        "tau_min": 0.5,
        "cache": "dual",
        "dream_first_token_greedy": True,
    }
    with pytest.raises(ValueError, match="unknown decoder argument"):
        _coerce({"block": "3"})


def test_phrase_accuracy_hand_worked():
    g = PhraseGrammar()
    rng = random.Random(1)
    _, resp, c0 = g.sample(rng)
    assert g.phrase_accuracy(resp, c0) == 1.0
    bad = list(resp)
    bad[0] = g.head((c0 + 2) % 4, 0)  # first phrase broken, the others intact
    n = sum(1 for s in g.gold_starts(c0) if s < resp.index(EOS))
    assert g.phrase_accuracy(bad, c0) == pytest.approx((n - 1) / n)
    assert math.isnan(g.phrase_accuracy([EOS] * g.gen_length, c0))


# ----------------------------------------------------------------------------- exact grammar posterior
def test_grammar_posterior_closed_forms():
    g = PhraseGrammar(gen_length=32, max_phrases=6)
    m = GrammarPosteriorLM(g)
    prompt, _, c0 = g.sample(random.Random(3))
    p_len, c1 = len(prompt), (c0 + 1) % 4
    x = torch.tensor([prompt + [MASK] * 32])
    p = m(x).logits.exp()[0]  # [L, V]
    assert_close(p[p_len:].sum(-1), torch.ones(32), atol=1e-5, rtol=0)
    # phrase 0 is always present (n >= 4): uniform head; body = variant mixture plus the typo
    assert p[p_len, g.head(c1, 0)].item() == pytest.approx(1 / 6, abs=1e-6)
    assert p[p_len + 1, g.body(c1, 2, 0)].item() == pytest.approx(0.85 / 3, abs=1e-6)
    assert p[p_len + 1, g.typo(c1, 0)].item() == pytest.approx(0.15, abs=1e-6)
    # one committed body token pins the variant: its siblings sit at 1 - typo_prob = 0.85
    x[0, p_len + 1] = g.body(c1, 2, 0)
    p = m(x).logits.exp()[0]
    assert p[p_len + 2, g.body(c1, 2, 1)].item() == pytest.approx(0.85, abs=1e-5)
    # a committed typo says nothing about the variant
    x[0, p_len + 1] = g.typo(c1, 0)
    p = m(x).logits.exp()[0]
    assert p[p_len + 2, g.body(c1, 0, 1)].item() == pytest.approx(0.85 / 3, abs=1e-6)
    # <eos> at the start of phrase 4 fixes n = 4: every later position is <eos>, earlier ones content
    a4 = g.gold_starts(c0)[4]
    x[0, p_len + a4] = EOS
    p = m(x).logits.exp()[0]
    assert (p[p_len + a4 + 1 :, EOS] > 1 - 1e-5).all()
    assert (p[p_len : p_len + a4, EOS] < 1e-5).all()


def test_grammar_posterior_matches_monte_carlo_eos_marginal():
    g = PhraseGrammar(gen_length=32, max_phrases=6)
    rng = random.Random(0)
    samples = [g.sample(rng) for _ in range(4000)]
    c0 = samples[0][2]
    resp = torch.tensor([r for _, r, c in samples if c == c0])  # [n, G]
    x = torch.tensor([samples[0][0] + [MASK] * 32])
    p_eos = GrammarPosteriorLM(g)(x).logits.exp()[0, -32:, EOS]
    assert_close(p_eos, (resp == EOS).float().mean(0), atol=0.05, rtol=0)


def test_dynamic_threshold_cuts_nfe_on_exact_grammar_posterior():
    """With exactly calibrated confidences, lowering τ releases the 0.85-confidence siblings together."""
    g = PhraseGrammar(gen_length=32, max_phrases=6)
    ad = CountingAdapter(HFMaskedLMAdapter(GrammarPosteriorLM(g), mask_id=MASK, eos_ids={EOS}))
    data = [g.sample(random.Random(s)) for s in range(3)]
    for blocks in (dict(min_block_len=8), dict(min_block_len=1)):  # fixed / adaptive partition
        nfe = {}
        for tau_min in (0.9, 0.7):
            cfg = SwordsmanConfig(gen_length=32, max_block_len=8, tau_min=tau_min, **blocks)
            nfe[tau_min], ad.calls = 0, 0
            for prompt, _, c0 in data:
                r = swordsman_generate(ad, torch.tensor([prompt]), cfg)
                assert g.parse(r.generated.tolist(), c0)[0]  # validity is not lost
                nfe[tau_min] += r.nfe
            assert nfe[tau_min] == ad.calls
        assert nfe[0.7] < nfe[0.9], blocks
    # adaptive blocks end exactly at phrase starts (or the <eos> tail) under the exact posterior
    r = swordsman_generate(ad, torch.tensor([data[0][0]]), cfg)
    out, c0 = r.generated.tolist(), data[0][2]
    eos_at = out.index(EOS)
    cuts = {b - r.prompt_len for b in r.boundaries[:-1] if b - r.prompt_len < eos_at}
    assert cuts and cuts <= set(g.gold_starts(c0))


# ----------------------------------------------------------------------------- LLaDA / Dream loading path
# A local stand-in for a hub checkpoint with its own modeling file (loaded with trust_remote_code, as the
# LLaDA/Dream checkpoints are): a tiny bidirectional MDM whose "KV cache" is the token ids, recomputed
# exactly, behind Fast-dLLM's forward(input_ids, past_key_values, use_cache, replace_position) interface.
_MODELING = """
from types import SimpleNamespace

import torch
from transformers import BertConfig, BertForMaskedLM


class TinyDLMConfig(BertConfig):
    model_type = "tiny_dlm"


class TinyDLMNoCache(BertForMaskedLM):
    config_class = TinyDLMConfig

    def forward(self, input_ids, attention_mask=None):
        return SimpleNamespace(logits=super().forward(input_ids=input_ids).logits)


class TinyDLM(BertForMaskedLM):
    config_class = TinyDLMConfig

    def forward(self, input_ids, past_key_values=None, use_cache=False, replace_position=None):
        if past_key_values is None:
            full, out = input_ids, slice(None)
        elif replace_position is not None:
            full = past_key_values.clone()
            full[replace_position] = input_ids.reshape(-1)
            idx = replace_position[0].nonzero().squeeze(-1)
            out = slice(int(idx[0]), int(idx[-1]) + 1)
        else:
            full = torch.cat([past_key_values, input_ids], dim=1)
            out = slice(past_key_values.shape[1], None)
        logits = super().forward(input_ids=full).logits[:, out]
        return SimpleNamespace(logits=logits, past_key_values=full.clone() if use_cache else None)
"""


def _save_tiny_dlm(path, family: str, cls_name: str = "TinyDLM"):
    """Write a tiny LLaDA-like or Dream-like checkpoint (config + weights + modeling file + tokenizer)."""
    import importlib.util

    from common.tiny import tiny_tokenizer

    path.mkdir(parents=True, exist_ok=True)
    (path / "modeling_tiny_dlm.py").write_text(_MODELING)
    spec = importlib.util.spec_from_file_location(
        f"tiny_dlm_{family}_{cls_name}", path / "modeling_tiny_dlm.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    tok = tiny_tokenizer()
    if family == "llada":  # LLaDA names its mask <|mdm_mask|> and ends turns with <|eot_id|>
        tok.add_special_tokens({"additional_special_tokens": ["<|mdm_mask|>", "<|eot_id|>"]})
    else:  # Dream: a regular mask_token
        tok.add_special_tokens({"mask_token": "<|mask|>"})
    cfg = mod.TinyDLMConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        type_vocab_size=1,
    )
    cfg.auto_map = {
        "AutoConfig": "modeling_tiny_dlm.TinyDLMConfig",
        "AutoModel": f"modeling_tiny_dlm.{cls_name}",
    }
    torch.manual_seed(0)
    getattr(mod, cls_name)(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return tok


@pytest.fixture(scope="module")
def tiny_hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    return {
        "llada": (
            root / "tiny-llada-8b-instruct",
            _save_tiny_dlm(root / "tiny-llada-8b-instruct", "llada"),
        ),
        "dream": (root / "tiny-dream-base", _save_tiny_dlm(root / "tiny-dream-base", "dream")),
        "nocache": (
            root / "tiny-llada-nocache",
            _save_tiny_dlm(root / "tiny-llada-nocache", "llada", "TinyDLMNoCache"),
        ),
    }


def test_llada_and_dream_adapters_load_local_checkpoints(tiny_hub):
    from methods.swordsman import DreamAdapter, LLaDAAdapter

    path, tok = tiny_hub["llada"]
    ad, tok2 = LLaDAAdapter.from_pretrained(str(path), dtype="float32", device="cpu")
    assert ad.mask_id == tok.convert_tokens_to_ids("<|mdm_mask|>") and not ad.shift_logits
    assert tok.convert_tokens_to_ids("<|eot_id|>") in ad.eos_ids and tok.eos_token_id in ad.eos_ids
    assert ad.supports == {"none", "prefix", "dual"}
    x = torch.tensor([tok.encode("two plus two", add_special_tokens=False) + [ad.mask_id] * 4])
    raw = ad.model(x).logits
    assert torch.equal(ad.forward(x)[0], raw)  # LLaDA logits are already aligned

    path, tok = tiny_hub["dream"]
    ad, _ = DreamAdapter.from_pretrained(str(path), dtype="float32", device="cpu")
    assert ad.mask_id == tok.mask_token_id and ad.shift_logits
    raw = ad.model(x.clamp_max(len(tok) - 1)).logits
    z, _ = ad.forward(x.clamp_max(len(tok) - 1))
    assert torch.equal(z[:, 1:], raw[:, :-1]) and torch.equal(z[:, :1], raw[:, :1])  # shift by one

    path, _ = tiny_hub["nocache"]
    ad, _ = LLaDAAdapter.from_pretrained(str(path), dtype="float32", device="cpu")
    assert ad.supports == {"none"}


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_loaded_checkpoint_dual_cache_equals_no_cache(tiny_hub, family):
    from methods.swordsman import DreamAdapter, LLaDAAdapter

    cls = LLaDAAdapter if family == "llada" else DreamAdapter
    path, tok = tiny_hub[family]
    ad, _ = cls.from_pretrained(str(path), dtype="float32", device="cpu")
    prompt = torch.tensor([tok.encode("one plus one is", add_special_tokens=False)])
    cfg = SwordsmanConfig(gen_length=12, max_block_len=4, tau_min=0.3)
    ref = swordsman_generate(ad, prompt, cfg)
    for cache in ("prefix", "dual"):
        r = swordsman_generate(ad, prompt, SwordsmanConfig(**{**cfg.__dict__, "cache": cache}))
        assert torch.equal(r.sequences, ref.sequences) and r.nfe == ref.nfe, cache


def test_harness_model_generate_until_without_lm_eval(tiny_hub):
    from methods.swordsman.eval_harness import SwordsmanHarnessLM

    path, _ = tiny_hub["llada"]
    req = [SimpleNamespace(args=("Question: two plus two", {"until": ["\n"]}))] * 2
    texts = {}
    for cache in ("none", "dual"):  # the dual KV cache on and off
        lm = SwordsmanHarnessLM.from_pretrained(
            str(path), dtype="float32", device="cpu", gen_length="8", max_block_len="4", cache=cache
        )
        assert lm.chat and not lm.add_bos  # "instruct" in the path -> chat template (repo rule)
        texts[cache] = lm.generate_until(req)
        assert len(texts[cache]) == 2 and all("\n" not in t for t in texts[cache])
        tp = lm.throughput()
        assert tp["nfe"] >= 2 and tp["latency_s"] > 0
        with pytest.raises(NotImplementedError, match="generate_until"):
            lm.loglikelihood(req)
    assert texts["none"] == texts["dual"]
    base = SwordsmanHarnessLM.from_pretrained(
        str(path), baseline="fixed", dtype="float32", device="cpu", gen_length=8, max_block_len=4
    )
    assert len(base.generate_until(req[:1])) == 1
    dream = SwordsmanHarnessLM.from_pretrained(
        str(tiny_hub["dream"][0]), dtype="float32", device="cpu", gen_length=8, max_block_len=4
    )
    assert dream.add_bos and not dream.chat and dream.adapter.shift_logits
    with pytest.raises(ValueError, match="cache='dual' is not supported"):
        SwordsmanHarnessLM.from_pretrained(
            str(tiny_hub["nocache"][0]), dtype="float32", device="cpu", cache="dual"
        )


def test_lm_eval_registration_is_lazy():
    from methods.swordsman.eval_harness import register_lm_eval

    try:
        import lm_eval  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"icml26\[eval\]"):
            register_lm_eval()
    else:
        from lm_eval.api.registry import get_model

        assert get_model("swordsman_dlm") is register_lm_eval()


def test_paper_configs_load_with_repo_decoder_values():
    from common.config import ConfigError, validate
    from common.registry import compose
    from methods.swordsman.config import SCHEDULE_NAMES
    from methods.swordsman.threshold import SCHEDULES

    llada = validate(compose(["experiment=swordsman_paper"]))
    dream = validate(compose(["experiment=swordsman_paper_dream"]))
    for run in (llada, dream):
        d = run.method.decoder
        assert (d.gen_length, d.max_block_len, d.tau_max, d.cache) == (512, 32, 0.9, "none")
        assert run.method.eval.tasks == {"gsm8k": 5, "minerva_math": 4, "humaneval": 0, "mbpp": 3}
    assert (llada.method.decoder.tau_min, llada.method.decoder.gamma) == (0.7, 1.0)
    assert "LLaDA" in llada.model.name and "Dream" in dream.model.name
    assert (dream.method.decoder.tau_min, dream.method.decoder.gamma) == (0.0, 0.5)
    assert set(SCHEDULES) == set(SCHEDULE_NAMES)
    with pytest.raises(ConfigError, match="method.decoder.tau_min"):
        compose(["experiment=swordsman_paper", "method.decoder.tau_min=abc"])
    with pytest.raises(ConfigError, match="tau_mni"):
        compose(["experiment=swordsman_paper", "method.decoder.tau_mni=0.5"])
    with pytest.raises(ConfigError, match="threshold_rule"):
        compose(["experiment=swordsman_toy", "method.decoder.threshold_rule=x"])


def test_train_mdm_weighting_options(mdm):
    from methods.swordsman import train_mdm

    g = PhraseGrammar(gen_length=32, max_phrases=6)
    model = tiny_mdm(g.vocab_size, hidden_size=16, num_layers=1)
    for w in ("elbo", "mean"):
        losses = train_mdm(model, g, steps=2, batch_size=4, weighting=w)
        assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    with pytest.raises(ValueError, match="weighting"):
        train_mdm(model, g, steps=1, weighting="uniform")


# ---------------------------------------------------------------- paper smoke (tests/test_paper_presets.py)

PAPER_SMOKE = {
    "paper": [
        "model.path={tiny_mdm}",
        "model.dtype=float32",
        "method.eval.engine=local",
        "method.eval.limit=2",
        "method.decoder.gen_length=8",
        "benchmark.sets.gsm8k.path={repo}/common/tasks/fixtures/gsm8k_mini.jsonl",
    ],
}
PAPER_SMOKE["swordsman_paper_dream/paper"] = PAPER_SMOKE["paper"]


def paper_smoke_setup(tmp_path):
    """A tiny BertForMaskedLM + tokenizer with a mask token, saved like a hub checkpoint."""
    from transformers import BertConfig, BertForMaskedLM

    from common.tiny import tiny_tokenizer

    tok = tiny_tokenizer()
    tok.add_special_tokens({"mask_token": "[MASK]"})
    torch.manual_seed(0)
    model = BertForMaskedLM(
        BertConfig(
            vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=512, type_vocab_size=1,
        )
    )  # fmt: skip
    model.save_pretrained(tmp_path / "tiny_mdm")
    tok.save_pretrained(tmp_path / "tiny_mdm")
    return {"tiny_mdm": str(tmp_path / "tiny_mdm")}
