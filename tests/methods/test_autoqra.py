"""Tests for methods.autoqra (our toy design CI tests, bad input, issue 14 "Must show")."""

from __future__ import annotations

import itertools
import json
import os

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from methods.autoqra import (  # noqa: E402
    AutoQRA,
    BudgetInfeasibleError,
    EvolutionConfig,
    FidelitySurrogate,
    Importance,
    MemoryModel,
    MultiFidelityEvolution,
    ProxyEvaluator,
    QRConfig,
    SearchSpace,
    all_atomic_neighbors,
    atomic_distance,
    atomic_neighbors,
    build_quantized_lora_model,
    constrained_fronts,
    crowding_distance,
    expected_improvement,
    fake_quantize,
    held_bytes,
    hypervolume_2d,
    repair_to_budget,
    warm_start,
)

torch.set_num_threads(1)
Q, R = (2, 3, 4, 8), (4, 8, 16)


@pytest.fixture(scope="module")
def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


def _setup(L=3, seed=0):
    rng = np.random.default_rng(seed)
    space = SearchSpace(Q, R, L)
    mem = MemoryModel(rng.integers(1000, 5000, L) * 128, rng.integers(100, 400, L), group_size=128)
    imp = Importance(rng.random(L), rng.random(L))
    return space, mem, imp


# ---------------------------------------------------------------- memory (Eq. 1)
def test_memory_closed_form_and_monotone():
    mem = MemoryModel([1280, 2560], [10, 20], lora_bits=16, group_size=128, meta_bits=16)
    cfg = QRConfig((2, 4), (4, 8))
    expect = (1280 * 2 / 8 + 10 * 4 * 2 + 10 * 4) + (2560 * 4 / 8 + 20 * 8 * 2 + 20 * 4)
    assert mem.total_bytes(cfg) == pytest.approx(expect, abs=0)
    space = SearchSpace(Q, R, 2)
    for c in [QRConfig(q, r) for q in itertools.product(Q, Q) for r in itertools.product(R, R)][
        :40
    ]:
        for n in all_atomic_neighbors(c, space):
            up = sum(n.q) > sum(c.q) or sum(n.r) > sum(c.r)
            assert (mem.total_bytes(n) > mem.total_bytes(c)) == up


def test_memory_matches_hf_config_and_peft(tiny_llama):
    from peft import LoraConfig, get_peft_model

    mm = MemoryModel.from_hf_config(tiny_llama.config, group_size=32)
    for i, layer in enumerate(tiny_llama.model.layers):
        numel = sum(
            m.weight.numel() for n, m in layer.named_modules() if isinstance(m, torch.nn.Linear)
        )
        assert mm.layer_params[i] == numel
    pm = get_peft_model(
        __import__("copy").deepcopy(tiny_llama),
        LoraConfig(
            r=4,
            target_modules=[
                "q_proj",
                "k_proj",
                "v_proj",
                "o_proj",
                "gate_proj",
                "up_proj",
                "down_proj",
            ],
        ),
    )
    n_train = sum(p.numel() for p in pm.parameters() if p.requires_grad)
    assert n_train / 4 == mm.lora_params_per_rank.sum()


def test_memory_equals_bytes_held_by_built_model(tiny_llama):
    """Issue must-show: the analytic M(C) is checked against the packed model, not assumed."""
    mm = MemoryModel.from_hf_config(tiny_llama.config, group_size=32)
    for cfg in [QRConfig((2, 3, 8), (4, 16, 8)), QRConfig((4, 4, 4), (8, 8, 8))]:
        pm = build_quantized_lora_model(tiny_llama, cfg, backend="fake", group_size=32)
        assert held_bytes(pm) == pytest.approx(mm.total_bytes(cfg), abs=0)


def test_budget_from_reference_binds_and_infeasible_budget_message():
    space, mem, imp = _setup()
    B = mem.budget_from_reference(4, 8)
    assert mem.total_bytes(QRConfig.uniform(3, 8, 16)) > B  # the budget binds
    m_min = mem.total_bytes(space.minimum())
    with pytest.raises(BudgetInfeasibleError, match=f"{m_min:.0f}"):
        MultiFidelityEvolution(space, mem, imp, ProxyEvaluator(space, mem, imp, B), m_min - 1)
    with pytest.raises(ValueError, match="budget"):
        mem.check_budget(0.0, space.minimum())


# ---------------------------------------------------------------- fake quantisation
@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_fake_quantize_levels_bound_idempotent(bits):
    torch.manual_seed(bits)
    w = torch.randn(16, 64) * 0.1
    wq = fake_quantize(w, bits, 32)
    groups = wq.reshape(-1, 32)
    assert max(len(torch.unique(g)) for g in groups) <= 2**bits
    g = w.reshape(-1, 32)
    step = (g.max(1).values - g.min(1).values) / (2**bits - 1)
    assert torch.all(
        (wq - w).reshape(-1, 32).abs() <= step[:, None] / 2 + 1e-3 * step[:, None] + 1e-6
    )
    torch.testing.assert_close(fake_quantize(wq, bits, 32), wq, atol=1e-6, rtol=0)


def test_fake_quantize_error_decreases_and_8bit_is_real():
    torch.manual_seed(0)
    w = torch.randn(64, 64)
    errs = [float((fake_quantize(w, b, 32) - w).norm() / w.norm()) for b in (2, 3, 4, 8)]
    assert all(a > b for a, b in zip(errs, errs[1:]))
    assert 0 < errs[-1] < 0.01  # 8-bit: small but nonzero error, so really quantised
    assert len(torch.unique(fake_quantize(w, 8, 32).reshape(-1, 32)[0])) <= 256


def test_fake_quantize_bad_input():
    with pytest.raises(ValueError, match="bits"):
        fake_quantize(torch.randn(4, 32), 16, 32)
    with pytest.raises(ValueError, match="group_size"):
        fake_quantize(torch.randn(4, 30), 4, 32)
    with pytest.raises(TypeError, match="weight"):
        fake_quantize(np.zeros((4, 32)), 4, 32)


# ---------------------------------------------------------------- LoRA builder
def test_builder_ranks_alpha_frozen_and_8bit_quantised(tiny_llama):
    cfg = QRConfig((2, 8, 4), (4, 16, 8))
    pm = build_quantized_lora_model(tiny_llama, cfg, group_size=32)
    for name, mod in pm.named_modules():
        if hasattr(mod, "lora_A") and "layers." in name:
            layer = int(name.split("layers.")[1].split(".")[0])
            assert mod.lora_A["default"].weight.shape[0] == cfg.r[layer]
            assert mod.lora_alpha["default"] == 2 * cfg.r[layer]
            assert not mod.base_layer.weight.requires_grad
            assert mod.base_layer.autoqra_quant.bits == cfg.q[layer]
            w0 = dict(tiny_llama.named_parameters())[
                name.replace("base_model.model.", "") + ".weight"
            ]
            assert not torch.equal(mod.base_layer.weight, w0)  # 8-bit is quantised too
    assert all(p.requires_grad == ("lora_" in n) for n, p in pm.named_parameters())


def test_builder_bad_input(tiny_llama):
    with pytest.raises(ValueError, match="3 layers|2 layers"):
        build_quantized_lora_model(tiny_llama, QRConfig((4, 4), (4, 4)), group_size=32)
    with pytest.raises(ValueError, match="backend"):
        build_quantized_lora_model(tiny_llama, QRConfig.uniform(3, 4, 4), backend="gptq")
    with pytest.raises(TypeError, match="cfg"):
        build_quantized_lora_model(tiny_llama, {"q": [4] * 3}, group_size=32)
    with pytest.raises(ValueError, match="model.layers"):
        build_quantized_lora_model(torch.nn.Sequential(torch.nn.Linear(4, 4)), QRConfig((4,), (4,)))
    broken = torch.nn.Module()
    broken.model = torch.nn.Module()
    broken.model.layers = torch.nn.ModuleList([torch.nn.Module()])
    with pytest.raises(ValueError, match=r"missing projection.*layers\.0\.self_attn\.q_proj"):
        build_quantized_lora_model(broken, QRConfig((4,), (4,)), copy_model=False)
    try:
        import hqq  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="hqq"):
            build_quantized_lora_model(tiny_llama, QRConfig.uniform(3, 4, 4), backend="hqq")


# ---------------------------------------------------------------- space / operators
def test_space_bad_input():
    for bad in ([], [2, 2], [0, 4]):
        with pytest.raises(ValueError, match="Q"):
            SearchSpace(bad, R, 3)
    space = SearchSpace(Q, R, 3)
    with pytest.raises(ValueError, match="num_layers"):
        space.validate(QRConfig((4, 4), (4, 4)))
    with pytest.raises(ValueError, match="ladder"):
        space.validate(QRConfig((4, 5, 4), (4, 4, 4)))
    with pytest.raises(ValueError, match="NaN"):
        Importance([0.1, np.nan], [0, 1])
    with pytest.raises(ValueError, match="pop"):
        EvolutionConfig(pop=1)
    with pytest.raises(ValueError, match="promote_k"):
        EvolutionConfig(pop=4, promote_k=5)


def test_repair_feasible_greedy_and_never_raises():
    space, mem, imp = _setup(L=3, seed=1)
    B = mem.budget_from_reference(4, 8)
    rng = np.random.default_rng(0)
    for _ in range(30):
        c = QRConfig(tuple(rng.choice(Q, 3)), tuple(rng.choice(R, 3)))
        out = repair_to_budget(c, space, mem, imp, B)
        assert mem.total_bytes(out) <= B
        assert all(a <= b for a, b in zip(out.q, c.q)) and all(a <= b for a, b in zip(out.r, c.r))
        if mem.total_bytes(c) <= B:
            assert out == c
    # first downgrade equals a brute-force argmin of (I + eps) / dM
    c = space.maximum()
    best, arg = np.inf, None
    for n in all_atomic_neighbors(c, space):
        i = next(j for j in range(3) if n.q[j] != c.q[j] or n.r[j] != c.r[j])
        imp_t = imp.I_q[i] if n.q[i] != c.q[i] else imp.I_r[i]
        ratio = (imp_t + 1e-8) / (mem.total_bytes(c) - mem.total_bytes(n))
        if ratio < best:
            best, arg = ratio, n
    one_step_budget = mem.total_bytes(arg) + 0.5
    assert mem.total_bytes(c) > one_step_budget
    assert repair_to_budget(c, space, mem, imp, one_step_budget) == arg
    with pytest.raises(BudgetInfeasibleError, match="at least"):
        repair_to_budget(c, space, mem, imp, mem.total_bytes(space.minimum()) - 1)


def test_atomic_distance_metric_and_neighbours():
    space = SearchSpace(Q, R, 4)
    rng = np.random.default_rng(0)
    cfgs = [QRConfig(tuple(rng.choice(Q, 4)), tuple(rng.choice(R, 4))) for _ in range(12)]
    for a, b, c in itertools.product(cfgs[:6], repeat=3):
        d = atomic_distance
        assert (d(a, b, space) == 0) == (a == b)
        assert d(a, b, space) == d(b, a, space)
        assert d(a, c, space) <= d(a, b, space) + d(b, c, space)
    for c in cfgs:
        nb = all_atomic_neighbors(c, space)
        expect = sum(
            (space.idx_q(q) > 0)
            + (space.idx_q(q) < len(Q) - 1)
            + (space.idx_r(r) > 0)
            + (space.idx_r(r) < len(R) - 1)
            for q, r in zip(c.q, c.r)
        )
        assert len(set(nb)) == len(nb) == expect
        assert all(atomic_distance(c, n, space) == 1 for n in atomic_neighbors(c, space, 5, rng))


def test_warm_start_exact():
    space = SearchSpace(Q, R, 3)
    imp = Importance([0.0, 1.0, 0.5], [0.0, 1.0, 0.5])
    c = warm_start(space, imp)
    assert (c.q[0], c.r[0]) == (2, 4) and (c.q[1], c.r[1]) == (8, 16)
    assert c.q[2] == space.round_Q(5.0) == 4 and c.r[2] == space.round_R(10.0) == 8
    assert space.round_Q(3.5) == 3  # tie -> the lower value
    with pytest.raises(ValueError, match="layers"):
        warm_start(SearchSpace(Q, R, 4), imp)


# ---------------------------------------------------------------- NSGA-II, HV, EI, surrogate
def test_constrained_sort_vs_bruteforce_and_crowding():
    rng = np.random.default_rng(0)
    F = rng.random((25, 2))
    viol = np.where(rng.random(25) < 0.3, rng.random(25), 0.0)
    fronts = constrained_fronts(F, viol)
    rank = np.empty(25, int)
    for k, fr in enumerate(fronts):
        rank[fr] = k
    feas = viol <= 0
    first = [
        i
        for i in np.flatnonzero(feas)
        if not any(np.all(F[j] <= F[i]) and np.any(F[j] < F[i]) for j in np.flatnonzero(feas))
    ]
    assert sorted(fronts[0].tolist()) == sorted(first)
    assert rank[feas].max() < rank[~feas].min()  # feasible never behind infeasible
    x = rng.random(7)
    front = np.stack([x, 1 - x], axis=1)  # all mutually non-dominated
    cd = crowding_distance(front)
    assert np.isinf(cd[np.argmin(x)]) and np.isinf(cd[np.argmax(x)]) and np.isfinite(cd).sum() == 5


def test_hypervolume_2d_vs_grid():
    F = np.array([[0.1, 0.8], [0.4, 0.4], [0.7, 0.2]])
    ref = np.array([1.0, 1.0])
    g = np.linspace(0, 1, 401)[:-1] + 1 / 800
    X, Y = np.meshgrid(g, g)
    dom = np.zeros_like(X, bool)
    for f in F:
        dom |= (f[0] <= X) & (f[1] <= Y)
    assert hypervolume_2d(F, ref) == pytest.approx(dom.mean(), abs=5e-3)
    assert hypervolume_2d(F, ref) == pytest.approx(0.9 * 0.2 + 0.6 * 0.4 + 0.3 * 0.4 - 0.0, abs=0.2)


def test_expected_improvement_closed_form():
    assert expected_improvement([0.5], [0.3], 0.5)[0] == pytest.approx(0.3 / np.sqrt(2 * np.pi))
    assert expected_improvement([0.1], [1e-12], 0.5)[0] == 0.0
    mu, sd, f = 0.2, 0.5, 0.4
    y = np.random.default_rng(0).normal(mu, sd, 400_000)
    assert expected_improvement([mu], [sd], f)[0] == pytest.approx(
        np.maximum(y - f, 0).mean(), abs=1e-2
    )
    assert np.all(expected_improvement(np.linspace(-1, 1, 9), np.full(9, 0.2), 0.3) >= 0)


@pytest.mark.parametrize("training", ["official", "scratch"])
def test_surrogate_identity_then_fits_linear_map(training):
    s = FidelitySurrogate(min_samples=10, seed=0, training=training)
    rng = np.random.default_rng(0)
    x0 = rng.random(9)
    assert s.predict(x0) == x0[0] and not s.is_fitted
    X = rng.random((60, 9))
    for x in X[:9]:
        s.update(x, 2 * x[0] + 0.1)
    assert not s.is_fitted  # 9 < min_samples: still the identity
    # the official schedule refits after every pair (warm start); "scratch" fits once on the buffer
    for x in X[9:-1]:
        s.update(x, 2 * x[0] + 0.1, refit=s.refit_per_pair)
    s.update(X[-1], 2 * X[-1, 0] + 0.1)
    Xt = rng.random((30, 9))
    pred = np.array([s.predict(x) for x in Xt])
    y = 2 * Xt[:, 0] + 0.1
    r2 = 1 - ((pred - y) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    assert r2 > 0.9


# ---------------------------------------------------------------- end-to-end proxy search
def _proxy(L=8, seed=0):
    space, mem, imp = _setup(L=L, seed=seed)
    B = mem.budget_from_reference(4, 8)
    return space, mem, imp, B, ProxyEvaluator(space, mem, imp, B, seed=seed)


def test_proxy_search_feasible_deterministic_and_uses_paper_operators(tmp_path):
    space, mem, imp, B, ev = _proxy()
    evo = EvolutionConfig(pop=10, gens=2, promote_k=3, k_neighbors=3)
    s1, sel = AutoQRA(space, mem, imp, ev, B, evo, seed=3).run(tmp_path / "a")
    assert all(r.mem <= B for r in s1.records)  # nothing over budget is ever evaluated or kept
    assert all(r.mem <= B for r in s1.pareto) and sel.mem <= B
    assert s1.op_counts["crossover"] > 0 and s1.op_counts["mutation"] + s1.op_counts["coupled"] > 0
    sel_json = json.loads((tmp_path / "a" / "phase3_selected.json").read_text())
    assert set(sel_json) == {"q", "r", "phigh", "mem", "utility", "alpha"}
    space.validate(QRConfig(tuple(sel_json["q"]), tuple(sel_json["r"])))
    pareto = json.loads((tmp_path / "a" / "phase2_pareto.json").read_text())
    assert all({"q", "r", "plow", "phigh", "mem"} <= set(p) for p in pareto)
    _, sel2 = AutoQRA(space, mem, imp, ProxyEvaluator(space, mem, imp, B), B, evo, seed=3).run()
    assert (sel2.q, sel2.r) == (sel.q, sel.r)


class _Killer:
    def __init__(self, inner, kill_after):
        self.inner, self.kill_after, self.calls = inner, kill_after, []

    def evaluate(self, cfg, fidelity):
        if self.kill_after is not None and len(self.calls) >= self.kill_after:
            raise KeyboardInterrupt("simulated kill")
        self.calls.append((cfg.key(), fidelity))
        return self.inner.evaluate(cfg, fidelity)


@pytest.mark.slow
def test_checkpoint_resume_is_exact_in_both_stages(tmp_path):
    """A run stopped at evaluation N and resumed equals the uninterrupted one: same records, Pareto
    set, HV history, operator counts, selection and BO history, the same evaluation calls split
    between the two runs, and exact ``n_evals`` (the official per-pair surrogate refits replayed)."""
    from dataclasses import asdict

    space, mem, imp, B, ev = _proxy(seed=2)
    evo = EvolutionConfig(pop=8, gens=3, promote_k=3, k_neighbors=2, surrogate_min_samples=4)

    def run(killer, folder):
        return AutoQRA(space, mem, imp, killer, B, evo, bo_iters=3, k_bo=3, seed=1).run(folder)

    ref_ev = _Killer(ev, None)
    ref1, ref_sel = run(ref_ev, tmp_path / "ref")
    n1 = ref1.n_evals["low"] + ref1.n_evals["high"]
    n_bo = sum("phigh" in h for h in ref_sel.history)
    assert len(ref_ev.calls) == n1 + n_bo and n_bo >= 2 and ref1.n_evals["high"] > 4
    for n in (40, n1 + n_bo - 1):  # inside a generation (surrogate fitted); Stage 2's last call
        first, second = _Killer(ev, kill_after=n), _Killer(ev, None)
        with pytest.raises(KeyboardInterrupt):
            run(first, tmp_path / f"k{n}")
        res, sel = run(second, tmp_path / f"k{n}")
        assert first.calls + second.calls == ref_ev.calls  # nothing repeated, lost or reordered
        assert res.n_evals == ref1.n_evals
        assert [asdict(r) for r in res.records] == [asdict(r) for r in ref1.records]
        assert [asdict(r) for r in res.pareto] == [asdict(r) for r in ref1.pareto]
        assert (res.hv_history, res.op_counts) == (ref1.hv_history, ref1.op_counts)
        assert asdict(sel) == asdict(ref_sel)


# ---------------------------------------------------------------- toy pieces
def test_outlier_injection_preserves_function_and_hurts_low_bit_quantisation(tiny_llama):
    import copy

    from methods.autoqra.toy_world import MarkovSource, inject_outliers

    ids = MarkovSource(128, seed=0).sample(8, 16, seed=1)
    m2 = inject_outliers(copy.deepcopy(tiny_llama), blocks=(1,), channels=4, factor=16.0)
    with torch.no_grad():
        torch.testing.assert_close(m2(ids).logits, tiny_llama(ids).logits, atol=1e-4, rtol=1e-4)
    x = torch.randn(64, 64)

    def mlp_err(model):
        mlp = copy.deepcopy(model.model.layers[1].mlp)
        with torch.no_grad():
            y = mlp(x)
            for lin in (mlp.gate_proj, mlp.up_proj, mlp.down_proj):
                lin.weight.copy_(fake_quantize(lin.weight, 2, 32))
            return float((mlp(x) - y).norm() / y.norm())

    assert mlp_err(m2) > 1.5 * mlp_err(tiny_llama)  # the rescaled block is harder to quantise


def test_sequential_allocation_feasible_and_prefers_sensitive_blocks():
    from methods.autoqra.toy import sequential_allocation

    space, mem, _ = _setup(L=4, seed=3)
    mem = MemoryModel(np.full(4, 128 * 100), np.full(4, 10), group_size=128)
    B = mem.budget_from_reference(4, 8)
    c = sequential_allocation(space, mem, np.array([1.0, 50.0, 1.0, 1.0]), B, rank=8)
    assert mem.total_bytes(c) <= B and set(c.r) == {8}
    assert c.q[1] == max(c.q) and c.q[1] > min(c.q)


def test_fake_quant_evaluator_trains_only_lora(tiny_llama):
    from methods.autoqra.toy_world import FakeQuantEvaluator, MarkovSource

    ids = MarkovSource(128, seed=0).sample(32, 12, seed=1)
    mem = MemoryModel.from_hf_config(tiny_llama.config, group_size=32)
    before = {k: v.clone() for k, v in tiny_llama.state_dict().items()}
    ev = FakeQuantEvaluator(
        tiny_llama, mem, ids, ids[:8], {"low": {"steps": 2, "n_train": 32}}, batch=4
    )
    res = ev.evaluate(QRConfig.uniform(3, 4, 4), "low")
    assert np.isfinite(res.perf) and res.mem_bytes == mem.total_bytes(QRConfig.uniform(3, 4, 4))
    assert all(
        torch.equal(v, tiny_llama.state_dict()[k]) for k, v in before.items()
    )  # base untouched
    with pytest.raises(ValueError, match="fidelity"):
        ev.evaluate(QRConfig.uniform(3, 4, 4), "medium")


def test_importance_from_json_both_schemas(tmp_path):
    shipped = {
        "model_name": "x",
        "loss": {
            f"{i}.{m}": float(i + 1) for i in range(3) for m in ("self_attn.q_proj", "mlp.up_proj")
        },
    }
    p = tmp_path / "shipped.json"
    p.write_text(json.dumps(shipped))
    imp = Importance.from_json(p, 3)
    assert np.allclose(imp.raw_q, [2.0, 4.0, 6.0]) and imp.I_q.max() == 1 and imp.I_q.min() == 0
    p2 = tmp_path / "loader.json"
    p2.write_text(
        json.dumps(
            {
                "backbone_metric_per_layer": {"0": 1, "1": 3, "2": 2},
                "lora_metric_per_layer": {"0": 0, "1": 1, "2": 2},
            }
        )
    )
    imp2 = Importance.from_json(p2, 3)
    assert np.allclose(imp2.I_q, [0, 1, 0.5]) and np.allclose(imp2.score, [0, 0.75, 0.75])
    p3 = tmp_path / "bad.json"
    p3.write_text(json.dumps({"foo": 1}))
    with pytest.raises(ValueError, match="schema"):
        Importance.from_json(p3, 3)
    with pytest.raises(ValueError, match="out of range"):
        Importance.from_json(p, 2)


def test_paper_and_toy_configs_compose_strictly():
    from common.config import ConfigError
    from common.registry import compose
    from methods.autoqra.run import DEMO_OVERRIDES

    cfg = compose(["experiment=autoqra_paper"])
    paper = cfg.method
    assert (paper.stage, paper["pop"], paper.gens, paper.promote_k) == ("paper", 20, 6, 3)
    assert list(paper.Q) == [2, 3, 4, 8] and list(paper.R) == [4, 8, 16]
    assert cfg.model.name == "Qwen/Qwen3-4B" and cfg.benchmark.format == "winogrande"
    assert paper.paper.sft_data.hub_id == "tatsu-lab/alpaca" and paper.paper.quant_engine == "hqq"
    assert compose(["experiment=autoqra_paper", "model=llama3_1_8b"]).model.name == (
        "meta-llama/Llama-3.1-8B"
    )
    toy = compose(["experiment=autoqra_toy", *DEMO_OVERRIDES]).method
    assert list(toy.R) == [2, 4, 8] and toy.group_size == 32 and toy.stage == "toy"
    with pytest.raises(ConfigError, match="not_a_field"):
        compose(["experiment=autoqra_toy", "method.not_a_field=1"])
    with pytest.raises(ConfigError, match="pop"):
        compose(["experiment=autoqra_toy", "method.pop=many"])
    with pytest.raises(ConfigError, match="quant_engine"):
        compose(["experiment=autoqra_paper", "method.paper.quant_engine=gptq"])


# ----------------------------------------------------------------------------- paper-scale evaluator
_ALPACA = [
    {"instruction": "Add the numbers.", "input": "2 and 3", "output": "The sum is 5."},
    {"instruction": "Name a colour.", "input": "", "output": "Blue."},
    {"instruction": "Say hello.", "output": "Hello there!"},
    {"instruction": "Repeat the word.", "input": "cat", "output": "cat cat"},
]
_WINO = [
    {
        "sentence": "The trophy would not fit in the suitcase because the _ was too big.",
        "option1": "trophy",
        "option2": "suitcase",
        "answer": "1",
    },
    {
        "sentence": "Anna gave Mary the book because _ had finished reading it.",
        "option1": "Anna",
        "option2": "Mary",
        "answer": "1",
    },
    {
        "sentence": "The cup fell off the table because _ was at the edge.",
        "option1": "the cup",
        "option2": "the table",
        "answer": "1",
    },
]


@pytest.fixture(scope="module")
def paper_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("paper")
    (d / "alpaca.json").write_text(json.dumps(_ALPACA * 4))  # a JSON list, as alpaca_data.json
    (d / "wino.jsonl").write_text(
        "\n".join(json.dumps(x) for x in _WINO)
    )  # JSON lines, as dev.jsonl
    return d


@pytest.fixture(scope="module")
def tiny_qwen():
    from common.tiny import tiny_causal_lm

    return tiny_causal_lm("llama", hidden_size=32, num_hidden_layers=2, intermediate_size=64)


def test_alpaca_loader_and_sft_labels(paper_files, tiny_qwen):
    from methods.autoqra.paper_data import alpaca_features, alpaca_prompt, collate, load_alpaca

    _, tok = tiny_qwen
    recs = load_alpaca(paper_files / "alpaca.json")
    assert len(recs) == 16 and recs[2]["input"] == ""
    assert "### Input:" in alpaca_prompt(recs[0]) and "### Input:" not in alpaca_prompt(recs[1])
    feats = alpaca_features(recs[:4], tok, max_len=256)
    for r, f in zip(recs, feats, strict=False):
        n_prompt = len(tok.encode(alpaca_prompt(r), add_special_tokens=False))
        resp = tok.encode(r["output"], add_special_tokens=False) + [tok.eos_token_id]
        assert f["labels"][:n_prompt] == [-100] * n_prompt and f["labels"][n_prompt:] == resp
        assert f["input_ids"][n_prompt:] == resp
    b = collate(feats, pad_id=tok.pad_token_id)
    assert b["input_ids"].shape == b["labels"].shape == b["attention_mask"].shape
    assert (b["labels"][b["attention_mask"] == 0] == -100).all()
    bad = paper_files / "bad.json"
    bad.write_text(json.dumps([{"instruction": "x"}]))
    with pytest.raises(ValueError, match="record 0 .*'output'"):
        load_alpaca(bad)


def test_winogrande_loader_and_partial_scoring(paper_files, tiny_qwen):
    from methods.autoqra.paper_data import (
        continuation_logprob,
        load_winogrande,
        winogrande_accuracy,
        winogrande_pairs,
    )

    model, tok = tiny_qwen
    items = load_winogrande(paper_files / "wino.jsonl")
    assert [it["answer"] for it in items] == [1, 1, 1]
    ctxs, cont = winogrande_pairs(items[0])
    assert ctxs == [
        "The trophy would not fit in the suitcase because the trophy",
        "The trophy would not fit in the suitcase because the suitcase",
    ]
    assert cont == " was too big."
    # the continuation log-likelihood equals minus the summed CE of those tokens (independent route)
    ctx_ids = tok.encode(ctxs[0], add_special_tokens=False)
    if tok.bos_token_id is not None:
        ctx_ids = [tok.bos_token_id, *ctx_ids]
    c_ids = tok.encode(cont, add_special_tokens=False)
    ids = torch.tensor([ctx_ids + c_ids])
    labels = torch.tensor([[-100] * len(ctx_ids) + c_ids])
    with torch.no_grad():
        mean_ce = float(model(input_ids=ids, labels=labels).loss)
    lp = continuation_logprob(model, tok, ctxs[0], cont)
    assert lp == pytest.approx(-mean_ce * len(c_ids), rel=1e-4)
    acc = winogrande_accuracy(model, tok, items)
    assert acc in (0.0, 1 / 3, 2 / 3, 1.0)
    # flipping every answer flips every item's correctness
    flipped = [{**it, "answer": 3 - it["answer"]} for it in items]
    assert winogrande_accuracy(model, tok, flipped) == pytest.approx(1.0 - acc)
    bad = paper_files / "bad.jsonl"
    bad.write_text(json.dumps({**_WINO[0], "sentence": "no blank"}))
    with pytest.raises(ValueError, match="exactly one '_'"):
        load_winogrande(bad)


def test_paper_evaluator_on_tiny_local_model(paper_files, tiny_qwen, tmp_path):
    from methods.autoqra.paper import PaperEvaluator, PaperFidelity
    from methods.autoqra.paper_data import alpaca_features, load_alpaca, load_winogrande

    model, tok = tiny_qwen
    feats = alpaca_features(load_alpaca(paper_files / "alpaca.json"), tok, max_len=64)
    items = load_winogrande(paper_files / "wino.jsonl")
    memory = MemoryModel.from_hf_config(model.config, group_size=32)
    fids = {"low": PaperFidelity(0.25, 1.0, n_eval=2), "high": PaperFidelity(1.0, 1.0)}
    ev = PaperEvaluator(
        model,
        tok,
        memory,
        feats,
        items,
        fids,
        backend="fake",
        group_size=32,
        lr=1e-3,
        batch=2,
        grad_accum=2,
    )
    assert ev.steps_for("low") == (1, 4) and ev.steps_for("high") == (4, 16)  # ceil(n·ep/(b·acc))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = QRConfig((2, 8), (4, 8))
    lo, hi = ev.evaluate(cfg, "low"), ev.evaluate(cfg, "high")
    assert lo.perf in (0.0, 0.5, 1.0) and hi.perf in (0.0, 1 / 3, 2 / 3, 1.0)
    assert lo.mem_bytes == hi.mem_bytes == memory.total_bytes(cfg)
    assert (
        hi.meta["steps"] == 4
        and np.isfinite(hi.meta["sft_loss"])
        and ev.calls == {"low": 1, "high": 1}
    )
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # base untouched
    with pytest.raises(ValueError, match="backend"):
        PaperEvaluator(model, tok, memory, feats, items, backend="gptq")
    try:
        import hqq  # noqa: F401
    except ImportError:  # the GPU backend is imported lazily and fails with a clear message
        with pytest.raises(ImportError, match="hqq"):
            PaperEvaluator(model, tok, memory, feats, items, fids, backend="hqq").evaluate(
                cfg, "low"
            )
    # the paper stage end to end on a local checkpoint: PAPER_SMOKE (tests/test_paper_presets.py)


def test_input_channel_outliers_preserve_function_and_break_4bit_blocks(tiny_llama):
    """The toy's outlier mode: RMSNorm gain ÷f, q/k/v and gate/up input columns ×f (function kept);
    4-bit quantisation of that block then loses much more than 8-bit, and more than without outliers."""
    import copy

    from methods.autoqra.toy_world import MarkovSource, inject_outliers

    ids = MarkovSource(128, seed=0).sample(8, 16, seed=1)
    m2 = inject_outliers(copy.deepcopy(tiny_llama), (1,), channels=2, factor=32.0, mode="input")
    with torch.no_grad():
        torch.testing.assert_close(m2(ids).logits, tiny_llama(ids).logits, atol=1e-4, rtol=1e-4)
    w = m2.model.layers[1].mlp.up_proj.weight
    assert (w.abs().amax(0) > 8 * w.abs().median()).sum() >= 2  # outlier input columns exist

    def block_err(model, bits):
        q = build_quantized_lora_model(model, QRConfig((16, bits, 16), (4, 4, 4)), group_size=32)
        with torch.no_grad():
            y, yq = model(ids).logits, q(input_ids=ids).logits
        return float((yq - y).norm() / y.norm())

    assert block_err(m2, 4) > 3 * block_err(m2, 8)
    assert block_err(m2, 4) > 2 * block_err(tiny_llama, 4)
    with pytest.raises(ValueError, match="mode"):
        inject_outliers(copy.deepcopy(tiny_llama), (1,), mode="rows")


# ---------------------------------------------------------------- fidelity to the official code (issue 28)
# Fixture: tests/fixtures/autoqra/official_surrogate.json, made by running the official
# SurrogateMLPPromotion (github.com/harrysyz99/autoqra @ 66a5de5, autoqra/surrogate/mlp.py) on 30 fixed
# pairs (X ~ U[0,1]^10 from default_rng(123), y = x0 + 0.3 sin(3 x1) - 0.2 x2 x3), torch.manual_seed(0)
# before its lazily built network, a `_train()` after every pair from the 10th on, and its predictions on
# 8 fixed test points after 10, 20 and 30 pairs (docs/methods/autoqra.md, "Fidelity fixtures").
def _official_surrogate_fixture():
    path = os.path.join(
        os.path.dirname(__file__), "..", "fixtures", "autoqra", "official_surrogate.json"
    )
    with open(path) as fh:
        return json.load(fh)


def test_surrogate_official_training_matches_official_code():
    f = _official_surrogate_fixture()
    X, y, Xt = np.asarray(f["X"]), np.asarray(f["y"]), np.asarray(f["Xtest"])
    s = FidelitySurrogate(seed=0)  # training="official" is the default
    assert s.refit_per_pair
    for i in range(len(y)):
        s.update(X[i], y[i])
        n = str(len(s.y))
        if n in f["pred"]:
            ours = np.array([s.predict(x) for x in Xt])
            np.testing.assert_allclose(ours, f["pred"][n], atol=1e-5, rtol=0)
    assert len(s.epochs) == len(y) - s.min_samples + 1  # one refit per pair from the 10th on


def test_surrogate_scratch_option_is_not_the_official_schedule():
    f = _official_surrogate_fixture()
    X, y, Xt = np.asarray(f["X"]), np.asarray(f["y"]), np.asarray(f["Xtest"])
    s = FidelitySurrogate(seed=0, training="scratch")
    for i in range(len(y)):
        s.update(X[i], y[i], refit=False)
    s.fit()
    ours = np.array([s.predict(x) for x in Xt])
    assert np.abs(ours - np.asarray(f["pred"]["30"])).max() > 1e-3
    with pytest.raises(ValueError, match="training"):
        FidelitySurrogate(training="warm")


class _CountingRng:
    """Wraps a numpy Generator and counts the layer draws (``integers(num_layers)``)."""

    def __init__(self, seed, num_layers):
        self.g, self.L, self.layer_draws = np.random.default_rng(seed), num_layers, 0

    def integers(self, *a, **k):
        if a == (self.L,):
            self.layer_draws += 1
        return self.g.integers(*a, **k)

    def random(self):
        return self.g.random()

    def choice(self, *a, **k):
        return self.g.choice(*a, **k)


def test_jitter_official_makes_four_resets_with_a_budget_check_after_each():
    from methods.autoqra import jitter

    space, mem, _ = _setup(L=6, seed=0)
    c0 = QRConfig((8,) * 6, (16,) * 6)
    for seed in range(20):
        rng = _CountingRng(seed, 6)
        jitter(c0, space, mem, float("inf"), rng)  # never over budget: no drop draws
        assert rng.layer_draws == 4
    # budget below everything: each of the 4 resets is followed by a check (p = 0.5 drop), so over
    # 200 calls the number of drop draws per call exceeds 1 (the old single check allowed at most 1)
    extra = []
    for seed in range(200):
        rng = _CountingRng(seed, 6)
        jitter(c0, space, mem, 0.0, rng)
        extra.append(rng.layer_draws - 4)
    assert max(extra) >= 3 and 1.5 < np.mean(extra) < 2.5  # Binomial(4, 0.5): mean 2
    rng = _CountingRng(0, 6)
    jitter(c0, space, mem, 0.0, rng, mode="single_check")
    with pytest.raises(ValueError, match="mode"):
        jitter(c0, space, mem, 0.0, np.random.default_rng(0), mode="twice")


class _Recorder:
    def __init__(self, inner):
        self.inner, self.high = inner, []

    def evaluate(self, cfg, fidelity):
        if fidelity == "high":
            self.high.append(cfg.key())
        return self.inner.evaluate(cfg, fidelity)


def test_initial_promotion_takes_the_first_k_and_hv_history_starts_at_generation_one():
    space, mem, imp, B, ev = _proxy(seed=1)
    evo = EvolutionConfig(pop=8, gens=2, promote_k=3, k_neighbors=2, hv_eps=0.0)
    rec = _Recorder(ev)
    search = MultiFidelityEvolution(space, mem, imp, rec, B, evo, seed=0)
    res = search.run()
    init_keys = [k for k, r in search.records.items() if r.origin == "init"]
    assert rec.high[:3] == init_keys[:3]  # population order, the warm start first
    assert init_keys[0] == search._fix(warm_start(space, imp)).key()
    assert len(res.hv_history) == 2  # one value per generation, none for the initial population
    evo2 = EvolutionConfig(
        pop=8, gens=2, promote_k=3, k_neighbors=2, hv_eps=0.0, hv_include_init=True
    )
    assert len(MultiFidelityEvolution(space, mem, imp, ev, B, evo2, seed=0).run().hv_history) == 3
    with pytest.raises(ValueError, match="init_promotion"):
        EvolutionConfig(init_promotion="best")


# ----------------------------------------------------------------------------- paper smoke
_FIX = "{repo}/tests/fixtures/autoqra"
PAPER_SMOKE = {
    "paper": [
        "model.path={tiny_llama}",
        f"method.paper.sft_data.path={_FIX}/alpaca.json",  # Alpaca's JSON-list format
        f"benchmark.sets.winogrande.path={_FIX}/winogrande.jsonl",  # WinoGrande's JSONL format
        "method.paper.quant_engine=fake",  # HQQ needs a GPU: round-to-nearest on the CPU
        "method.paper.max_len=64",
        "method.paper.batch=2",
        "method.paper.grad_accumulation=1",
        "method.pop=2",
        "method.gens=1",
    ]
}
