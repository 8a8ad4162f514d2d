"""ThreadWeaver: format round trip, trie packing identity, orchestrator, latency stats, P-GRPO math."""

from __future__ import annotations

import random

import pytest
import torch

from methods.threadweaver import (
    FormatError,
    HFGenerateEngine,
    OrchestratorConfig,
    ParallelBlock,
    ParallelOrchestrator,
    ThreadWeaverConfig,
    Trajectory,
    TrieCollator,
    Unit,
    add_threadweaver_tokens,
    ancestor_mask,
    build_packed,
    extract_units,
    group_advantages,
    is_correct,
    packed_forward,
    parallel_stats,
    parent_gather_loss,
    parse,
    pgrpo_loss,
    pgrpo_reward,
    response_pieces,
    serialize,
    speedup_report,
    tag_ids,
    validate,
)
from methods.threadweaver.engines import EngineCompletion
from methods.threadweaver.toy import make_codebook, toy_tokenizer, toy_trajectory
from tests.fake_openai import FakeOpenAI

WORDS = ["alpha", "beta", "x = 2", "so 3+4 = 7", "check", "y", "done."]


def _random_traj(rng: random.Random) -> Trajectory:
    segs: list = []
    for _ in range(rng.randint(0, 3)):
        if rng.random() < 0.5:
            if segs and isinstance(segs[-1], str):  # canonical form: no two adjacent texts
                continue
            segs.append(" ".join(rng.choices(WORDS, k=rng.randint(1, 4))) + "\n")
        else:
            k = rng.randint(1, 3)
            nums = [f"{i + 1}" if rng.random() < 0.7 else f"{i + 1}.{i}" for i in range(k)]
            segs.append(
                ParallelBlock(
                    outlines=[(n, rng.choice(WORDS)) for n in nums],
                    threads=[(n, " ".join(rng.choices(WORDS, k=3))) for n in nums],
                )
            )
    return Trajectory(segs, "The answer is \\boxed{7}.")


@pytest.fixture(scope="module")
def toy_tok():
    return toy_tokenizer(n_symbols=4, chain_len=4)


@pytest.fixture(scope="module")
def toy_setup(toy_tok):
    """A 2-block word-level trajectory, its prompt and units (block 2 has 3 threads)."""
    cb = make_codebook(4, 4, seed=0)
    t1 = toy_trajectory([0, 2], cb, "par")
    t2 = toy_trajectory([1, 3, 0], cb, "par")
    traj = Trajectory([t1.segments[0], " ; ", t2.segments[0]], t2.final)

    def enc(s):
        return toy_tok(s, add_special_tokens=False)["input_ids"]

    prompt = [toy_tok.bos_token_id, *enc("Q: s0 s2\n")]
    resp, units = extract_units(prompt, traj, enc, toy_tok.eos_token_id)
    return traj, prompt, resp, units, enc


def _small_model(vocab: int, arch: str = "qwen3", seed: int = 0, dtype=torch.float32):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    cls, ccls = {
        "qwen3": (Qwen3ForCausalLM, Qwen3Config),
        "llama": (LlamaForCausalLM, LlamaConfig),
    }[arch]
    torch.manual_seed(seed)
    cfg = ccls(
        vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64, head_dim=8, max_position_embeddings=256,
    )  # fmt: skip
    return cls(cfg).to(dtype).eval()


# --------------------------------------------------------------------------- format


def test_round_trip_on_random_traces():
    rng = random.Random(0)
    for _ in range(200):
        t = _random_traj(rng)
        s = serialize(t)
        assert parse(s) == t
        assert serialize(parse(s)) == s
        assert validate(s).ok, validate(s).errors


def test_serializer_layout_is_canonical():
    t = Trajectory(["a\n", ParallelBlock([("1", "p"), ("2", "q")], [("1", "u"), ("2", "v")])], "F")
    assert serialize(t) == (
        "<think>\na\n<Parallel>\n<Outlines>\n<Outline>1: p</Outline>\n<Outline>2: q</Outline>\n"
        "</Outlines>\n<Thread>\n1: u\n</Thread><Thread>\n2: v\n</Thread>\n</Parallel>\n</think>\nF"
    )
    assert "".join(x for _, x in response_pieces(t)) == serialize(t)


GOOD = serialize(
    Trajectory([ParallelBlock([("1", "p"), ("2", "q")], [("1", "u"), ("2", "v")])], "F")
)


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (GOOD.replace("\n</think>\n", "\n"), "</think>"),
        (GOOD.replace("<Thread>\n2: v\n</Thread>", ""), "2 outlines but 1 threads"),
        (GOOD.replace("1: u", "1: <Parallel> u"), "nested <Parallel>"),
        (GOOD.replace("\n</Parallel>", ""), "unclosed <Parallel>"),
        (GOOD.replace("2: v", "2: "), "empty thread"),
        (GOOD.replace("1: u", "1: <think> u"), "foreign tag"),
        (GOOD.replace("<Outline>1: p</Outline>\n", "<Thread>1: p</Thread>\n"), "outlines but"),
        ("<think>\nhi <Thread>x</Thread>\n</think>\n", "outside a parallel block"),
    ],
)
def test_validate_reports_malformed(bad, error):
    rep = validate(bad)
    assert not rep.ok
    assert any(error in e for e in rep.errors), rep.errors
    with pytest.raises(FormatError):
        parse(bad)


def test_parse_errors_name_the_problem():
    with pytest.raises(FormatError, match="must start with"):
        parse("hello")
    with pytest.raises(FormatError, match="no '\\\\n</think>"):
        parse("<think>\nabc")
    with pytest.raises(TypeError, match="text must be a str"):
        parse(b"<think>")
    strict_only = GOOD.replace("<Thread>\n2: v", "<Thread>\n3: v")
    assert validate(strict_only, strict=False).ok
    assert not validate(strict_only, strict=True).ok


# --------------------------------------------------------------------------- trie


def test_extract_units_matches_orchestrator_layout(toy_tok, toy_setup):
    traj, prompt, resp, units, enc = toy_setup
    full = units[0]
    assert full.ids == prompt + resp and full.n_context == len(prompt)
    assert toy_tok.decode(resp[:-1]) == serialize(traj)
    assert len(units) == 1 + 2 + 3
    for u in units[1:]:
        # each thread request ends with the first-thread header "\n<Thread>\nN:"
        hdr = toy_tok.decode(u.context[-5:])
        assert hdr.startswith("\n<Thread>\n") and hdr.endswith(":")
        assert u.completion[-1] == toy_tok.convert_tokens_to_ids("</Thread>")


def test_mask_positions_and_size_by_brute_force(toy_setup):
    _, _, _, units, _ = toy_setup
    p = build_packed(units)
    n = len(p)
    # N = number of distinct prefixes of all units (trie size) and <= sum of unit lengths
    prefixes = {tuple(u.ids[: d + 1]) for u in units for d in range(len(u.ids))}
    assert n == len(prefixes) < sum(len(u.ids) for u in units)
    # full trajectory = contiguous prefix 0..|full|-1 with positions 0..|full|-1
    assert p.input_ids[: len(units[0].ids)].tolist() == units[0].ids
    assert p.position_ids[: len(units[0].ids)].tolist() == list(range(len(units[0].ids)))
    anc = ancestor_mask(p.tin, p.tout)
    for q in range(n):
        chain, v = set(), q
        while v >= 0:
            chain.add(v)
            v = int(p.parent[v])
        assert p.position_ids[q] == len(chain) - 1  # pos == depth
        assert {k for k in range(n) if anc[q, k]} == chain
    # loss only on completions: never on the prompt, never on branch request headers
    assert not p.loss_mask[: units[0].n_context].any()
    trained = int(p.loss_mask.sum())
    assert trained == len(
        {tuple(u.ids[: d + 1]) for u in units for d in range(u.n_context, len(u.ids))}
    )


def test_build_packed_errors_and_truncation(toy_setup):
    _, _, _, units, _ = toy_setup
    with pytest.raises(ValueError, match="units\\[0\\] must be the full"):
        build_packed([units[1], units[0]])
    with pytest.raises(ValueError, match="max_length"):
        build_packed(units, max_length=len(units[0].ids) - 1)
    with pytest.raises(ValueError, match="at least the full"):
        build_packed([])
    full_only = build_packed(units[:1])
    p = build_packed(units, max_length=len(full_only) + 3)  # too small for any whole branch
    # units[1] (thread 1 of block 1) lies on the full path and adds no node; units[2:] are dropped
    assert len(p) == len(full_only) and p.n_dropped_units == len(units) - 2


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_packed_forward_equals_separate_unit_forwards(toy_tok, toy_setup, arch):
    _, _, _, units, _ = toy_setup
    model = _small_model(len(toy_tok), arch)
    p = build_packed(units)
    batch = TrieCollator(toy_tok.pad_token_id)([p, build_packed(units[:2])])
    with torch.no_grad():
        logits = packed_forward(model, batch)[0]  # [N, V], padded second row in the batch
        index = {}
        for i in range(len(p)):  # (parent flat idx, token) -> flat idx
            index[(int(p.parent[i]), int(p.input_ids[i]))] = i
        for u in units:
            ref = model(torch.tensor([u.ids])).logits[0]
            node, flat = -1, []
            for t in u.ids:
                node = index[(node, t)]
                flat.append(node)
            torch.testing.assert_close(logits[flat], ref, atol=1e-5, rtol=1e-5)


def test_parent_gather_loss_equals_unique_unit_losses(toy_tok, toy_setup):
    _, _, _, units, _ = toy_setup
    model = _small_model(len(toy_tok), "qwen3", dtype=torch.float64)
    batch = TrieCollator(toy_tok.pad_token_id, dtype=torch.float64)([build_packed(units)])
    with torch.no_grad():
        packed = parent_gather_loss(
            packed_forward(model, batch), batch["input_ids"], batch["parent"], batch["loss_mask"],
            reduction="sum",
        )  # fmt: skip
        per_pair = {}
        for u in units:
            lp = torch.log_softmax(model(torch.tensor([u.ids])).logits[0], -1)
            for d in range(u.n_context, len(u.ids)):
                per_pair[tuple(u.ids[: d + 1])] = -lp[d - 1, u.ids[d]]
    torch.testing.assert_close(packed, sum(per_pair.values()), atol=1e-9, rtol=1e-9)


def test_tags_register_as_single_tokens(tmp_path):
    from common.tiny import save_tiny, tiny_causal_lm, tiny_tokenizer

    model, tok = tiny_causal_lm("qwen3", hidden_size=32, tokenizer=tiny_tokenizer())
    with pytest.raises(ValueError, match="add_threadweaver_tokens"):
        tag_ids(tok)
    sub = tok("Parallel", add_special_tokens=False)["input_ids"]
    ids = add_threadweaver_tokens(model, tok)
    emb = model.get_input_embeddings().weight
    assert emb.shape[0] % 64 == 0 and emb.shape[0] >= len(tok)
    torch.testing.assert_close(emb[ids["<Parallel>"]], emb[sub].mean(0))
    assert all(len(tok(t, add_special_tokens=False)["input_ids"]) == 1 for t in ids)
    from transformers import AutoTokenizer

    save_tiny(model, tok, tmp_path / "m")
    tok2 = AutoTokenizer.from_pretrained(tmp_path / "m")
    assert {t: tok2.convert_tokens_to_ids(t) for t in ids} == ids


# --------------------------------------------------------------------------- orchestrator


class OracleEngine:
    """Scripted engine that replays a canonical trajectory (continuations of the full sequence,
    thread units for the other thread requests); records every call."""

    def __init__(self, units: list[Unit]):
        self.full = units[0].ids
        self.threads = {tuple(u.context): u.completion for u in units[1:]}
        self.calls: list[tuple[list[list[int]], list[int]]] = []

    def complete(self, prompts, stop_ids, max_tokens, temperature=1.0, top_p=1.0):
        self.calls.append((prompts, list(stop_ids)))
        outs = []
        for p, m in zip(prompts, max_tokens):
            if self.full[: len(p)] == p:
                cont = self.full[len(p) :]
            else:
                cont = self.threads.get(tuple(p), [])
            cut = next((j + 1 for j, t in enumerate(cont) if t in stop_ids), len(cont))
            cont = cont[:cut]
            stop = cont and cont[-1] in stop_ids
            outs.append(EngineCompletion(cont[:m], "stop" if stop and len(cont) <= m else "length"))
        return outs


def test_orchestrator_forks_joins_and_matches_serializer(toy_tok, toy_setup):
    _, prompt, resp, units, _ = toy_setup
    eng = OracleEngine(units)
    r = ParallelOrchestrator(eng, toy_tok, OrchestratorConfig(temperature=0.0)).run(prompt)
    assert r.response_ids == resp  # token for token what the serializer produced
    assert r.finish_reason == "stop" and not r.malformed
    ids = tag_ids(toy_tok)
    # SEQ -> PAR(2) -> SEQ -> PAR(3) -> SEQ -> DONE
    assert [len(c[0]) for c in eng.calls] == [1, 2, 1, 3, 1]
    assert eng.calls[1][1] == [ids["</Thread>"], ids["eos"]]
    for k, call in ((1, eng.calls[1]), (3, eng.calls[3])):
        for i, pr in enumerate(call[0]):
            assert toy_tok.decode(pr[-5:]) == f"\n<Thread>\n{i + 1}:", k
    assert r.stats.n_blocks == 2 and r.stats.threads_per_block == [2, 3]
    assert r.stats == parallel_stats(resp, ids)


def _fixed_engine(script):
    class E:
        calls = []

        def complete(self, prompts, stop_ids, max_tokens, temperature=1.0, top_p=1.0):
            self.calls.append(prompts)
            return [script(p, stop_ids, m) for p, m in zip(prompts, max_tokens)]

    return E()


def test_orchestrator_guards(toy_tok):
    enc = lambda s: toy_tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    ids = tag_ids(toy_tok)
    prompt = [toy_tok.bos_token_id]
    # 1. </Outlines> without parseable outlines stays sequential; max_iters terminates
    eng = _fixed_engine(lambda p, s, m: EngineCompletion(enc(" A<Outlines></Outlines>"), "stop"))
    r = ParallelOrchestrator(eng, toy_tok, OrchestratorConfig(max_iters=4)).run(prompt)
    assert r.finish_reason == "max_iters" and len(eng.calls) == 4
    assert r.malformed["outlines_without_numbers"] == 4
    # 2. duplicated outline numbers are deduped; a thread hitting EOS closes thread + block, ends
    head = enc(
        "<think>\n<Parallel>\n<Outlines>\n<Outline>1: s0</Outline>\n<Outline>1: s1</Outline>\n"
    )
    head += enc("<Outline>2: s1</Outline>\n</Outlines>")

    def script(p, s, m):
        if ids["</Outlines>"] in s:
            return EngineCompletion(head, "stop")
        return EngineCompletion(enc(" s1 s2") + [ids["eos"]], "stop")

    eng = _fixed_engine(script)
    r = ParallelOrchestrator(eng, toy_tok).run(prompt)
    assert len(eng.calls) == 2 and len(eng.calls[1]) == 2
    assert r.finish_reason == "thread_eos"
    text = toy_tok.decode(r.response_ids)
    assert text.endswith("2: s1 s2\n</Thread>\n</Parallel>") and r.malformed["unclosed_thread"] == 2

    # 3. budget: a long-winded engine is cut at budget_total, threads included
    def filler(p, s, m):
        return EngineCompletion(
            (head if ids["</Outlines>"] in s else []) + enc(" s1") * 50, "length"
        )

    for budget in (5, 30):
        r = ParallelOrchestrator(_fixed_engine(filler), toy_tok,
                                 OrchestratorConfig(budget_total=budget)).run(prompt)  # fmt: skip
        assert len(r.response_ids) <= budget and r.finish_reason == "length"
    # 4. engine returning nothing ends the rollout
    r = ParallelOrchestrator(
        _fixed_engine(lambda p, s, m: EngineCompletion([], "stop")), toy_tok
    ).run(prompt)
    assert r.response_ids == [] and r.stats.eta == 0.0


def test_hf_engine_batched_equals_single_and_stops(toy_tok):
    model = _small_model(len(toy_tok), "qwen3")
    eng = HFGenerateEngine(model, toy_tok.pad_token_id, batch_size=8)
    prompts = [[1, 20, 21, 22, 23], [1, 30], [1, 25, 26]]
    out = eng.complete(prompts, [2], [6, 6, 6], temperature=0.0)
    for p, o in zip(prompts, out):
        assert eng.complete([p], [2], [6], temperature=0.0)[0].ids == o.ids
    first = out[0].ids[2]
    cut = eng.complete(prompts[:1], [first], [6], temperature=0.0)[0]
    assert cut.ids == out[0].ids[:3] and cut.finish_reason == "stop"


# --------------------------------------------------------------------------- stats / rewards


def test_parallel_stats_hand_computed():
    ids = {"<Parallel>": 1, "</Parallel>": 2, "<Thread>": 3, "</Thread>": 4}
    a, o, x = 7, 8, 9
    # 3 seq + <Parallel> + 2 outline + [<Thread> 5 </Thread>] [<Thread> 3 </Thread>] + </Parallel> + 2 seq
    resp = [a] * 3 + [1, o, o, 3, *[x] * 5, 4, 3, *[x] * 3, 4, 2] + [a] * 2
    s = parallel_stats(resp, ids)
    # total 21; longest = seq (3 + 1 + 1 + 2) + S_b (2 outlines + 4 wrappers) + max(5, 3) = 18
    assert (s.total, s.longest, s.n_blocks, s.threads_per_block) == (21, 18, 1, [2])
    assert s.eta == pytest.approx(1 - 18 / 21) and s.total == len(resp)
    assert parallel_stats([a] * 10, ids).eta == 0.0
    assert parallel_stats([], ids).eta == 0.0
    # unterminated block and thread at the end are flushed: seq 1, S_b 3, threads (3, 1)
    s = parallel_stats([1, 3, x, x, x, 4, 3, x], ids)
    assert (s.total, s.longest) == (8, 7)
    with pytest.raises(ValueError, match="missing tag ids"):
        parallel_stats([1], {"<Parallel>": 1})


def test_speedup_report():
    rep = speedup_report([[10, 20], [30]], [[5, 5], [30]], [[1, 0], [1]], [[1, 1], [0]])
    assert rep["speedup"] == pytest.approx((15 / 5 + 1) / 2)
    assert rep["speedup_correct"] == pytest.approx(10 / 5) == rep["max_speedup_correct"]


def test_pgrpo_reward_variants():
    for eta in (0.0, 0.1, 0.9):
        assert pgrpo_reward(False, eta) == 0.0
        assert pgrpo_reward(False, eta, variant="repo") == -1.0
    assert pgrpo_reward(True, 0.1) == pytest.approx(1.05)
    assert pgrpo_reward(True, 0.9) == pytest.approx(1.2)  # clipped at rho_clip
    assert pgrpo_reward(True, 0.9, variant="repo") == pytest.approx(1.1)
    assert pgrpo_reward(True, float("nan")) == 1.0
    with pytest.raises(ValueError, match="rho"):
        pgrpo_reward(True, 0.1, rho=0.0)
    with pytest.raises(ValueError, match="rho_clip"):
        pgrpo_reward(True, 0.1, rho_clip=-1)
    with pytest.raises(ValueError, match="variant"):
        pgrpo_reward(True, 0.1, variant="x")


def test_group_advantages_mean_vs_std():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.2, 1.19, 1.2, 1.18]])
    a = group_advantages(r)
    torch.testing.assert_close(a.sum(1), torch.zeros(2), atol=1e-6, rtol=0)
    torch.testing.assert_close(a[0], torch.tensor([0.5, -0.5, -0.5, 0.5]))
    assert a[1].abs().max() <= 0.2  # all-correct group: only the small acceleration spread
    s = group_advantages(r, norm="std")
    # sample std (Bessel, as the official code and TRL): sum of squares = k - 1
    torch.testing.assert_close(s.pow(2).sum(1), torch.full((2,), 3.0), atol=1e-3, rtol=0)
    with pytest.raises(ValueError, match="k >= 2"):
        group_advantages(torch.ones(3, 1))
    with pytest.raises(ValueError, match="2-D"):
        group_advantages(torch.ones(3))
    with pytest.raises(ValueError, match="norm"):
        group_advantages(r, norm="max")


def test_is_correct_uses_last_boxed():
    assert is_correct("first \\boxed{3} then \\boxed{\\frac{1}{2}}", "0.5")
    assert not is_correct("\\boxed{1/2} then \\boxed{3}", "1/2")
    assert not is_correct("no box here 7", "7")
    with pytest.raises(ValueError, match="gold"):
        is_correct("\\boxed{1}", "")


def test_broadcast_loss_equals_trajectory_reinforce(toy_tok, toy_setup):
    """Eq. 4 over the orchestrator's units == A · log π(τ) / T on the trie (App. A.3), fp64."""
    _, prompt, _, units, _ = toy_setup
    roll = ParallelOrchestrator(OracleEngine(units), toy_tok, OrchestratorConfig()).run(prompt)
    model = _small_model(len(toy_tok), "qwen3", dtype=torch.float64)
    adv = 0.7
    # (a) one row per unit, padded, Eq. 4
    rows = roll.units
    t = max(len(u.ids) for u in rows)
    logp = torch.zeros(len(rows), t, dtype=torch.float64)
    mask = torch.zeros(len(rows), t)
    for i, u in enumerate(rows):
        lp = torch.log_softmax(model(torch.tensor([u.ids])).logits[0], -1)
        tok_lp = lp[:-1].gather(1, torch.tensor(u.ids[1:])[:, None])[:, 0]
        logp[i, : len(u.ids) - 1] = tok_lp
        mask[i, u.n_context - 1 : len(u.ids) - 1] = 1
    loss_a = pgrpo_loss(logp, torch.full((len(rows),), adv, dtype=torch.float64), mask)
    ga = torch.autograd.grad(loss_a, list(model.parameters()))
    # (b) the whole trajectory as one trie with the completion tokens trained once
    order = sorted(rows, key=lambda u: -len(u.ids))
    batch = TrieCollator(toy_tok.pad_token_id, dtype=torch.float64)([build_packed(order)])
    nll = parent_gather_loss(packed_forward(model, batch), batch["input_ids"], batch["parent"],
                             batch["loss_mask"], reduction="sum")  # fmt: skip
    n_tok = int(batch["loss_mask"].sum())
    assert (
        n_tok == int(mask.sum()) == len(roll.response_ids) - 26
    )  # inserted: per block 5 + 4(K-1) + 2, K = 2, 3
    gb = torch.autograd.grad(adv * nll / n_tok, list(model.parameters()))
    # Values agree to ~1e-12; gradients to ~1e-8 of their scale (RoPE cos/sin are float32 in HF,
    # and their rounding depends on the sequence shape).
    torch.testing.assert_close(loss_a, adv * nll / n_tok, atol=1e-10, rtol=1e-10)
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y, atol=1e-6, rtol=1e-5)


def test_config_rejects_bad_values(tmp_path, monkeypatch):
    from methods.threadweaver import PGRPOConfig, ThreadWeaverRunConfig, TrieSFTConfig

    with pytest.raises(ValueError, match="arms"):
        ThreadWeaverConfig(arms=["tw"])
    kw = {"output_dir": str(tmp_path), "use_cpu": True, "bf16": False}
    with pytest.raises(ValueError, match="rho"):
        PGRPOConfig(rho=0, **kw)
    with pytest.raises(ValueError, match="num_generations"):
        PGRPOConfig(num_generations=1, per_device_train_batch_size=1, **kw)
    with pytest.raises(ValueError, match="adv_norm"):
        PGRPOConfig(adv_norm="z", **kw)
    with pytest.raises(ValueError, match="beta"):
        PGRPOConfig(beta=0.1, **kw)
    with pytest.raises(ValueError, match="sft_mode"):
        TrieSFTConfig(sft_mode="x", **kw)
    with pytest.raises(ValueError, match="mask_impl"):
        ThreadWeaverRunConfig(mask_impl="sparse")
    with pytest.raises(ValueError, match="method.mask_impl instead"):
        ThreadWeaverRunConfig(rl_trainer={"mask_impl": "dense"})
    with pytest.raises(ValueError, match="method.rollout"):
        ThreadWeaverRunConfig(rl_trainer={"rollout_budget_tokens": 5})
    # attention implementations that cannot serve the trie mask are rejected before loading
    run_cfg = ThreadWeaverRunConfig(stage="eval", mask_impl="flex")
    assert run_cfg.attn_implementation(None) == "flex_attention"
    with pytest.raises(ValueError, match="cannot serve method.mask_impl=flex"):
        run_cfg.attn_implementation("sdpa")
    with pytest.raises(ValueError, match="flash_attention_2"):
        ThreadWeaverRunConfig(stage="sft").attn_implementation("flash_attention_2")
    from common.config import ModelConfig

    with pytest.raises(ValueError, match="flash_attention_2"):
        ThreadWeaverRunConfig(stage="rl").check_model(
            ModelConfig(name="x", attn_implementation="flash_attention_2")
        )
    ThreadWeaverRunConfig(stage="eval").check_model(ModelConfig(name="x", attn_implementation="x"))


def test_flex_mask_on_cpu_is_rejected_at_validation_with_the_reason(monkeypatch):
    """The shipped preset (mask_impl: flex) stops at validation on a CPU, naming torch's reason;
    with a CUDA device visible the same config validates (training happens there)."""
    from common.config import ConfigError, validate
    from common.registry import compose

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for stage in ("sft", "rl"):
        with pytest.raises(ConfigError, match="does not support backward on CPU"):
            validate(compose(["experiment=threadweaver_paper", f"method.stage={stage}"]))
    assert validate(compose(["experiment=threadweaver_paper", "method.stage=eval"])).method
    # the reason is real: torch's FlexAttention refuses the backward pass on CPU tensors
    from torch.nn.attention.flex_attention import flex_attention

    q = torch.randn(1, 1, 16, 8, requires_grad=True)
    with pytest.raises(NotImplementedError, match="backward on CPU"):
        flex_attention(q, q, q)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    run = validate(compose(["experiment=threadweaver_paper", "method.stage=sft"]))
    assert run.method.mask_impl == "flex" and run.model.name == "Qwen/Qwen3-8B"
    assert run.method.attn_implementation(run.model.attn_implementation) == "flex_attention"


# --------------------------------------------------------------------------- data pipeline


def _scripted_llm(steps_reply: str, rewrite_reply: str = "[]"):
    from common.llm import ScriptedChat

    def reply(msgs):
        last = msgs[-1]["content"]
        if "top-level steps" in last:
            return steps_reply
        if "ADJACENT" in last:
            return '{"parallel": [{"steps": [2, 3], "reason": "independent products"}]}'
        if "Sibling threads" in last:
            return rewrite_reply if "5*6" in last.split("Thread:")[-1] else "[]"
        return "<Outlines>\n<Outline>1: multiply 3 by 4</Outline>\n<Outline>2: multiply 5 by 6</Outline>\n</Outlines>"

    return ScriptedChat(reply)


def test_data_pipeline_end_to_end_with_scripted_llm():
    from methods.threadweaver.data_pipeline import PipelineReport, apply_replacements, convert_trace

    trace = "We need 3*4 + 5*6.\nFirst 3*4 = 12.\nAs above, 5*6 = 30.\nTotal 12 + 30 = 42."
    final = "The answer is \\boxed{42}."
    rep = PipelineReport()
    llm = _scripted_llm('{"steps": [[1, 1], [2, 2], [3, 3], [4, 4]]}', '[["As above, ", ""]]')
    text = convert_trace(trace, final, "42", llm, rep)
    assert text is not None and validate(text).ok and rep.kept == 1
    block = parse(text).blocks[0]
    assert block.threads == [("1", "First 3*4 = 12."), ("2", "5*6 = 30.")]
    assert block.outlines[1] == ("2", "multiply 5 by 6")
    assert len(llm.calls) == 2 + 2 + 1  # annotate (2 turns), one rewrite per thread, one outline
    # malformed replies are counted, not raised: a gap in the step ranges, a wrong answer
    assert (
        convert_trace(trace, final, "42", _scripted_llm('{"steps": [[1, 2], [4, 4]]}'), rep) is None
    )
    assert (
        convert_trace(
            trace, final, "41", _scripted_llm('{"steps": [[1, 1], [2, 2], [3, 3], [4, 4]]}'), rep
        )
        is None
    )
    assert rep.dropped == 2 and sum(rep.failures.values()) == 2
    with pytest.raises(ValueError, match="occurs 2 times"):
        apply_replacements("a a", [["a", "b"]])


def test_trie_sft_trainer_uses_parent_gather_loss(toy_tok, toy_setup, tmp_path):
    from methods.threadweaver import TrieSFTConfig, TrieSFTTrainer, packed_dataset

    _, _, _, units, _ = toy_setup
    packs = [build_packed(units), build_packed(units[:3])]
    model = _small_model(len(toy_tok), "qwen3")
    args = TrieSFTConfig(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, learning_rate=1e-2,
        use_cpu=True, bf16=False, dataloader_pin_memory=False, logging_steps=1, disable_tqdm=True,
    )  # fmt: skip
    trainer = TrieSFTTrainer(
        model=model, args=args, train_dataset=packed_dataset(packs), processing_class=toy_tok
    )
    batch = TrieCollator(toy_tok.pad_token_id)(packs)
    with torch.no_grad():
        expected = parent_gather_loss(
            packed_forward(model, batch), batch["input_ids"], batch["parent"], batch["loss_mask"]
        )
        torch.testing.assert_close(trainer.compute_loss(model, batch), expected)
    before = model.lm_head.weight.detach().clone()
    trainer.train()
    assert not torch.equal(before, model.lm_head.weight)


def test_ar_sft_baseline_is_plain_causal_completion_loss(toy_tok, toy_setup):
    """sft_mode=ar (official sft_autoregressive.py): the full trajectory only, causal attention,
    loss on the response tokens = HF's shifted loss with the prompt labelled -100."""
    from methods.threadweaver.paper import sft_packs

    traj, prompt, resp, units, _ = toy_setup
    import copy

    tok = copy.deepcopy(toy_tok)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # plain prompt
    rows = [{"problem": "Q: s0 s2\n", "response": serialize(traj)}]
    (ar,), _ = sft_packs(tok, rows, None, mode="ar")
    (tr,), _ = sft_packs(tok, rows, None, mode="trie")
    n = len(ar)
    assert len(tr) > n  # the trie adds the thread branches
    assert torch.equal(ar.position_ids, torch.arange(n)) and torch.equal(
        ar.parent, torch.arange(n) - 1
    )
    assert torch.equal(ancestor_mask(ar.tin, ar.tout), torch.ones(n, n).tril().bool())
    assert torch.equal(ar.input_ids, tr.input_ids[:n])  # same full trajectory, same tokens
    model = _small_model(len(tok), "qwen3")
    batch = TrieCollator(tok.pad_token_id)([ar])
    with torch.no_grad():
        ours = parent_gather_loss(packed_forward(model, batch), batch["input_ids"],
                                  batch["parent"], batch["loss_mask"])  # fmt: skip
        n_prompt = n - int(ar.loss_mask.sum())
        labels = ar.input_ids.clone()[None]
        labels[0, :n_prompt] = -100
        hf = model(input_ids=ar.input_ids[None], labels=labels).loss
    torch.testing.assert_close(ours, hf, atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------- P-GRPO trainer


class MixedOracle:
    """Even rows of the first request follow a correct parallel trace, odd rows a sequential one
    with a wrong answer; later requests continue whichever trace their context is a prefix of."""

    def __init__(self, par_units: list[Unit], seq_units: list[Unit]):
        self.par, self.seq = OracleEngine(par_units), OracleEngine(seq_units)

    def complete(self, prompts, stop_ids, max_tokens, temperature=1.0, top_p=1.0):
        outs = []
        for i, (p, m) in enumerate(zip(prompts, max_tokens)):
            fresh = len(p) == self.n_prompt
            if fresh:
                eng = self.par if i % 2 == 0 else self.seq
            else:
                eng = self.seq if self.seq.full[: len(p)] == p else self.par
            outs += eng.complete([p], stop_ids, [m], temperature, top_p)
        return outs


def test_pgrpo_trainer_one_step_matches_eq4(toy_tok, toy_setup, tmp_path):
    """PGRPOTrainer on TRL: orchestrated rollouts, Eq. 5-9 rewards/advantages, Eq. 4 loss."""
    import copy

    from trl import GRPOConfig

    from common.rl import cpu_grpo_kwargs
    from methods.threadweaver import PGRPOConfig, PGRPOReward, PGRPOTrainer
    from methods.threadweaver.toy import toy_trajectory

    traj, prompt, _, par_units, enc = toy_setup
    cb = make_codebook(4, 4, seed=0)
    seq_traj = toy_trajectory([0, 2], cb, "seq")
    seq_traj = Trajectory(seq_traj.segments, "A: c0 c0")  # wrong answer
    _, seq_units = extract_units(prompt, seq_traj, enc, toy_tok.eos_token_id)
    engine = MixedOracle(par_units, seq_units)
    engine.n_prompt = len(prompt)
    gold = traj.final

    class Recording(PGRPOTrainer):
        rec: list = []

        def policy_loss(self, model, inputs):
            loss = super().policy_loss(model, inputs)
            self.rec.append((inputs, loss.detach()))
            return loss

    from datasets import Dataset

    ds = Dataset.from_list([{"prompt": toy_tok.decode(prompt), "answer": gold}] * 4)
    model = _small_model(len(toy_tok), "qwen3")
    model0 = copy.deepcopy(model)
    args = PGRPOConfig(**cpu_grpo_kwargs(output_dir=str(tmp_path), max_steps=1, learning_rate=1e-2,
                                         per_device_train_batch_size=4, num_generations=4),
                       rollout_budget_tokens=200)  # fmt: skip
    reward = PGRPOReward(verify=lambda text, g: text.replace("<eos>", "").endswith(g))
    trainer = Recording(
        model=model, args=args, train_dataset=ds, processing_class=toy_tok,
        reward_funcs=[reward], engine_factory=lambda tr: engine,
    )  # fmt: skip
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    # rewards (Eq. 5-8) and mean-centred advantages (Eq. 9)
    ids = tag_ids(toy_tok)
    eta = parallel_stats(par_units[0].completion, ids).eta
    r_par = pgrpo_reward(True, eta)
    assert r_par > 1.0
    torch.testing.assert_close(
        trainer.last_rewards, torch.tensor([[r_par, 0.0, r_par, 0.0]]), atol=1e-6, rtol=0
    )
    torch.testing.assert_close(trainer.last_advantages, trainer.last_rewards - r_par / 2)
    # Eq. 4 from separate forwards of every unit of every row, with the pre-step model
    (inputs, loss), *_ = trainer.rec
    rows = trainer._row_units(inputs)
    assert sorted(len(u) for u in rows) == [1, 1, 8, 8]  # SEQ; SEQ/PAR(2)/SEQ/PAR(3)/SEQ
    ref, n_tok = 0.0, 0
    with torch.no_grad():
        for units, a in zip(rows, inputs["advantages"].tolist()):
            for u in units:
                lp = torch.log_softmax(model0(torch.tensor([u.ids])).logits[0], -1)
                tok_lp = lp[:-1].gather(1, torch.tensor(u.ids[1:])[:, None])[:, 0]
                ref -= a * tok_lp[u.n_context - 1 :].sum()
                n_tok += len(u.completion)
    # env_mask marks exactly the tokens the model generated: TRL's token count == unit completions
    assert int(inputs["num_items_in_batch"]) == n_tok
    torch.testing.assert_close(loss, ref / n_tok, atol=1e-5, rtol=1e-4)
    # the loss is reduced by common.rl's reduce_loss: loss_type="grpo" is a per-row mean over the
    # row's trained nodes (then over rows), in train and eval mode alike (no accumulation here)
    per_row = []
    with torch.no_grad():
        for units, a in zip(rows, inputs["advantages"].tolist()):
            tot, cnt = 0.0, 0
            for u in units:
                lp = torch.log_softmax(model(torch.tensor([u.ids])).logits[0], -1)
                tok_lp = lp[:-1].gather(1, torch.tensor(u.ids[1:])[:, None])[:, 0]
                tot -= a * tok_lp[u.n_context - 1 :].sum()
                cnt += len(u.completion)
            per_row.append((tot, cnt))
    trainer.loss_type = "grpo"
    for training in (True, False):
        model.train(training)
        with torch.no_grad():
            got = trainer.policy_loss(model, inputs)
        # a node shared by two units of a row (same context, same token) is trained once
        n_nodes = [int(((p.loss_mask) & (p.parent >= 0)).sum()) for p in
                   [build_packed(sorted(u, key=lambda x: -len(x.ids))) for u in rows]]  # fmt: skip
        want = sum(t / n for (t, _), n in zip(per_row, n_nodes)) / len(rows)
        torch.testing.assert_close(
            got, torch.as_tensor(want, dtype=got.dtype), atol=1e-5, rtol=1e-4
        )
    model.train(False)
    with pytest.raises(TypeError, match="PGRPOConfig"):
        PGRPOTrainer(model=model, args=GRPOConfig(**cpu_grpo_kwargs(output_dir=str(tmp_path))),
                     train_dataset=ds, processing_class=toy_tok)  # fmt: skip
    # TRL options the trie loss does not implement are refused at construction, naming them
    for bad in ({"loss_type": "cispo"}, {"scale_rewards": "batch"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            PGRPOTrainer(model=model, args=PGRPOConfig(**cpu_grpo_kwargs(output_dir=str(tmp_path)),
                         **bad), train_dataset=ds, processing_class=toy_tok)  # fmt: skip


# --------------------------------------------------------------------------- paper drivers


def _bench_fixtures(d) -> dict[str, str]:
    """Two rows per benchmark in the hub layouts (MATH-500 jsonl, AIME/AMC/Minerva/Olympiad)."""
    import json

    import pandas as pd

    rows = {
        "math500.jsonl": [{"problem": "What is 3+4?", "solution": "So \\boxed{7}.", "answer": "7",
                           "subject": "Algebra", "level": 1, "unique_id": "test/a/1.json"},
                          {"problem": "Half of 1?", "solution": "\\boxed{\\frac12}",
                           "answer": "\\frac{1}{2}", "subject": "Algebra", "level": 1,
                           "unique_id": "test/a/2.json"}],
        "aime24.jsonl": [{"id": 60, "problem": "Find 2+2.", "solution": "Hence \\boxed{4}",
                          "url": "u"}, {"id": 61, "problem": "Find 5.", "solution": "\\boxed{5}",
                                        "url": "u"}],
        "aime25.jsonl": [{"problem": "Find 6.", "answer": "6", "id": "0"},
                         {"problem": "Find 8.", "answer": "8", "id": "1"}],
        "amc23.jsonl": [{"id": 0, "question": "Find 9.", "answer": 9.0, "url": "u"},
                        {"id": 1, "question": "Find 1.", "answer": 1.0, "url": "u"}],
        "minerva.jsonl": [{"question": "Speed?", "answer": "3e8"},
                          {"question": "Mass?", "answer": "2"}],
    }  # fmt: skip
    out = {}
    for name, rs in rows.items():
        (d / name).write_text("\n".join(json.dumps(r) for r in rs))
        out[name.split(".")[0]] = str(d / name)
    olymp = [{"id": 1, "question": "Compute 10.", "final_answer": ["$10$"], "is_multiple_answer":
              False, "unit": None, "answer_type": "Numerical"},
             {"id": 2, "question": "Compute 11.", "final_answer": ["$11$"], "is_multiple_answer":
              False, "unit": None, "answer_type": "Numerical"}]  # fmt: skip
    pd.DataFrame(olymp).to_parquet(d / "olympiadbench.parquet")
    out["olympiadbench"] = str(d / "olympiadbench.parquet")
    return out


def test_paper_loaders_read_hub_layouts(tmp_path):
    from methods.threadweaver.paper import BENCHMARKS, load_problems

    files = _bench_fixtures(tmp_path)
    assert set(files) == set(BENCHMARKS)
    # Avg@k of §6.1: 32 AIME24/25, 8 AMC23, 1 MATH500, 4 Minerva, 8 OlympiadBench
    assert [BENCHMARKS[n][1] for n in ("aime24", "aime25", "amc23", "math500", "minerva",
                                       "olympiadbench")] == [32, 32, 8, 1, 4, 8]  # fmt: skip
    got = {n: [r["answer"] for r in load_problems(p)] for n, p in files.items()}
    assert got == {"math500": ["7", "\\frac{1}{2}"], "aime24": ["4", "5"], "aime25": ["6", "8"],
                   "amc23": ["9", "1"], "minerva": ["3e8", "2"],
                   "olympiadbench": ["10", "11"]}  # fmt: skip
    assert load_problems(files["amc23"])[0]["problem"] == "Find 9."
    (tmp_path / "bad.jsonl").write_text('{"text": "x"}')
    with pytest.raises(ValueError, match="problem"):
        load_problems(tmp_path / "bad.jsonl")
    with pytest.raises(FileNotFoundError):
        load_problems(tmp_path / "missing.jsonl")


# ---- paper stages on the CPU: the shipped preset, shrunk (tests/test_paper_presets.py runs these)
# method.mask_impl=dense: the preset's FlexAttention mask has no backward pass on the CPU, which the
# config rejects at validation (test_flex_mask_on_cpu_is_rejected_at_validation_with_the_reason).
_SMOKE_MODEL = ["model.path={tiny_qwen3}", "model.dtype=float32", "method.mask_impl=dense"]
_SMOKE_ROLLOUT = ["method.rollout.budget_tokens=8"]
_SEQ_TRACE = "We need 3*4 + 5*6.\nFirst 3*4 = 12.\nAs above, 5*6 = 30.\nTotal 12 + 30 = 42."
PAPER_SMOKE = {
    "synth": ["method.synth.source.path={tw_seq}", "method.synth.llm_base_url={tw_llm}",
              "method.synth.workers=2"],
    "self_train": [*_SMOKE_MODEL, *_SMOKE_ROLLOUT, "method.rl_data.path={tw_aime25}",
                   "method.eval.engine=hf"],
    "sft": [*_SMOKE_MODEL, "method.sft_data.path={tw_sft}", "+method.sft_trainer.max_steps=1",
            "method.sft_trainer.bf16=false", "method.sft_trainer.gradient_accumulation_steps=1"],
    "rl": [*_SMOKE_MODEL, *_SMOKE_ROLLOUT, "method.rl_data.path={tw_aime25}",
           "method.rl_trainer.num_generations=2", "method.rl_trainer.per_device_train_batch_size=2",
           "method.rl_trainer.max_steps=1", "method.rl_trainer.bf16=false"],
    "threadweaver_paper_official/rl": [
        *_SMOKE_MODEL, *_SMOKE_ROLLOUT, "method.rl_data.path={tw_aime25}",
        "method.rl_trainer.num_generations=2", "method.rl_trainer.per_device_train_batch_size=2",
        "method.rl_trainer.gradient_accumulation_steps=1", "method.rl_trainer.max_steps=1",
        "method.rl_trainer.bf16=false"],
    "eval": [*_SMOKE_MODEL, *_SMOKE_ROLLOUT, "method.eval.engine=hf", "method.eval.samples=2",
             *(f"benchmark.sets.{n}.path={{tw_{n}}}" for n in
               ("aime24", "aime25", "amc23", "math500", "minerva", "olympiadbench")),
             *(f"benchmark.sets.{n}.limit=1" for n in
               ("aime24", "aime25", "amc23", "math500", "minerva", "olympiadbench"))],
}  # fmt: skip


def paper_smoke_setup(tmp_path) -> dict[str, str]:
    """SFT traces ({problem, response}) and the six benchmarks in their hub layouts."""
    import json

    block = ParallelBlock([("1", "left"), ("2", "right")], [("1", "3*4 = 12"), ("2", "5*6 = 30")])
    traj = Trajectory(["We add two products.\n", block, "\n12 + 30 = 42."], "\\boxed{42}")
    rows = [{"problem": "3*4+5*6?", "response": serialize(traj)},
            {"problem": "bad", "response": "no think tags"}]  # fmt: skip
    (tmp_path / "traces.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    seq = [
        {"problem": "3*4+5*6?", "answer": "42",
         "response": f"<think>\n{_SEQ_TRACE}\n</think>\nThe answer is \\boxed{{42}}."},
        {"problem": "3*4+5*6?", "answer": "41",  # the rewrite keeps 42: dropped by the filter
         "response": f"<think>\n{_SEQ_TRACE}\n</think>\nThe answer is \\boxed{{42}}."},
        {"problem": "x", "answer": "1", "response": "no closing think tag"},
    ]  # fmt: skip
    (tmp_path / "sequential.jsonl").write_text("\n".join(json.dumps(r) for r in seq))
    script = _scripted_llm('{"steps": [[1, 1], [2, 2], [3, 3], [4, 4]]}', '[["As above, ", ""]]')
    server = FakeOpenAI(lambda body: script._fn(body["messages"]))  # daemon thread
    files = _bench_fixtures(tmp_path)
    return {"tw_sft": str(tmp_path / "traces.jsonl"), "tw_seq": str(tmp_path / "sequential.jsonl"),
            "tw_llm": server.url, **{f"tw_{k}": v for k, v in files.items()}}  # fmt: skip


def test_synth_stage_rewrites_through_an_openai_endpoint(tmp_path, tiny_model_dirs):
    """stage=synth: sequential traces -> the 4-call pipeline over HTTP -> stage1.jsonl that the
    sft stage reads; a wrong gold and a trace without </think> are dropped and counted."""
    import json

    from common.registry import compose, run_method
    from methods.threadweaver.paper import sft_packs

    vals = paper_smoke_setup(tmp_path)
    ov = [o.format(**vals) for o in PAPER_SMOKE["synth"]]
    cfg = compose(["experiment=threadweaver_paper", "method.stage=synth", *ov],
                  run_dir=tmp_path / "run")  # fmt: skip
    m = run_method(cfg)
    assert (m["synth/n_source"], m["synth/kept"], m["synth/dropped"]) == (3.0, 1.0, 2.0)
    assert m["synth/llm_requests"] == 10.0  # 2 traces reach the LLM, 5 calls each
    assert m["synth/blocks_per_trajectory"] == 1.0 and m["synth/threads_per_block"] == 2.0
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["failures"] == {"source response has no </think>": 1,
                               "answer incorrect or missing \\boxed": 1}  # fmt: skip
    rows = [
        json.loads(x)
        for x in (tmp_path / "run" / "synth" / "stage1.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 1 and validate(rows[0]["response"]).ok
    assert parse(rows[0]["response"]).blocks[0].threads == [
        ("1", "First 3*4 = 12."),
        ("2", "5*6 = 30."),
    ]
    from common.models import load_tokenizer

    tok = load_tokenizer(tiny_model_dirs["tiny_qwen3"])
    add_threadweaver_tokens(None, tok)
    packs, dropped = sft_packs(tok, rows, None)
    assert len(packs) == 1 and dropped == 0


def test_keep_rollouts_filters_format_and_answer():
    from methods.threadweaver.paper_data import keep_rollouts, split_sequential

    block = ParallelBlock([("1", "a"), ("2", "b")], [("1", "3*4 = 12"), ("2", "5*6 = 30")])
    good = serialize(Trajectory(["Split.\n", block, "\n12 + 30 = 42."], "\\boxed{42}"))
    texts = [(good, True), (good, False), ("<think>\n<Parallel>\n", True), (good, True)]
    probs = [{"problem": "p", "answer": "42"}, {"problem": "q", "answer": "7"}]
    kept, counts = keep_rollouts(texts, probs, samples=2)
    assert kept == [{"problem": "p", "response": good, "answer": "42"}]
    assert counts == {"invalid": 2, "incorrect": 1}  # unfinished + malformed; q's answer is 7
    with pytest.raises(ValueError, match="3 rollouts for 2 problems x 2"):
        keep_rollouts(texts[:3], probs, samples=2)
    assert split_sequential("<think>\nA\nB\n</think>\nfinal") == ("A\nB", "final")
    assert split_sequential("no tags") is None


def test_self_train_stage_counts_every_rollout(tmp_path, tiny_model_dirs):
    """stage=self_train on a random tiny Qwen3: every rollout is counted as kept, invalid or
    incorrect, and the kept file exists (empty for a random model)."""
    from common.registry import compose, run_method

    vals = {**tiny_model_dirs, **paper_smoke_setup(tmp_path)}
    ov = [o.format(**vals) for o in PAPER_SMOKE["self_train"]]
    cfg = compose(["experiment=threadweaver_paper", "method.stage=self_train", *ov,
                   "method.synth.samples=2"], run_dir=tmp_path / "run")  # fmt: skip
    m = run_method(cfg)
    n = m["self_train/n_rollouts"]
    assert n == 2.0 * 2  # aime25 fixture: two problems, two samples each
    assert m["self_train/kept"] + m["self_train/invalid"] + m["self_train/incorrect"] == n
    kept = (tmp_path / "run" / "self_train" / "self_train.jsonl").read_text().splitlines()
    assert len(kept) == m["self_train/kept"]


def test_paper_stages_chain_sft_rl_eval(tmp_path, tiny_model_dirs):
    """sft -> rl (from the SFT checkpoint) -> eval (from the RL one) through the CLI's stages."""
    import json

    from common.registry import compose, run_method
    from methods.threadweaver.paper import compare, sft_packs

    vals = {**tiny_model_dirs, **paper_smoke_setup(tmp_path)}
    fmt = lambda o: o.format(**vals)  # noqa: E731
    tok = __import__("common.models", fromlist=["load_tokenizer"]).load_tokenizer(
        vals["tiny_qwen3"]
    )
    add_threadweaver_tokens(None, tok)
    rows = [json.loads(x) for x in (tmp_path / "traces.jsonl").read_text().splitlines()]
    packs, dropped = sft_packs(tok, rows, 4096)
    assert len(packs) == 1 and dropped == 1 and packs[0].loss_mask.sum() > 0
    prev = vals["tiny_qwen3"]
    for stage in ("sft", "rl", "eval"):
        ov = [fmt(o) for o in PAPER_SMOKE[stage] if not o.startswith("model.path")]
        cfg = compose(["experiment=threadweaver_paper", f"method.stage={stage}",
                       f"model.path={prev}", *ov], run_dir=tmp_path / stage)  # fmt: skip
        metrics = run_method(cfg)
        payload = json.loads((tmp_path / stage / "results.json").read_text())
        assert any(prev in e["spec"] for e in payload["models_loaded"]), payload["models_loaded"]
        prev = str(tmp_path / stage / "model")
    assert metrics["math500/n"] == 1.0
    for name in ("aime24", "math500", "olympiadbench"):
        assert (
            0.0 <= metrics[f"{name}/accuracy"] <= 1.0 and 0 < metrics[f"{name}/token_latency"] <= 8
        )
    recs = json.loads((tmp_path / "eval" / "records.json").read_text())
    assert len(recs["aime24"][0]["longest"]) == 2 and len(recs["math500"]) == 1
    assert compare(recs, recs)["math500"]["speedup"] == pytest.approx(1.0)


def test_paper_stage_loads_the_attention_implementation_of_the_mask(tmp_path, tiny_model_dirs,
                                                                     monkeypatch):  # fmt: skip
    """dense -> sdpa; flex -> flex_attention (the issue-26 TypeError came from sdpa + BlockMask);
    a model preset whose attention cannot serve the mask is refused before the model loads."""
    from common.config import validate
    from common.registry import compose
    from methods.threadweaver import paper

    base = ["experiment=threadweaver_paper", "method.stage=eval",
            f"model.path={tiny_model_dirs['tiny_qwen3']}", "model.dtype=float32"]  # fmt: skip
    for mask, attn in (("dense", "sdpa"), ("flex", "flex_attention")):
        run = validate(compose([*base, f"method.mask_impl={mask}"], run_dir=tmp_path))
        model, _ = paper._load(run, training=True)
        assert model.config._attn_implementation == attn
    run = validate(compose([*base, "method.mask_impl=flex", "model.attn_implementation=sdpa"],
                           run_dir=tmp_path))  # fmt: skip
    with pytest.raises(ValueError, match="cannot serve method.mask_impl=flex"):
        paper._load(run, training=True)


@pytest.mark.slow
def test_flex_block_mask_forward_matches_dense_and_follows_the_inputs(toy_tok, toy_setup):
    """Issue 29: the trie mask is built on the inputs' device in the model's dtype; the flex
    BlockMask (forward works on CPU) gives the dense mask's logits."""
    _, _, _, units, _ = toy_setup
    packs = [build_packed(units), build_packed(units[:2])]
    model = _small_model(len(toy_tok), "qwen3")
    dense = TrieCollator(toy_tok.pad_token_id)(packs)
    flex = TrieCollator(toy_tok.pad_token_id, mask_impl="flex")(packs)
    assert "attention_mask" not in flex  # built in packed_forward, on the inputs' device
    with torch.no_grad():
        ref = packed_forward(model, dense)
        model.set_attn_implementation("flex_attention")
        got = packed_forward(model, flex)
        valid = dense["parent"] >= -1
        torch.testing.assert_close(got[valid], ref[valid], atol=1e-4, rtol=1e-4)
        with pytest.raises(TypeError, match="attn_implementation"):
            packed_forward(model, dense)  # a dense mask on a flex model: clear error
        model.set_attn_implementation("sdpa")
        with pytest.raises(TypeError, match="flex_attention"):
            packed_forward(model, flex)
        # a float32 collator mask is rebuilt in the model's dtype (bf16 model)
        seen = {}
        m16 = _small_model(len(toy_tok), "qwen3", dtype=torch.bfloat16)
        m16.model.layers[0].self_attn.register_forward_pre_hook(
            lambda mod, a, kw: seen.update(dtype=kw["attention_mask"].dtype), with_kwargs=True
        )
        packed_forward(m16, dense)
        assert seen["dtype"] == torch.bfloat16


def test_toy_numbered_tokenization_is_exact_and_single_token():
    """Toy fix (docs): with num_colon, "N:" is one token in prompt, outlines and thread headers."""
    from methods.threadweaver.toy import toy_prompt

    tok = toy_tokenizer(4, 4, num_colon=True)
    cb = make_codebook(4, 4, seed=0)
    two = tok.convert_tokens_to_ids("2:")
    for text in (toy_prompt([2, 0, 3], numbered=True), thread_header_text := "\n<Thread>\n2:",
                 serialize(toy_trajectory([2, 0, 3], cb, "par", numbered=True)),
                 serialize(toy_trajectory([2, 0, 3], cb, "seq", numbered=True))):  # fmt: skip
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == text and two in ids, text
    assert tok(thread_header_text, add_special_tokens=False)["input_ids"][-1] == two
    assert (
        parse(serialize(toy_trajectory([1, 3], cb, "seq", numbered=True)))
        .segments[0]
        .startswith("1: s1 ")
    )
    with pytest.raises(ValueError, match="toy_num_colon_token"):
        ThreadWeaverConfig(toy_numbered=True, toy_num_colon_token=False)


# --------------------------------------------------------------------------- official-code parity
# Values in tests/fixtures/threadweaver/official_values.json were computed by running the official
# code (facebookresearch/threadweaver @ 26622324ad0fcad9be53a692d0a8f214a8fa5ee8) on the inputs
# stored there; see docs/methods/threadweaver.md ("Official-code fixtures").

_OFFICIAL = None


def _official() -> dict:
    global _OFFICIAL
    if _OFFICIAL is None:
        import json
        from pathlib import Path

        path = Path(__file__).parents[1] / "fixtures" / "threadweaver" / "official_values.json"
        _OFFICIAL = json.loads(path.read_text())
    return _OFFICIAL


@pytest.fixture(scope="module")
def concl_tok():
    """The toy tokenizer with the <Conclusion> tags as single tokens (as the fixture's)."""
    from methods.threadweaver import CONCLUSION_TAGS

    tok = toy_tokenizer(n_symbols=4, chain_len=4)
    add_threadweaver_tokens(None, tok, CONCLUSION_TAGS)
    return tok


def _official_scripts(tok):
    """Our-protocol versions of the scripted engines the fixture drove the official controller with."""
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    eos = tok.eos_token_id
    head = enc("<think>\n<Parallel>\n<Outlines>\n<Outline>1: s0</Outline>\n<Outline>2: s1</Outline>\n"
               "</Outlines>")  # fmt: skip
    calls = {"n": 0}

    def stray(p):
        calls["n"] += 1
        return enc(" s1</Outlines>") if calls["n"] == 1 else enc(" s2") + [eos]

    def block(p):
        if p[-5:-2] == enc("\n<Thread>\n"):
            return enc(" s2 s3\n</Thread>")
        if len(p) == 1:
            return head
        if p[-3:] == enc("\n<Conclusion>\n"):
            return enc(" s3\n</Conclusion>\n</Parallel>\n s3\n</think>\n s1") + [eos]
        return enc(" s3\n</think>\n s1") + [eos]

    def thread_eos(p):
        return enc(" s2") + [eos] if p[-5:-2] == enc("\n<Thread>\n") else head

    return {"stray": stray, "block": block, "thread_eos": thread_eos}


@pytest.mark.parametrize(
    "case, script, conclusion",
    [
        ("stray_outlines_close", "stray", False),
        ("block_no_conclusion_True", "block", False),
        ("block_no_conclusion_False", "block", True),
        ("thread_eos_no_conclusion_True", "thread_eos", False),
        ("thread_eos_no_conclusion_False", "thread_eos", True),
    ],
)
def test_orchestrator_matches_official_controller(concl_tok, case, script, conclusion):
    """Token for token the official controller's response and request count (incl. <Conclusion>)."""
    want = _official()["controller"][case]
    fn = _official_scripts(concl_tok)[script]
    eng = _fixed_engine(lambda p, s, m: _cut_at_stop_script(fn(p), s, m))
    eng.calls = []
    prompt = want["prompt"]
    assert concl_tok.decode(prompt) == want["prompt_text"]
    cfg = OrchestratorConfig(join_suffix="\n", conclusion=conclusion, budget_total=200)
    r = ParallelOrchestrator(eng, concl_tok, cfg).run(prompt)
    assert concl_tok.decode(r.response_ids) == want["response_text"]
    # the official controller issues requests one by one; ours batches the threads of a block
    assert sum(len(c) for c in eng.calls) == want["n_calls"]


def _cut_at_stop_script(ids, stop_ids, m):
    for j, t in enumerate(ids[:m]):
        if t in stop_ids:
            return EngineCompletion(ids[: j + 1], "stop", t)
    return EngineCompletion(ids[:m], "length")


def test_group_advantages_match_official_scores():
    """Mean/std advantages and the zero-advantage threshold equal the official GRPO scores."""
    off = _official()["advantages"]
    r = torch.tensor(off["rewards"], dtype=torch.float64)
    cases = {"mean": ("mean", None), "std": ("std", None), "mean_thr1": ("mean", 1.0),
             "std_thr1": ("std", 1.0)}  # fmt: skip
    for key, (norm, thr) in cases.items():
        got = group_advantages(r, norm=norm, eps=off["eps"], zero_threshold=thr)
        torch.testing.assert_close(got, torch.tensor(off[key], dtype=torch.float64), msg=key)
    # the threshold zeroes a non-constant all-correct group that plain centring keeps
    assert (
        group_advantages(r)[3].abs().sum() > 0
        and group_advantages(r, zero_threshold=1.0)[3].abs().sum() == 0
    )


def test_pgrpo_reward_matches_official_calculate_reward():
    """repo variant + parallel_reward == official calculate_reward (v2) on fixed trajectories."""
    off = _official()["rewards"]
    ids = off["ids"]
    for c in off["cases"]:
        st = parallel_stats(off["responses"][c["resp"]], ids)
        assert st.eta == pytest.approx(c["eta"])
        if c["incorrect_reward"] != -1.0:  # the official code with incorrect 0 is neither variant
            continue
        got = pgrpo_reward(c["correct"], st.eta, 0.5, 0.2, "repo", has_parallel=st.has_parallel,
                           parallel_reward=c["parallel_reward"])  # fmt: skip
        assert got == pytest.approx(c["reward"]), c


def test_pgrpo_reward_format_error_and_parallel_options(toy_tok):
    from methods.threadweaver import PGRPOReward

    assert pgrpo_reward(True, 0.3, has_parallel=True, parallel_reward=0.1) == pytest.approx(1.25)
    assert pgrpo_reward(True, 0.3, has_parallel=False, parallel_reward=0.1) == pytest.approx(1.15)
    assert pgrpo_reward(False, 0.3, has_parallel=True, parallel_reward=0.1) == 0.0
    assert pgrpo_reward(True, 0.3, format_ok=False, format_error_reward=-1.0) == -1.0
    assert pgrpo_reward(True, 0.3, format_ok=False) == pytest.approx(1.15)  # option off
    with pytest.raises(ValueError, match="parallel_reward"):
        pgrpo_reward(True, 0.1, parallel_reward=-1.0)
    good = serialize(Trajectory([ParallelBlock([("1", "a")], [("1", "b")])], "\\boxed{1}"))
    bad = good.replace("</Thread>", "", 1)
    seq = "<think>\nplain\n</think>\n\\boxed{1}"
    rw = PGRPOReward(verify=lambda t, g: True, format_error_reward=-1.0)
    out = rw(response_text=[good, bad, seq], answer=["1"] * 3, eta=[0.1] * 3,
             has_parallel=[True, True, False])  # fmt: skip
    assert out == [pytest.approx(1.05), -1.0, pytest.approx(1.05)]
    rw = PGRPOReward(verify=lambda t, g: True, format_error_reward=-0.5,
                     treat_no_parallel_as_format_error=True)  # fmt: skip
    assert rw(response_text=[seq], answer=["1"], eta=[0.0], has_parallel=[False]) == [-0.5]


def test_conclusion_mode_round_trip_units_and_validate(concl_tok):
    """Official <Conclusion> mode: serializer, parser, units and validator agree."""
    from methods.threadweaver import CONCLUSION_TAGS

    block = ParallelBlock([("1", "s0"), ("2", "s1")], [("1", "s2 s3"), ("2", "s2 s3")], " s3\n")
    traj = Trajectory([block, "\n s3"], " s1")
    text = serialize(traj)
    assert "</Thread>\n<Conclusion>\n s3\n</Conclusion>\n</Parallel>\n s3" in text
    assert parse(text) == traj
    assert validate(text, conclusion=True).ok
    assert not validate(text).ok  # paper format: <Conclusion> is a legacy tag
    assert not validate(serialize(Trajectory([ParallelBlock([("1", "a")], [("1", "b")])], "x")),
                        conclusion=True).ok  # fmt: skip
    pieces = response_pieces(traj)
    assert ("join", "\n<Conclusion>\n") in pieces and "".join(t for _, t in pieces) == text
    enc = lambda s: concl_tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    resp, units = extract_units([concl_tok.bos_token_id], traj, enc, concl_tok.eos_token_id)
    assert concl_tok.decode(resp) == text + "<eos>" and len(units) == 3
    assert all(len(enc(t)) == 1 for t in CONCLUSION_TAGS)


@pytest.mark.slow  # compiles flex_attention on the CPU (26 s with a cold inductor cache): make test-all
def test_trie_masks_are_built_on_the_inputs_device(toy_tok, toy_setup, monkeypatch):
    """Issue 29: the mask follows ``input_ids``' device (the old P-GRPO path built the BlockMask on
    the CPU and never moved it; a BlockMask is not a tensor, so ``.to(dev)`` skipped it)."""
    from methods.threadweaver import trie_mask

    _, _, _, units, _ = toy_setup
    packs = [build_packed(units)]
    seen = []
    real = trie_mask.flex_block_mask

    def spy(tin, tout, device=None):
        seen.append((tin.device, torch.device(device) if device is not None else None))
        return real(tin, tout, device=device)

    monkeypatch.setattr(trie_mask, "flex_block_mask", spy)
    model = _small_model(len(toy_tok), "qwen3")
    model.set_attn_implementation("flex_attention")
    batch = TrieCollator(toy_tok.pad_token_id, mask_impl="flex")(packs)
    with torch.no_grad():
        packed_forward(model, batch)
    dev = batch["input_ids"].device
    assert seen == [(dev, dev)]
    dense = trie_mask.dense_trie_mask(batch["tin"], batch["tout"], torch.bfloat16)
    assert dense.device == dev and dense.dtype == torch.bfloat16
