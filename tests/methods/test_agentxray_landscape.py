"""The issue-43 landscape knob of the AgentXRay toy (``method.landscape``, ``landscape.py``)."""

from __future__ import annotations

import random

import pytest

from methods.agentxray.config import AgentXRayRunConfig
from methods.agentxray.costs import CostMeter
from methods.agentxray.diagnose import paired
from methods.agentxray.executor import WorkflowExecutor
from methods.agentxray.landscape import (
    TracingExecutor,
    chain_of,
    chain_score,
    chain_similarity,
    presence_r2,
)
from methods.agentxray.primitives import Primitive
from methods.agentxray.similarity import sfe
from methods.agentxray.toy import _toy_row, toy_data, toy_similarity
from methods.agentxray.xraybench import HIDDEN_CHAIN, TOY_AGENTS, TOY_TOOLS, ToyChat

H = list(HIDDEN_CHAIN)


def test_chain_score_is_presence_jaccard_plus_correct_prefix():
    shuffled = [H[1], H[0], *H[2:]]  # the right agents, wrong first step
    assert chain_score(shuffled, H, 0.0) == pytest.approx(1.0)
    assert chain_score(shuffled, H, 1.0) == pytest.approx(0.0)
    two = [H[0], H[1], "Renamer"]  # prefix 2 of 5; Jaccard 2 / 6
    assert chain_score(two, H, 1.0) == pytest.approx(2 / 5)
    assert chain_score(two, H, 0.0) == pytest.approx(2 / 6)
    assert chain_score(two, H, 0.5) == pytest.approx(0.5 * 2 / 6 + 0.5 * 2 / 5)
    assert chain_score(H, H, 0.3) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="reference chain is empty"):
        chain_score(H, [], 0.5)
    with pytest.raises(ValueError, match="alpha"):
        chain_similarity(1.5)


def test_tracing_executor_records_the_chain_and_changes_nothing_else():
    rng = random.Random(0)
    omega = [Primitive("agent", a) for a in TOY_AGENTS] + [Primitive("tool", t) for t in TOY_TOOLS]
    m_plain, m_traced = CostMeter(), CostMeter()
    plain = WorkflowExecutor(ToyChat(), TOY_TOOLS, m_plain)
    traced = TracingExecutor(ToyChat(), TOY_TOOLS, m_traced)
    task = "Functions: compute_sum, find_max, sort_values\nData: list"
    checked = 0
    for _ in range(40):
        wf = [rng.choice(omega) for _ in range(rng.randint(1, 6))]
        a, b = plain.run(wf, task), traced.run(wf, task)
        if a is None or b is None:
            assert a is None and b is None  # tools fail on the same chains
            continue
        fa, fb = plain.final_output(a), traced.final_output(b)
        assert (fa == "") == (fb == "")  # the same no-code rule (reward 0)
        assert b.startswith(a) and fb.startswith(fa)  # same content, then the trace line
        assert chain_of(b) == [p.name for p in wf if p.kind == "agent"]
        checked += fa != ""
    assert m_plain.snapshot() == m_traced.snapshot()  # agents saw the same prompts
    assert checked >= 10


def test_landscape_knob_changes_only_the_reward():
    base = AgentXRayRunConfig(n_test=3)
    assert toy_similarity(base) is sfe  # default: today's toy
    chain = AgentXRayRunConfig(n_test=3, landscape="chain", landscape_alpha=1.0)
    wf = [Primitive("agent", n) for n in (H[0], H[1], "Renamer")]
    st = {"depth": 3.0, "tokens/total": 0, "tokens/generator": 0, "tokens/agent": 0}
    _, test_b = toy_data(base, 0.0)
    _, test_c = toy_data(chain, 0.0)
    row_c = _toy_row(chain, wf, st, test_c)
    assert row_c["test_sfe"] == pytest.approx(2 / 5)  # correct prefix 2 of L = 5
    row_b = _toy_row(base, wf, st, test_b)
    ex = WorkflowExecutor(ToyChat(), TOY_TOOLS, CostMeter())
    want = [sfe(ex.final_output(ex.run(wf, t)), o) for t, o in test_b]
    assert row_b["test_sfe"] == pytest.approx(sum(want) / len(want))
    assert row_b["test_sfe"] != pytest.approx(row_c["test_sfe"])
    # noise perturbs the code of the black box (fenced), never its trace line
    train_n, _ = toy_data(AgentXRayRunConfig(landscape="chain"), 0.3)
    train_0, _ = toy_data(AgentXRayRunConfig(landscape="chain"), 0.0)
    assert all(chain_of(o) == H for _, o in train_n)
    assert [o for _, o in train_n] != [o for _, o in train_0]


def test_presence_r2_separates_additive_from_prefix_landscapes():
    agents = list(TOY_AGENTS)
    w = {a: i / 10 for i, a in enumerate(agents)}
    additive = presence_r2(lambda c: sum(w[a] for a in set(c)), agents, 200, 6, seed=1)
    assert additive["r2"] == pytest.approx(1.0) and additive["r2_heldout"] > 0.99
    jac = presence_r2(lambda c: chain_score(c, H, 0.0), agents, 300, 6, seed=1)
    pre = presence_r2(lambda c: chain_score(c, H, 1.0), agents, 300, 6, seed=1)
    assert jac["r2_heldout"] > 0.8 > pre["r2_heldout"]


@pytest.mark.parametrize("kw", [{"landscape": "prefix"}, {"landscape_alpha": -0.1}])
def test_landscape_config_errors(kw):
    with pytest.raises(ValueError, match="landscape"):
        AgentXRayRunConfig(**kw)


def test_paired_difference_and_interval():
    a, b = [0.5, 0.6, 0.7, 0.8], [0.4, 0.45, 0.6, 0.7]
    p = paired(a, b)
    assert p["delta"] == pytest.approx(0.1125) and p["wins"] == 4 and p["n"] == 4
    assert 0 < p["ci95"] < p["delta"]  # a consistent shift: the interval excludes zero
    assert paired(b, a)["delta"] == pytest.approx(-0.1125)


def _prefix_letters(cfg):
    """Agents A, B, C append their letter; reward = correct prefix of "BAC" / 3 (0 off the path)."""
    import re

    from common.llm import ScriptedChat
    from methods.agentxray.mcts import AgentXRaySearch
    from methods.agentxray.primitives import PrimitiveSpace, StaticProfileGenerator

    def llm(msgs):
        name = re.match(r"You are (\w+),", msgs[0]["content"]).group(1)
        prev = re.search(r's = "(\w*)"', msgs[1]["content"])
        return f'```python\ns = "{(prev.group(1) if prev else "") + name}"\n```'

    def sim(pred, ref):
        a, b = (re.search(r's = "(\w*)"', x).group(1) for x in (pred, ref))
        return chain_score(list(a), list(b), 1.0)

    meter = CostMeter()
    pool = [Primitive("agent", x) for x in "ABC"]
    space = PrimitiveSpace([], StaticProfileGenerator(pool, seed=cfg.seed, meter=meter))
    return AgentXRaySearch(space, WorkflowExecutor(ScriptedChat(llm), {}, meter), sim, cfg)


def test_zero_score_black_widens_a_zero_reward_first_dive():
    from methods.agentxray.mcts import MCTSConfig

    stuck = 0
    for seed in range(6):
        kw = {"iterations": 40, "max_children": 3, "max_depth": 3, "early_stop": 1.1, "seed": seed}
        official = _prefix_letters(MCTSConfig(**kw))
        official.search([("t", '```python\ns = "BAC"\n```')])
        if official.root.children[0].primitive.name != "B":  # the first dive scores 0
            stuck += 1
            assert len(official.root.children) == 1  # the root is red for ever
            fixed = _prefix_letters(MCTSConfig(**kw, zero_score_black=True))
            wf = fixed.search([("t", '```python\ns = "BAC"\n```')])
            assert len(fixed.root.children) > 1 and wf[0].name == "B"  # widened until B
    assert stuck >= 2
