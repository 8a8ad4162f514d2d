"""Tests for methods/sv_features: closed forms, exact decompositions, invariants, bad input."""

from __future__ import annotations

import itertools
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from methods.sv_features import (
    ToyConfig,
    factored_svd,
    feature_sv_cosines,
    head_factors,
    head_inputs,
    interference_norm,
    lsq_optimal_omega,
    match_pairs_to_ranks,
    n_recon,
    ov_matrix,
    ov_svd,
    pair_template,
    qk_matrix,
    random_rotation_basis,
    relative_contributions,
    rolls_tovee,
    rope_rotations,
    sparse_attention_decomposition,
    sv_contributions,
    svd_alignment,
    train_toy,
    whitened_feature_dirs,
)

torch.set_num_threads(1)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- least-squares oracle (Toy C)


def test_lsq_closed_form_matches_normal_equations_and_gradient_descent():
    g = _gen(0)
    D, N = 6, 10
    X, Y = torch.randn(D, N, generator=g).double(), torch.randn(D, N, generator=g).double()
    T = torch.randn(N, N, generator=g).double()
    om = lsq_optimal_omega(X, Y, T)
    # population normal equations: (Sigma_X kron Sigma_Y) vec(Omega) = vec(X T Y^T) (row-major vec)
    K = torch.kron(X @ X.T, Y @ Y.T)
    vec = torch.linalg.solve(K, (X @ T @ Y.T).reshape(-1))
    assert torch.allclose(om, vec.reshape(D, D), atol=1e-8)
    # plain gradient descent on the population loss tr(W^T Sx W Sy) - 2 <W, X T Y^T> converges to it
    sx, sy, c = X @ X.T, Y @ Y.T, X @ T @ Y.T
    lr = 1.0 / float(torch.linalg.eigvalsh(sx)[-1] * torch.linalg.eigvalsh(sy)[-1])
    w = torch.zeros(D, D, dtype=torch.float64)
    for _ in range(20_000):
        w -= lr * (sx @ w @ sy - c)
    assert torch.allclose(w, om, atol=1e-6)


def test_lsq_matches_sampled_lstsq_and_whitened_dirs():
    g = _gen(1)
    D, N, n = 4, 6, 40_000
    X, Y = torch.randn(D, N, generator=g).double(), torch.randn(D, N, generator=g).double()
    a, b = 2, 4
    T = torch.zeros(N, N, dtype=torch.float64)
    T[a, b] = 1.0
    fr = torch.randn(n, N, generator=g).double()
    fs = torch.randn(n, N, generator=g).double()
    r, s = fr @ X.T, fs @ Y.T
    target = fr[:, a] * fs[:, b]
    design = (r[:, :, None] * s[:, None, :]).reshape(n, -1)
    fit = torch.linalg.lstsq(design, target[:, None]).solution.reshape(D, D)
    om = lsq_optimal_omega(X, Y, T)
    assert (fit - om).norm() / om.norm() < 0.05
    u_star, v_star = whitened_feature_dirs(X, Y, a, b)
    for M, tol in ((om, 0.999999), (fit, 0.99)):
        U, S, Vh = torch.linalg.svd(M)
        assert abs(float(U[:, 0] @ u_star)) >= tol
        assert abs(float(Vh[0] @ v_star)) >= tol
    assert torch.linalg.svdvals(om)[1] < 1e-8 * torch.linalg.svdvals(om)[0]  # rank 1


def test_isotropic_features_give_exact_feature_directions():
    g = _gen(2)
    D, N = 5, 9
    Q, _ = torch.linalg.qr(torch.randn(N, D, generator=g).double())
    X = Q.T  # rows orthonormal: X X^T = I
    T = torch.zeros(N, N, dtype=torch.float64)
    T[1, 3] = 2.0
    U, S, Vh = torch.linalg.svd(lsq_optimal_omega(X, X, T))
    assert abs(float(U[:, 0] @ X[:, 1] / X[:, 1].norm())) == pytest.approx(1.0, abs=1e-10)
    assert abs(float(Vh[0] @ X[:, 3] / X[:, 3].norm())) == pytest.approx(1.0, abs=1e-10)


# ---------------------------------------------------------------- alignment utilities


def test_planted_orthonormal_features_align_exactly_and_hungarian_recovers_ranks():
    g = _gen(3)
    D, N = 8, 8
    W, _ = torch.linalg.qr(torch.randn(D, N, generator=g))
    pairs = [(0, 5), (2, 7), (4, 1)]
    sig = [3.0, 2.0, 1.0]
    om = sum(s * torch.outer(W[:, i], W[:, j]) for s, (i, j) in zip(sig, pairs, strict=True))
    U, S, Vh = torch.linalg.svd(om)
    C_U, C_V = feature_sv_cosines(W, U, Vh)
    perm = [2, 0, 1]  # shuffled pair order: matching must still find ranks by alignment
    shuffled = [pairs[p] for p in perm]
    match = match_pairs_to_ranks(C_U, C_V, shuffled)
    for (pair, rank, score), p in zip(match, perm, strict=True):
        assert rank == p and pair == pairs[p]
        assert score == pytest.approx(1.0, abs=1e-5)


def test_svd_alignment_sign_invariant_and_rejects_zero_columns():
    g = _gen(4)
    V, F = torch.randn(5, 3, generator=g), torch.randn(5, 4, generator=g)
    assert torch.allclose(svd_alignment(V, F), svd_alignment(-V, F * torch.tensor([1, -1, 1, -1])))
    F[:, 2] = 0
    with pytest.raises(ValueError, match=r"\[2\]"):
        svd_alignment(V, F)
    with pytest.raises(ValueError, match="dimension"):
        svd_alignment(torch.randn(4, 3), torch.randn(5, 3))
    with pytest.raises(ValueError, match="non-empty"):
        match_pairs_to_ranks(torch.rand(3, 3), torch.rand(3, 3), [])


def test_interference_norm_zero_for_orthonormal():
    Q, _ = torch.linalg.qr(torch.randn(6, 6, generator=_gen(5)))
    assert interference_norm(Q) < 1e-5
    assert interference_norm(torch.ones(3, 2)) == pytest.approx(3.0)


def test_lsq_rejects_bad_shapes():
    with pytest.raises(ValueError, match="T must have shape"):
        lsq_optimal_omega(torch.randn(3, 4), torch.randn(3, 5), torch.randn(4, 4))
    with pytest.raises(ValueError, match="model dimension"):
        lsq_optimal_omega(torch.randn(3, 4), torch.randn(2, 4), torch.randn(4, 4))
    with pytest.raises(TypeError):
        lsq_optimal_omega([[1.0]], torch.randn(1, 1), torch.randn(1, 1))


# ---------------------------------------------------------------- SAD on tiny models


@pytest.fixture(scope="module")
def tiny_models():
    from transformers import GPT2Config, GPT2LMHeadModel

    from common.tiny import tiny_causal_lm

    out = {}
    for arch in ("llama", "qwen2"):
        model, _ = tiny_causal_lm(arch, attn_implementation="eager", seed=0)
        with torch.no_grad():  # larger q/k and non-zero biases so that logits are far from uniform
            g = _gen(7)
            for layer in model.model.layers:
                layer.self_attn.q_proj.weight.mul_(6.0)
                layer.self_attn.k_proj.weight.mul_(6.0)
                for p in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                    if p.bias is not None:
                        p.bias.copy_(torch.randn(p.bias.shape, generator=g))
        out[arch] = model.eval()
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=100, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    gpt2 = GPT2LMHeadModel(cfg).eval()
    gpt2.set_attn_implementation("eager")
    with torch.no_grad():
        for blk in gpt2.transformer.h:
            blk.attn.c_attn.weight.mul_(5.0)
            blk.attn.c_attn.bias.normal_(0, 0.5, generator=_gen(8))
    out["gpt2"] = gpt2
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(1)
    ncfg = GPTNeoXConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        rotary_pct=0.25,  # Pythia's partial rotary
        max_position_embeddings=32,
        attn_implementation="eager",
    )
    neox = GPTNeoXForCausalLM(ncfg).eval()
    with torch.no_grad():
        for blk in neox.gpt_neox.layers:
            blk.attention.query_key_value.weight.mul_(8.0)
            blk.attention.query_key_value.bias.normal_(0, 0.5, generator=_gen(6))
    out["neox"] = neox
    return out


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2", "neox"])
def test_contributions_sum_to_model_attention_logits(tiny_models, arch):
    model = tiny_models[arch]
    ids = torch.randint(3, 90, (2, 10), generator=_gen(9))
    with torch.no_grad():
        att = model(input_ids=ids, output_attentions=True).attentions
    T = ids.shape[1]
    vis = torch.tril(torch.ones(T, T, dtype=torch.bool))
    stds = []
    for layer, head in itertools.product(range(2), range(4)):
        res = sparse_attention_decomposition(
            model, ids, layer, head, firing_thresh=0.0, exclude_first=False, control=True
        )
        # the model's log-probabilities differ from scale * logit by a per-row constant only
        logp = torch.log(att[layer][:, head].clamp_min(1e-30))
        diff = (logp - res.all_logits * res.scale).masked_fill(~vis, 0.0)
        row = diff[..., :1]
        assert torch.allclose(diff, row.expand_as(diff).masked_fill(~vis, 0.0), atol=2e-4)
        stds.append(float(res.all_logits[vis.expand_as(res.all_logits)].std() * res.scale))
        # exact sums, incl. in the random-rotation basis
        assert torch.allclose(res.contributions.sum(-1), res.logits, atol=1e-4)
        assert torch.allclose(res.relative.sum(-1), res.rel_logits, atol=1e-4)
        assert torch.allclose(res.extra["relative_control"].sum(-1), res.rel_logits, atol=1e-3)
    assert max(stds) > 0.5  # the check is not on near-uniform attention
    # the per-offset QK matrix reproduces single logits: x~_i^T Omega~(j - i) x~_j
    X = head_inputs(model, ids, 1)
    for i, j in ((7, 2), (4, 4), (9, 0)):
        om = qk_matrix(model, 1, 3, delta=j - i) if arch != "gpt2" else qk_matrix(model, 1, 3)
        assert float(X[0, i] @ om @ X[0, j]) == pytest.approx(
            float(res.all_logits[0, i, j]), abs=1e-4
        )


def test_rank_of_augmented_qk_bounded_by_head_dim(tiny_models):
    om = qk_matrix(tiny_models["qwen2"], 0, 1, delta=-3)
    s = torch.linalg.svdvals(om.double())
    assert om.shape == (65, 65)
    assert (s[16:] <= 1e-5 * s[0]).all()  # d_head = 16
    U, S, Vh = factored_svd(*[torch.randn(9, 3, generator=_gen(s)) for s in (1, 2)])
    assert torch.allclose(U.T @ U, torch.eye(3), atol=1e-5)


def test_ov_matrix_reproduces_attention_output(tiny_models):
    from common.activations import capture

    ids = torch.randint(3, 90, (1, 7), generator=_gen(10))
    for arch, name in (
        ("llama", "model.layers.0.self_attn.o_proj"),
        ("gpt2", "transformer.h.0.attn.c_proj"),
        ("neox", "gpt_neox.layers.0.attention.dense"),
    ):
        model = tiny_models[arch]
        with torch.no_grad():  # the OV matrix excludes the value bias (it adds b_V W_O per head)
            if arch == "gpt2":
                model.transformer.h[0].attn.c_attn.bias[64:] = 0
            if arch == "neox":
                model.gpt_neox.layers[0].attention.query_key_value.bias.view(4, 3, 8)[:, 2] = 0
        X = head_inputs(model, ids, 0)[..., :-1]
        with torch.no_grad(), capture(model, [name], what="input") as st_in:
            att = model(input_ids=ids, output_attentions=True).attentions[0]
        z = st_in[name][0]  # concatenated per-head values, before the output projection
        with torch.no_grad(), capture(model, [name]) as st_out:
            model(input_ids=ids)
        bias = st_out[name][0] - (z @ _out_weight(model, name))
        got = sum(att[:, h] @ X @ ov_matrix(model, 0, h) for h in range(4)) + bias
        assert torch.allclose(got, st_out[name][0], atol=1e-4), arch


@pytest.mark.parametrize("arch", ["llama", "qwen2", "neox"])
def test_fixed_rope_basis_is_the_tracer_decomposition(tiny_models, arch):
    """rope_basis="fixed" = accpp-tracer trace_firing: one SVD of W_Q W_K^T, rotations in the inputs.

    The reference below writes the tracer's matrices out (M_d = W_Q R_d^T W_Q^+,
    M_s = W_K^{+T} R_s W_K^T, c = b W^+, Omega_k = u_k s_k v_k^T) independently of our code.
    """
    model = tiny_models[arch]
    ids = torch.randint(3, 90, (1, 9), generator=_gen(11))
    layer, head = 1, 2
    kw = dict(firing_thresh=0.0, exclude_first=False, control=True)
    fixed = sparse_attention_decomposition(model, ids, layer, head, rope_basis="fixed", **kw)
    per = sparse_attention_decomposition(model, ids, layer, head, **kw)
    # same logits, different terms
    fin = torch.isfinite(per.all_logits)
    assert torch.allclose(fixed.all_logits[fin], per.all_logits[fin], atol=1e-4)
    assert torch.allclose(fixed.contributions.sum(-1), fixed.logits, atol=1e-4)
    assert torch.allclose(fixed.extra["relative_control"].sum(-1), fixed.rel_logits, atol=1e-3)
    assert not torch.allclose(fixed.contributions, per.contributions, atol=1e-2)
    # the tracer's formulas
    f = head_factors(model, layer, head)
    W_Q, b_Q, W_K, b_K = f.A[:-1].double(), f.A[-1].double(), f.B[:-1].double(), f.B[-1].double()
    pq, pk = torch.linalg.pinv(W_Q), torch.linalg.pinv(W_K)
    c_d, c_s = b_Q @ pq, b_K @ pk
    U, S, VT = torch.linalg.svd(W_Q @ W_K.T)
    r = W_Q.shape[1]
    U, S, VT = U[:, :r], S[:r], VT[:r]
    R = rope_rotations(model, torch.arange(ids.shape[1])).double()
    x = head_inputs(model, ids, layer)[0, :, :-1].double()
    for e, (_b, i, j) in enumerate(fixed.edges.tolist()):
        M_d = W_Q @ R[i].T @ pq
        M_s = pk.T @ R[j] @ W_K.T
        xd, xs = (x[i] + c_d) @ M_d, M_s @ (x[j] + c_s)
        want = (xd @ U) * S * (VT @ xs)
        assert torch.allclose(fixed.contributions[e].double(), want, atol=1e-3), (i, j)
    with pytest.raises(ValueError, match="rope_basis"):
        sparse_attention_decomposition(model, ids, layer, head, rope_basis="tracer")


@pytest.mark.parametrize("arch", ["gpt2", "llama", "neox"])
def test_fold_ln_keeps_logits_and_changes_the_basis(tiny_models, arch):
    model = tiny_models[arch]
    name = head_factors(model, 1, 0).input_module
    norm = dict(model.named_modules())[name]
    saved = {k: v.clone() for k, v in norm.state_dict().items()}
    with torch.no_grad():  # a non-trivial gain and bias, as in trained GPT-2
        norm.weight.copy_(0.2 + 2 * torch.rand(norm.weight.shape, generator=_gen(12)))
        if getattr(norm, "bias", None) is not None:
            norm.bias.copy_(torch.randn(norm.bias.shape, generator=_gen(13)))
    try:
        ids = torch.randint(3, 90, (2, 8), generator=_gen(14))
        X, Xf = head_inputs(model, ids, 1), head_inputs(model, ids, 1, fold_ln=True)
        xhat = Xf[..., :-1]
        if isinstance(norm, torch.nn.LayerNorm):  # x̂ is centred and unit-variance
            assert torch.allclose(xhat.mean(-1), torch.zeros(()), atol=1e-5)
        assert torch.allclose(xhat.pow(2).mean(-1), torch.ones(()), atol=3e-2)  # eps in the norm
        for h in range(4):
            f, ff = head_factors(model, 1, h), head_factors(model, 1, h, fold_ln=True)
            assert torch.allclose(X @ f.A, Xf @ ff.A, atol=1e-4)  # queries unchanged
            assert torch.allclose(X @ f.B, Xf @ ff.B, atol=1e-4)  # keys unchanged
        kw = dict(firing_thresh=0.0, exclude_first=False, control=False)
        a = sparse_attention_decomposition(model, ids, 1, 1, **kw)
        b = sparse_attention_decomposition(model, ids, 1, 1, fold_ln=True, **kw)
        fin = torch.isfinite(a.all_logits)
        assert torch.allclose(a.all_logits[fin], b.all_logits[fin], atol=1e-4)
        assert not torch.allclose(a.contributions, b.contributions, atol=1e-2)  # another basis
        # OV: the folded circuit reproduces LN(x) @ W_V W_O up to the constant β W_V W_O
        ov, ovf = ov_matrix(model, 1, 1), ov_matrix(model, 1, 1, fold_ln=True)
        beta = getattr(norm, "bias", None)
        const = 0.0 if beta is None else beta.detach() @ ov
        assert torch.allclose(X[..., :-1] @ ov, xhat @ ovf + const, atol=1e-4)
    finally:
        norm.load_state_dict(saved)
    with pytest.raises(TypeError, match="fold_ln"):
        head_factors(model, 1, 0, fold_ln="yes")


@pytest.mark.parametrize("arch", ["gpt2", "llama", "neox"])
def test_ov_svd_reconstructs_w_v_w_o(tiny_models, arch):
    model = tiny_models[arch]
    for h in (0, 3):
        U, S, Vh = ov_svd(model, 0, h)
        dh = U.shape[1]
        assert U.shape[0] == Vh.shape[1] and S.shape == (dh,)
        assert torch.allclose(U @ torch.diag(S) @ Vh, ov_matrix(model, 0, h), atol=1e-5)
        assert torch.allclose(U.T @ U, torch.eye(dh), atol=1e-5)
        assert torch.allclose(Vh @ Vh.T, torch.eye(dh), atol=1e-5)
        assert (S[:-1] >= S[1:] - 1e-7).all() and (S >= 0).all()
        Uf, Sf, Vhf = ov_svd(model, 0, h, fold_ln=True)
        assert torch.allclose(
            Uf @ torch.diag(Sf) @ Vhf, ov_matrix(model, 0, h, fold_ln=True), atol=1e-5
        )


def _out_weight(model, name):
    mod = dict(model.named_modules())[name]
    return mod.weight if name.endswith("c_proj") else mod.weight.T


def test_sad_rejects_bad_models_and_inputs(tiny_models):
    from common.tiny import tiny_causal_lm

    q3, _ = tiny_causal_lm("qwen3")
    ids = torch.randint(3, 90, (1, 5), generator=_gen(11))
    with pytest.raises(ValueError, match="q_norm"):
        sparse_attention_decomposition(q3, ids, 0, 0)
    llama = tiny_models["llama"]
    with pytest.raises(ValueError, match="delta"):
        qk_matrix(llama, 0, 0)
    with pytest.raises(ValueError, match="delta is only"):
        qk_matrix(tiny_models["gpt2"], 0, 0, delta=2)
    with pytest.raises(ValueError, match="head=9"):
        sparse_attention_decomposition(llama, ids, 0, 9)
    with pytest.raises(ValueError, match="input_ids"):
        sparse_attention_decomposition(llama, ids[0], 0, 0)
    with pytest.raises(ValueError, match="b_Q"):
        qk_matrix(W_Q=torch.randn(4, 2), W_K=torch.randn(4, 2), b_Q=torch.randn(3))
    with pytest.raises(ValueError, match="equal shape"):
        qk_matrix(W_Q=torch.randn(4, 2), W_K=torch.randn(4, 3))
    with pytest.raises(TypeError, match="not supported"):
        qk_matrix(torch.nn.Linear(2, 2), 0, 0)


def test_sad_firing_edges_follow_thresholds(tiny_models):
    ids = torch.randint(3, 90, (3, 12), generator=_gen(12))
    res = sparse_attention_decomposition(tiny_models["qwen2"], ids, 1, 0, firing_thresh=0.3)
    assert len(res.edges) > 0
    assert (res.probs >= 0.3).all() and (res.logits > 0).all() and (res.edges[:, 2] != 0).all()
    n = res.relative.shape[1]
    assert ((res.sparseness >= 1 / n - 1e-6) & (res.sparseness <= 1 + 1e-6)).all()
    assert ((res.n_recon >= 1) & (res.n_recon <= n)).all()


# ---------------------------------------------------------------- metrics


def test_rolls_tovee_properties():
    n = 7
    assert float(rolls_tovee(torch.eye(n)[2])) == pytest.approx(1 / n)
    assert float(rolls_tovee(torch.tensor([1.0, -1, 1, -1]) * 3)) == pytest.approx(1.0)
    v = torch.randn(50, n, generator=_gen(13))
    s = rolls_tovee(v)
    assert ((s >= 1 / n - 1e-6) & (s <= 1 + 1e-6)).all()
    assert torch.allclose(rolls_tovee(-2.5 * v), s, atol=1e-6)
    with pytest.raises(ValueError, match="all-zero"):
        rolls_tovee(torch.zeros(2, 3))
    assert torch.isnan(rolls_tovee(torch.zeros(3), nan_on_zero=True))


def test_n_recon_matches_brute_force():
    g = _gen(14)
    for _ in range(200):
        v = torch.randn(6, generator=g).double()
        tau = float(torch.rand(1, generator=g)) * 0.9 + 0.1
        tgt = float(v.sum())
        best = None
        for k in range(1, 7):  # brute force: best subset of size k in the target's direction
            sums = [sum(v[list(c)]) for c in itertools.combinations(range(6), k)]
            top = max(sums) if tgt > 0 else min(sums)
            if (tgt > 0 and top >= tau * tgt - 1e-9) or (tgt < 0 and top <= tau * tgt + 1e-9):
                best = k
                break
        assert int(n_recon(v, tau=tau)) == best
    assert int(n_recon(torch.tensor([0.0, 5.0, 0.0]))) == 1
    assert int(n_recon(torch.tensor([-3.0, 1.0, -0.5]), tau=0.9)) == 1  # negative: ascending order
    assert (
        int(n_recon(torch.tensor([4.0, -3.0, 2.0, -1.0]), tau=1.0)) == 1
    )  # first prefix overshoots
    assert int(n_recon(torch.tensor([1.0, -3.0, 2.0, 1.0]), tau=1.0)) == 1  # cancelling: terminates
    assert int(n_recon(torch.tensor([0.5, 1.0, 2.0]), tau=1.0)) == 3  # all positive: needs all
    assert int(n_recon(torch.tensor([1.0, -1.0]))) == 0  # zero target
    with pytest.raises(ValueError, match="tau"):
        n_recon(torch.ones(3), tau=0.0)


def test_relative_contributions_identities():
    g = _gen(15)
    A = torch.randn(6, 5, generator=g)  # [m, r]
    rel = relative_contributions(A)
    ell = A.sum(-1)
    rel_ell = ell - (ell.sum() - ell) / 5
    assert torch.allclose(rel.sum(-1), rel_ell, atol=1e-5)
    shifted = relative_contributions(A + torch.tensor([0.7, 0, 0, 0, 0]))  # constant on all logits
    assert torch.allclose(shifted.sum(-1), rel.sum(-1), atol=1e-5)
    assert int(rel.sum(-1).argmax()) == int(ell.argmax())
    with pytest.raises(ValueError, match="m >= 2"):
        relative_contributions(torch.randn(1, 4))


def test_random_rotation_basis_preserves_omega_and_logits():
    g = _gen(16)
    A, B = torch.randn(9, 4, generator=g).double(), torch.randn(9, 4, generator=g).double()
    U, S, Vh = factored_svd(A, B)
    U2, C2, Vh2 = random_rotation_basis(U, S, Vh, _gen(17))
    assert torch.allclose(U2 @ C2 @ Vh2, A @ B.T, atol=1e-10)
    assert torch.allclose(U2.T @ U2, torch.eye(4, dtype=torch.float64), atol=1e-10)
    assert torch.allclose(Vh2 @ Vh2.T, torch.eye(4, dtype=torch.float64), atol=1e-10)
    x, Xs = torch.randn(9, generator=g).double(), torch.randn(5, 9, generator=g).double()
    ell = Xs @ (A @ B.T).T @ x
    assert torch.allclose(sv_contributions(x, Xs, U, S, Vh).sum(-1), ell, atol=1e-10)
    assert torch.allclose(sv_contributions(x, Xs, U2, C2, Vh2).sum(-1), ell, atol=1e-10)
    assert C2.abs().min() > 0  # dense core


# ---------------------------------------------------------------- toy


def test_toy_alignment_rises_only_with_attention_loss():
    kw = dict(steps=150, batch=128, lr=2e-2, n_keys=4, feature_prob=0.2, seed=0)
    _, hist = train_toy(ToyConfig(lam=1.0, **kw), log_every=150)
    _, hist0 = train_toy(ToyConfig(lam=0.0, **kw), log_every=150)
    assert hist[-1]["align_top"] > 0.9 > hist[0]["align_top"]
    assert hist0[-1]["align_top"] < 0.6
    assert hist[-1]["attn"] < hist[0]["attn"] and hist[-1]["recon"] < hist[0]["recon"]


def test_toy_is_deterministic_and_validates():
    kw = dict(steps=5, batch=16, seed=3)
    m1, h1 = train_toy(ToyConfig(**kw), log_every=5)
    m2, h2 = train_toy(ToyConfig(**kw), log_every=5)
    assert torch.equal(m1.W, m2.W) and h1 == h2
    assert m1.omega().shape == (10, 10)
    for bad, match in (
        (dict(lam=-1.0), "lam"),
        (dict(feature_prob=0.0), "feature_prob"),
        (dict(n_keys=0), "n_keys"),
        (dict(attn_loss="kl"), "attn_loss"),
    ):
        with pytest.raises(ValueError, match=match):
            ToyConfig(**bad)
    with pytest.raises(ValueError, match="non-empty"):
        pair_template(5, [])
    with pytest.raises(ValueError, match="out of range"):
        pair_template(5, [(0, 5, 1.0)])
    with pytest.raises(ValueError, match="T must have shape"):
        train_toy(ToyConfig(**kw), T=torch.ones(3, 3))


def test_match_task_batches_are_well_posed():
    from methods.sv_features import MatchTaskConfig
    from methods.sv_features.toy_sad import sample_match_batch

    cfg = MatchTaskConfig(n_classes=6, tokens_per_class=3, seq_len=5)
    ids, tgt, jstar = sample_match_batch(cfg, 64, _gen(20))
    cls = ids % cfg.n_classes
    assert ids.shape == (64, 5) and int(ids.max()) < 18
    for b in range(64):
        ctx = cls[b, :-1].tolist()
        assert len(set(ctx)) == len(ctx)  # distinct classes: the match is unique
        assert ctx.index(int(cls[b, -1])) == int(jstar[b])
        assert int(tgt[b]) == int(ids[b, jstar[b]])
    with pytest.raises(ValueError, match="seq_len - 1"):
        MatchTaskConfig(n_classes=4, seq_len=8)


# ---------------------------------------------------------------- real-model drivers (paper §5)
def test_ioi_prompts_positions_and_revision_list():
    from common.tiny import tiny_tokenizer
    from methods.sv_features.paper import ioi_prompts, pythia_revisions

    tok = tiny_tokenizer()
    b = ioi_prompts(tok, 6, seed=0)
    assert b.input_ids.shape[0] == 6 and b.attention_mask.sum(1).tolist() == (b.end + 1).tolist()
    for k in range(6):
        text, io = b.texts[k], b.answers[k]
        enc = tok(text, return_offsets_mapping=True, add_special_tokens=False)["offset_mapping"]

        def cover(t, text=text, enc=enc):
            return text[enc[t][0] : enc[t][1]].strip()

        assert io.startswith(cover(int(b.io[k]))) and cover(int(b.io[k]))
        assert cover(int(b.s1[k])) == cover(int(b.s2[k])) and b.s2[k] > max(b.s1[k], b.io[k])
        assert text[enc[int(b.s1[k])][0] :].strip().split()[0].strip(",.") != io  # S is not IO
        assert text.rstrip().endswith(" to") and int(b.end[k]) == len(enc) - 1
    assert b.texts[0] != b.texts[1] and ioi_prompts(tok, 6, seed=0).texts == b.texts
    revs = pythia_revisions()
    assert len(revs) == 154 and revs[:3] == ["step0", "step1", "step2"] and revs[-1] == "step143000"
    thin = pythia_revisions(130)
    assert len(thin) == 130 and thin[:11] == revs[:11] and thin[-1] == "step143000"
    with pytest.raises(ValueError, match="n must be"):
        ioi_prompts(tok, 0)


def _save_tiny_gpt_models(root, seed=0):
    from transformers import GPT2Config, GPT2LMHeadModel, GPTNeoXConfig, GPTNeoXForCausalLM

    from common.tiny import tiny_tokenizer

    tok = tiny_tokenizer()
    torch.manual_seed(seed)
    gpt2 = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=len(tok),
            n_positions=64,
            n_embd=32,
            n_layer=2,
            n_head=2,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
        )  # fmt: skip
    )
    gpt2.save_pretrained(root / "gpt2")
    tok.save_pretrained(root / "gpt2")
    for k, rev in enumerate(["step0", "step1000"]):  # a local "checkpoint sweep"
        torch.manual_seed(seed + k)
        neox = GPTNeoXForCausalLM(
            GPTNeoXConfig(
                vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, rotary_pct=0.25, max_position_embeddings=64,
            )
        )  # fmt: skip
        neox.save_pretrained(root / "pythia" / rev)
    tok.save_pretrained(root / "pythia")
    return tok


def test_real_model_drivers_run_from_config_on_tiny_local_models(tmp_path):
    from common.registry import compose
    from common.registry import run_method as run
    from methods.sv_features.paper import ioi_prompts, load_causal_lm, select_ioi_head

    tok = _save_tiny_gpt_models(tmp_path)
    out = run(
        compose(
            [
                "experiment=sv_features_gpt2_ioi",
                f"model.path={tmp_path / 'gpt2'}",
                "method.real.n_prompts=4",
                "method.real.firing_thresh=0.0",
            ],
            run_dir=str(tmp_path / "run_gpt2"),
        )
    )
    assert out["ioi_heads/n_firing_heads"] == 4.0  # 2 layers x 2 heads, every visible edge kept
    assert 0 < out["ioi_heads/median_sparseness"] <= 1.0
    assert 1 <= out["ioi_heads/median_n_recon"] <= 16  # d_head = 16
    # the per-head summary equals a direct SAD call on the same prompts
    import json

    from methods.sv_features.paper import summarize

    model = load_causal_lm(str(tmp_path / "gpt2"))
    b = ioi_prompts(tok, 4, seed=0)
    res = sparse_attention_decomposition(
        model, b.input_ids, 1, 0, attention_mask=b.attention_mask, firing_thresh=0.0
    )
    saved = json.loads((tmp_path / "run_gpt2" / "results.json").read_text())
    assert saved["real"]["per_head"]["L1H0"]["n_edges"] == summarize(res)["n_edges"]
    layer, head = select_ioi_head(model, b)
    assert 0 <= layer < 2 and 0 <= head < 2
    out = run(
        compose(
            [
                "experiment=sv_features_pythia",
                f"model.path={tmp_path / 'pythia'}",
                "method.real.checkpoints=[step0,step1000]",
                "method.real.n_prompts=4",
            ],
            run_dir=str(tmp_path / "run_pythia"),
        )
    )
    assert out["ckpt_first/n_edges"] <= 4.0 and "ckpt_last/sparseness_control" in out
    assert out["ckpt_first/revision"] == 0.0 and out["ckpt_last/revision"] == 1.0
    assert (tmp_path / "run_pythia" / "checkpoint_sparseness.png").exists()
    # a Llama-style rotary model (GQA) by path through the same driver
    from common.tiny import save_tiny, tiny_causal_lm

    llama, ltok = tiny_causal_lm("llama", seed=0)
    save_tiny(llama, ltok, tmp_path / "llama")
    out = run(
        compose(
            [
                "experiment=sv_features_gpt2_ioi",
                f"model.path={tmp_path / 'llama'}",
                "method.real.n_prompts=2",
                "method.real.heads=[[1,0],[1,3]]",
                "method.real.firing_thresh=0.0",
            ],
            run_dir=str(tmp_path / "run_llama"),
        )
    )
    assert out["ioi_heads/n_firing_heads"] == 2.0 and 0 < out["ioi_heads/median_sparseness"] <= 1
    from common.config import ConfigError

    with pytest.raises(ConfigError, match="bogus"):
        compose(["experiment=sv_features_gpt2_ioi", "method.real.bogus=1"])
    with pytest.raises(ConfigError, match="method.real.n_prompts"):
        compose(["experiment=sv_features_gpt2_ioi", "method.real.n_prompts=abc"])
    with pytest.raises(ConfigError, match="rope_basis"):
        compose(["experiment=sv_features_gpt2_ioi", "method.real.rope_basis=tracer"])


# ---------------------------------------------------------------- paper smoke (tests/test_paper_presets.py)

PAPER_SMOKE = {
    "synthetic": [
        "method.single.steps=20",
        "method.single.batch=64",
        "method.multi.steps=10",
        "method.multi.batch=64",
        "method.closed_form.samples=2000",
    ],
    "sv_features_gpt2_ioi/ioi": ["model.path={tiny_gpt2}", "method.real.n_prompts=4"],
    "sv_features_pythia/checkpoints": [
        "model.path={tiny_pythia}",
        "method.real.n_checkpoints=12",
        "method.real.n_prompts=4",
    ],
}


def paper_smoke_setup(tmp_path):
    """A tiny GPT-2 and a 12-revision tiny Pythia sweep (folders named like the hub revisions)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from methods.sv_features.paper import pythia_revisions

    tok = _save_tiny_gpt_models(tmp_path)
    for k, rev in enumerate(pythia_revisions(12)):
        torch.manual_seed(k)
        neox = GPTNeoXForCausalLM(
            GPTNeoXConfig(
                vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, rotary_pct=0.25, max_position_embeddings=64,
            )
        )  # fmt: skip
        neox.save_pretrained(tmp_path / "pythia" / rev)
    return {"tiny_gpt2": str(tmp_path / "gpt2"), "tiny_pythia": str(tmp_path / "pythia")}
