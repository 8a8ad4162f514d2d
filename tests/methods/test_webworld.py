"""Tests for methods/webworld: action grammar, A11y parser/converters, trajectory filters."""

from __future__ import annotations

import random
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from methods.webworld import (
    ACTION_NAMES,
    A11yNode,
    Action,
    ActionParseError,
    Trajectory,
    drop_noop_transitions,
    filter_trajectory,
    from_xml,
    parse_a11y,
    parse_action,
    render_action,
    to_a11y,
    to_html,
    to_markdown,
    to_playwright,
    to_xml,
)
from methods.webworld.toy_world import random_crawl, random_tree

# One example call per primitive (paper Tables 12-13).
EXAMPLES = {
    "click": "click('59')",
    "fill": "fill('12', 'red shoes', press_enter=True)",
    "select_option": "select_option('7', ['a', 'b'])",
    "hover": "hover('3')",
    "mouse_move": "mouse_move(10.5, 20)",
    "mouse_click": "mouse_click(1, 2, button='right')",
    "mouse_down": "mouse_down(1, 2)",
    "mouse_up": "mouse_up(1, 2)",
    "keyboard_press": "keyboard_press('Enter')",
    "keyboard_type": "keyboard_type('hi there')",
    "scroll": "scroll(0, -300)",
    "goto": "goto('https://example.org/a?b=1')",
    "go_back": "go_back()",
    "go_forward": "go_forward()",
    "tab_new": "tab_new()",
    "tab_close": "tab_close()",
    "tab_focus": "tab_focus(2)",
    "send_msg_to_user": 'send_msg_to_user("it\'s done")',
    "noop": "noop(wait_ms=500)",
    "infeasible": "infeasible('no such page')",
    # the upstream demo's spellings (demo/prompts.py, AGENT_ACTION_SPACE)
    "new_tab": "new_tab()",
    "report_infeasible": "report_infeasible('the item does not exist')",
    "mouse_dblclick": "mouse_dblclick(10, 20, button='left')",
}


def test_examples_cover_the_paper_actions_and_the_demo_spellings():
    assert set(EXAMPLES) == set(ACTION_NAMES) and len(ACTION_NAMES) == 23


def test_agent_reply_in_the_demo_format_is_accepted():
    from methods.webworld import extract_action

    reply = "<reason>\nThe search box is [12].\n</reason>\n\n<action>\n```python\nfill('12', 'shoes')\n```\n</action>"
    assert extract_action(reply) == "fill('12', 'shoes')"
    assert parse_action(reply) == parse_action("fill('12', 'shoes')")
    assert parse_action("<ACTION>report_infeasible('gone')</ACTION>").name == "report_infeasible"
    assert extract_action("I will click.\nclick('3')\n") == "click('3')"  # untagged: last line
    with pytest.raises(ActionParseError):
        parse_action("<action>open_the_door()</action>")
    with pytest.raises(TypeError, match="reply"):
        extract_action(None)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_parse_render_round_trip(name):
    a = parse_action(EXAMPLES[name])
    assert a.name == name
    text = render_action(a)
    assert parse_action(text) == a
    assert render_action(parse_action(text)) == text  # canonical form is a fixed point


def test_parse_values_and_bid_forms():
    a = parse_action("fill('12', 'red shoes', press_enter=True)")
    assert a.args == ("12", "red shoes") and dict(a.kwargs) == {"press_enter": True}
    assert a.bid == "12"
    # bids as '59', 59, [59] and ['59'] all normalise to '59'; quotes/backticks are stripped
    for s in [
        "click('59')",
        "click(59)",
        "click([59])",
        "click(['59'])",
        "'click('59')'",
        "`click('59')`",
    ]:
        assert parse_action(s) == Action("click", ("59",)), s
    assert parse_action("scroll(0, 100)").bid is None
    assert parse_action("select_option('7', ['a', 'b'])").args[1] == ["a", "b"]


def test_kwargs_order_does_not_matter():
    a = parse_action("mouse_click(1, 2, button='left', modifiers=['Shift'])")
    b = Action("mouse_click", (1, 2), (("modifiers", ["Shift"]), ("button", "left")))
    assert render_action(a) == render_action(b)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "   ",
        "click",
        "click('1'",
        "explode('1')",
        "click()",
        "click(x)",
        "click(__import__('os'))",
        "os.system('ls')",
        "click('1'); click('2')",
        "click('1')\nclick('2')",
        "click(**{'a': 1})",
        "click(1.5)",
        "click(True)",
        "1 + 2",
        "[click('1')]",
    ],
)
def test_malformed_actions_raise(bad):
    with pytest.raises(ActionParseError):
        parse_action(bad)


def test_action_type_errors():
    with pytest.raises(TypeError, match="text"):
        parse_action(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name"):
        Action("teleport")
    with pytest.raises(TypeError, match="action"):
        render_action("click('1')")  # type: ignore[arg-type]


# ---------------------------------------------------------------- A11y trees


def _trees(n=30):
    return [
        random_tree(random.Random(s), n_nodes=random.Random(s).randint(1, 25)) for s in range(n)
    ]


def test_a11y_round_trip_on_generated_trees():
    for t in _trees():
        text = to_a11y(t)
        assert parse_a11y(text) == t
        assert to_a11y(parse_a11y(text)) == text


@pytest.mark.parametrize("unit", ["  ", "    "])
def test_space_indentation_parses_like_tabs(unit):
    for t in _trees(10):
        assert parse_a11y(to_a11y(t, indent=unit)) == t


def test_xml_round_trip_and_well_formed():
    for t in _trees():
        x = to_xml(t)
        ET.fromstring(x)  # well-formed
        assert from_xml(x) == t


def _bids(t: A11yNode) -> list[str]:
    return [n.bid for n in t.walk() if n.bid is not None]


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.bids, self.depth, self.max_depth = [], 0, 0

    def handle_starttag(self, tag, attrs):
        d = dict(attrs)
        if "bid" in d:
            self.bids.append(d["bid"])


def test_every_converter_keeps_element_ids_in_order():
    for t in _trees():
        want = _bids(t)
        assert re.findall(r"\bbid=\"([^\"]+)\"", to_xml(t)) == want
        p = _Collect()
        p.feed(to_html(t))
        assert p.bids == want
        assert re.findall(r"^\s*- \[(\S+)\]", to_markdown(t), flags=re.M) == want
        assert re.findall(r"\[ref=(\S+?)\]", to_playwright(t)) == want


def test_line_based_converters_preserve_depth_and_count():
    for t in _trees():
        n = sum(1 for _ in t.walk())
        a11y_depths = [len(ln) - len(ln.lstrip("\t")) for ln in to_a11y(t).split("\n")]
        for text in (to_markdown(t), to_playwright(t)):
            lines = text.split("\n")
            assert len(lines) == n
            assert [(len(ln) - len(ln.lstrip(" "))) // 2 for ln in lines] == a11y_depths


def test_names_with_commas_and_values_kept():
    text = "RootWebArea 'A, B', focused\n\t[4] textbox 'q', clickable, value='x, y'"
    t = parse_a11y(text)
    assert t.name == "A, B" and t.children[0].props == {"clickable": "", "value": "'x, y'"}
    assert to_a11y(t) == text


def test_multiple_top_level_nodes_and_errors():
    text = "[1] link 'a'\n[2] link 'b'"
    t = parse_a11y(text)
    assert [c.bid for c in t.children] == ["1", "2"] and to_a11y(t) == text
    assert from_xml(to_xml(t)) == t
    with pytest.raises(ValueError, match="text"):
        parse_a11y("")
    with pytest.raises(ValueError, match="deeper"):
        parse_a11y("RootWebArea 'x'\n\t\t[2] link 'y'")
    with pytest.raises(TypeError, match="text"):
        parse_a11y(3)  # type: ignore[arg-type]


# ---------------------------------------------------------------- trajectories


def _traj(states, actions=None):
    actions = actions if actions is not None else [f"click('{i}')" for i in range(len(states) - 1)]
    return Trajectory("goal", list(states), actions)


def test_trajectory_length_check():
    with pytest.raises(ValueError, match="states"):
        Trajectory("", ["a", "b"], [])


def test_drop_noop_hand_cases():
    t = _traj(["A", "A", "B", "B ", "B", "C"], ["a0", "a1", "a2", "a3", "a4"])
    out = drop_noop_transitions(t)
    assert out.states == ["A", "B", "C"] and out.actions == ["a1", "a4"]
    assert t.n_transitions == 5  # input untouched
    assert drop_noop_transitions(t, normalise=None).states == ["A", "B", "B ", "B", "C"]
    assert drop_noop_transitions(_traj(["A", "A"])).n_transitions == 0
    # A -> B -> A is a real change each step (a revisit is not a no-op)
    assert drop_noop_transitions(_traj(["A", "B", "A"])).n_transitions == 2


def test_drop_noop_invariants_on_crawls():
    for s in range(40):
        t, n_noop = random_crawl(random.Random(s))
        out = drop_noop_transitions(t)
        assert out.n_transitions == t.n_transitions - n_noop
        assert all(a != b for a, b in zip(out.states, out.states[1:]))
        assert drop_noop_transitions(out) == out  # idempotent
        assert out.states[0] == t.states[0] and out.states[-1] == t.states[-1]


def test_filter_trajectory_hand_cases():
    t = _traj(["one two", "three", "four"])  # instruction 1 + states 4 + actions 2 words = 7
    assert filter_trajectory(t)
    assert filter_trajectory(t, max_tokens=7) and not filter_trajectory(t, max_tokens=6)
    assert filter_trajectory(t, max_turns=2) and not filter_trajectory(t, max_turns=1)
    assert not filter_trajectory(_traj(["only"]))  # no transitions
    assert not filter_trajectory(t, blocklist=["THREE"])
    assert filter_trajectory(t, blocklist=["casino"])
    assert not filter_trajectory(t, tok=lambda s: list(s), max_tokens=20)  # char "tokens"
    with pytest.raises(ValueError, match="max_tokens"):
        filter_trajectory(t, max_tokens=0)
    with pytest.raises(TypeError, match="traj"):
        filter_trajectory(["x"])  # type: ignore[arg-type]


class _CharTok:
    """Stands in for an HF tokenizer (``encode(text, add_special_tokens=False)``), one id per char."""

    def encode(self, text, add_special_tokens=True):
        return [ord(c) for c in text] + ([0] if add_special_tokens else [])


def test_filter_with_tokenizer_encode():
    tok = _CharTok()
    t = _traj(["RootWebArea 'a'", "RootWebArea 'b'"])
    n = sum(len(x) for x in [t.instruction, *t.states, *t.actions])
    assert filter_trajectory(t, tok=tok, max_tokens=n)
    assert not filter_trajectory(t, tok=tok, max_tokens=n - 1)


# ---------------------------------------------------------------- chat format


def test_build_messages_roles_and_first_turn():
    from methods.webworld import FIRST_TURN, build_messages

    msgs = build_messages("S0", ["click('1')", "go_back()"], ["S1"])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[1]["content"] == FIRST_TURN.format(state="S0", action="click('1')")
    assert "go_back()" in msgs[3]["content"] and "S0" not in msgs[3]["content"]
    full = build_messages("S0", ["a()", "b()"], ["S1", "S2"])
    assert full[-1] == {"role": "assistant", "content": "S2"}
    with pytest.raises(ValueError, match="states"):
        build_messages("S0", ["a()"], ["S1", "S2"])
    with pytest.raises(ValueError, match="actions"):
        build_messages("S0", [])


def test_config_prompts_match_module_defaults():
    from methods.webworld import CONTINUE_TURN, FIRST_TURN, SYSTEM_PROMPT
    from methods.webworld.config import WebWorldRunConfig

    p = WebWorldRunConfig().prompts
    assert p["system"] == SYSTEM_PROMPT
    assert p["first_turn"] == FIRST_TURN and p["continue_turn"] == CONTINUE_TURN


def test_paper_config_stages_and_bad_overrides():
    from common.config import ConfigError
    from common.registry import compose

    with pytest.raises(ConfigError, match="stage1.*stage2.*synth.*agent.*bench"):
        compose(["experiment=webworld_paper"])  # stage=paper names the stages, never the toy
    cfg = compose(["experiment=webworld_paper", "method.stage=bench"])
    assert cfg.method.paper.bench.temperature == 0.7 and cfg.method.paper.bench.top_p == 0.8
    assert cfg.method.paper.bench.judge_max_tokens == 8192 and len(cfg.benchmark.sets) == 9
    with pytest.raises(ConfigError, match="learning_rat"):
        compose(
            [
                "experiment=webworld_paper",
                "method.stage=stage1",
                "+method.stage1_trainer.learning_rat=1",
            ]
        )
    with pytest.raises(ConfigError, match="epochs"):
        compose(["experiment=webworld_toy", "method.epochs=two"])


def test_strip_reasoning():
    from methods.webworld import strip_reasoning

    assert (
        strip_reasoning("<think>hmm\nok</think>\n```text\nRootWebArea 'a'\n```")
        == "RootWebArea 'a'"
    )
    assert strip_reasoning("<reason>x</reason>S") == "S"
    assert strip_reasoning("plain") == "plain"


def test_to_chat_and_convert_sample_only_touch_the_initial_tree():
    from methods.webworld import convert_sample, to_chat

    t, _ = random_crawl(random.Random(3))
    chat = to_chat(t)["messages"]
    assert len(chat) == 1 + 2 * t.n_transitions
    assert [m["content"] for m in chat if m["role"] == "assistant"] == t.states[1:]
    for fmt, conv in [("xml", to_xml), ("markdown", to_markdown), ("playwright", to_playwright)]:
        out = convert_sample(chat, fmt)
        assert conv(parse_a11y(t.states[0])) in out[1]["content"]
        assert out[1]["content"].endswith(
            chat[1]["content"][chat[1]["content"].index("\n\nFirst") :]
        )
        assert out[0] == chat[0] and out[2:] == chat[2:]  # rest of the chat untouched
    assert convert_sample(chat, "a11y") == chat  # the A11y writer reproduces its input
    with pytest.raises(ValueError, match="fmt"):
        convert_sample(chat, "pdf")
    with pytest.raises(ValueError, match="messages"):
        convert_sample([{"role": "user", "content": "hi"}], "xml")


# ---------------------------------------------------------------------------------------------
# Simulator, judge metrics, lookahead, synthesis, training recipe, toy sites (paper §4, App. N.3; official demo loop; our toy)
# ---------------------------------------------------------------------------------------------
import json  # noqa: E402
from pathlib import Path  # noqa: E402

from common.llm import ScriptedChat  # noqa: E402
from methods.webworld import (  # noqa: E402
    FIRST_TURN,
    JudgeResult,
    ToyBrowser,
    WebWorldSimulator,
    agent_sft_dataset,
    aggregate,
    crawl,
    evaluate,
    factuality,
    instantiate_goal,
    last_turn_dataset,
    load_bench_jsonl,
    lookahead_search,
    make_sites,
    page_title,
    parse_judge_json,
    parse_value_reply,
    stage1_config,
    stage2_config,
    synthesize,
    web_turing,
)


def _page(i: int) -> str:
    return f"RootWebArea 'p{i}', focused\n\t[{i + 10}] link 'next', clickable"


def _counting_llm():
    """A scripted world model whose n-th reply is page n (always a valid A11y state)."""
    n = iter(range(1, 10_000))
    return ScriptedChat(lambda msgs: _page(next(n)))


def test_simulator_sliding_window_rebase():
    llm = _counting_llm()
    sim = WebWorldSimulator(llm, window=10)
    sim.reset(_page(0))
    for t in range(25):
        state, info = sim.step(f"click('{t + 10}')")
        assert state == _page(t + 1) and not info["format_mismatch"]
        assert len(sim.messages) - 1 <= 20  # at most 2W non-system messages
        assert sum(m["role"] == "system" for m in sim.messages) == 1
        roles = [m["role"] for m in sim.messages[1:]]
        assert roles == ["user", "assistant"] * (len(roles) // 2)
    assert sim.n_rebases > 0
    # the first user turn is a valid FIRST_TURN built on an earlier *predicted* state and the action
    # that followed it; the context then continues without gaps
    first = sim.messages[1]["content"]
    m = re.fullmatch(FIRST_TURN.format(state="(?P<s>.*)", action="(?P<a>.*)"), first, re.S)
    assert m is not None
    k = int(re.search(r"'p(\d+)'", m.group("s")).group(1))
    assert m.group("s") == _page(k) and k >= 1 and m.group("a") == f"click('{k + 10}')"
    assert sim.messages[2]["content"] == _page(k + 1)
    assert sim.messages[-1]["content"] == _page(25)
    # every model call saw one system prompt and at most 2W + 1 turns (context + the new action)
    assert all(len(c) - 1 <= 21 and c[0]["role"] == "system" for c in llm.calls)
    assert llm.calls[-1][-1]["content"].endswith("Action: 'click('34')'\n\nNext Page State:")


# Fixture: tests/fixtures/webworld/official_window.json, made by running the upstream demo's
# WorldModelContext (QwenLM/WebWorld demo/world_model_context.py, read in its fork fannyunkang/WebWorld
# @ 075c6a0) for 31 steps with window 10 and 4 on pages p1..p31 and quote-free actions; per step it
# records the first turn's base state and action and the assistant states kept (docs/methods/webworld.md).
@pytest.mark.parametrize("window", [10, 4])
def test_sliding_window_default_matches_the_upstream_demo_on_every_step(window):
    path = Path(__file__).parent.parent / "fixtures" / "webworld" / "official_window.json"
    steps = json.loads(path.read_text())[str(window)]

    def trace(rebase):
        sim = WebWorldSimulator(
            _counting_llm(), window=window, **({"rebase": rebase} if rebase else {})
        )
        sim.reset(_page(0))
        out = []
        for st in steps:
            sim.step(st["action"])
            m = re.fullmatch(
                FIRST_TURN.format(state="(?P<s>.*)", action="(?P<a>.*)"),
                sim.messages[1]["content"],
                re.S,
            )
            kept = [x["content"] for x in sim.messages if x["role"] == "assistant"]
            out.append((m.group("s"), m.group("a"), kept))
        return out

    want = [(st["base_state"], st["base_action"], st["kept"]) for st in steps]
    assert trace(None) == want  # the default is the upstream rule on all 31 steps
    assert sum(a == b for a, b in zip(trace("second_state"), want)) < len(want)


def test_simulator_second_state_vs_first_state_rebase():
    for rebase, s0 in (("second_state", 2), ("first_state", 1)):
        sim = WebWorldSimulator(_counting_llm(), window=1, rebase=rebase)
        sim.reset(_page(0))
        sim.step("click('10')")
        sim.step("click('11')")
        if rebase == "second_state":
            sim.step("click('12')")  # needs 3 pairs before it can drop two
        assert sim.n_rebases == 1
        assert sim.messages[1]["content"] == FIRST_TURN.format(
            state=_page(s0), action=f"click('{s0 + 10}')"
        )


def test_simulator_history_single_and_window_errors():
    llm = _counting_llm()
    sim = WebWorldSimulator(llm, history="single")
    sim.reset(_page(0))
    sim.step("click('10')")
    sim.step("click('11')")
    last = llm.calls[-1]
    assert len(last) == 2 and last[1]["content"] == FIRST_TURN.format(
        state=_page(1), action="click('11')"
    )
    with pytest.raises(ValueError, match="window"):
        WebWorldSimulator(llm, window=0)
    with pytest.raises(ValueError, match="history"):
        WebWorldSimulator(llm, history="half")
    with pytest.raises(ValueError, match="s0"):
        sim.reset("   ")


def test_simulator_bad_action_not_sent_and_format_mismatch():
    llm = ScriptedChat(["", "<html><body>x</body></html>", "<think>plan</think>\n" + _page(3)])
    sim = WebWorldSimulator(llm)
    sim.reset(_page(0))
    with pytest.raises(ActionParseError):
        sim.step("rm -rf /")
    assert llm.calls == []  # never forwarded to the model
    s, info = sim.step("click('10')")  # empty prediction: keep the previous state
    assert info["format_mismatch"] and s == _page(0)
    s, info = sim.step("click('10')")  # HTML for an A11y input: mismatch
    assert info["format_mismatch"] and s == _page(0)
    s, info = sim.step("click('10')")
    assert not info["format_mismatch"] and s == _page(3) and info["reasoning"] == "plan"


def test_simulator_truncation_and_confidence_with_tiny_model(tiny_qwen2):
    from common.generation import HFGenerator

    model, tok = tiny_qwen2
    sim = WebWorldSimulator(
        HFGenerator(model, tok), temperature=0.0, max_tokens=3, return_logprobs=True
    )
    sim.reset(_page(0))
    _, info = sim.step("click('10')")
    assert info["truncated"] is True  # 3 new tokens cannot finish a page
    assert 0.0 < info["confidence"] <= 1.0
    assert info["logprob"] <= 0.0


# ---- judge metrics -------------------------------------------------------------------------
def test_factuality_parsing_clamping_and_errors():
    def fact(reply):
        return factuality(ScriptedChat([reply]), "h", "click('1')", "p", "g")

    assert fact("0.7").score == pytest.approx(0.7)
    assert fact('{"reasoning": "r", "action_effect_accuracy_score": 1.3}').score == 1.0
    assert fact('{"action_effect_accuracy_score": -2}').score == 0.0
    r = fact('Sure!\n```json\n{"reasoning": "ok", "action_effect_accuracy_score": 0.4}\n```')
    assert r.score == pytest.approx(0.4) and r.error is None and r.reasoning == "ok"
    for bad in (
        "I think it is good",
        '{"reasoning": "no score"}',
        '{"action_effect_accuracy_score": "x"}',
    ):
        r = fact(bad)
        assert r.score == 0.0 and r.error is not None
    for level in (0.0, 0.4, 0.7, 1.0):
        reply = json.dumps({"reasoning": "", "action_effect_accuracy_score": level})
        assert fact(reply).score == level

    def boom(_):
        raise RuntimeError("HTTP 500")

    r = factuality(ScriptedChat(boom), "h", "a", "p", "g")
    assert r.score == 0.0 and "HTTP 500" in r.error


def _turing(judge, rng, pred="PRED", gt="GT"):
    return web_turing(judge, "h", "click('1')", pred, gt, rng)


def test_web_turing_stub_judges():
    rng = random.Random(0)
    always_a = ScriptedChat(lambda m: '{"reasoning": "", "choice": "A"}')
    scores = [_turing(always_a, rng).score for _ in range(2000)]
    assert abs(sum(scores) / len(scores) - 0.5) < 0.03

    def picks(which):
        def f(msgs):
            text = msgs[-1]["content"]
            slot_a = text.split("Observation A:\n", 1)[1].split("\n", 1)[0]
            return json.dumps({"choice": "A" if slot_a == which else "B"})

        return ScriptedChat(f)

    assert all(_turing(picks("GT"), rng).score == 0.0 for _ in range(200))
    assert all(_turing(picks("PRED"), rng).score == 1.0 for _ in range(200))
    r = _turing(ScriptedChat(['{"choice": "C"}']), rng)
    assert r.score == 0.0 and "A or B" in r.error
    r = _turing(ScriptedChat(["no json here"]), rng)
    assert r.score == 0.0 and r.error is not None


def test_aggregate_counts_errors():
    f = [JudgeResult(1.0), JudgeResult(0.0, error="bad"), JudgeResult(0.7)]
    t = [JudgeResult(1.0), JudgeResult(0.0), JudgeResult(0.0, error="bad")]
    out = aggregate(f, t, truncated=[True, False, False])
    assert out["factuality"] == pytest.approx(1.7 / 3)
    assert out["total"] == pytest.approx((1.0 + 0.0 + 0.35) / 3)
    assert out["fact_error_rate"] == pytest.approx(1 / 3)
    assert out["turing_error_rate"] == pytest.approx(1 / 3)
    assert out["truncated_rate"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="equal length"):
        aggregate(f, t[:2])
    assert parse_judge_json('x {"a": 1} y') == {"a": 1}
    with pytest.raises(ValueError):
        parse_judge_json("nothing")


def _bench_file(path, n=4):
    lines = []
    for i in range(n):
        chat = {
            "messages": [
                {"role": "system", "content": "sys"},
                {
                    "role": "user",
                    "content": FIRST_TURN.format(state=_page(i), action="click('10')"),
                },
                {"role": "assistant", "content": _page(i + 1)},
            ]
        }
        lines.append(json.dumps(chat))
    lines.insert(1, '{"messages": [broken')  # a corrupt line is skipped and counted
    path.write_text("\n".join(lines) + "\n")
    return path


def test_bench_loader_and_evaluate_with_tiny_world_model(tmp_path, tiny_qwen2):
    from common.llm import HFChat

    samples, skipped = load_bench_jsonl(_bench_file(tmp_path / "base.jsonl"))
    assert len(samples) == 4 and skipped == 1 and samples[0].action == "click('10')"
    assert samples[0].gt == _page(1) and samples[0].context[-1]["role"] == "user"
    model, tok = tiny_qwen2
    wm = HFChat(model, tok, max_new_tokens=4)
    replies = iter(
        ['{"action_effect_accuracy_score": 0.7}', "garbage"] * 2 + ["0.4", '{"choice": "A"}'] * 2
    )
    judge = ScriptedChat(lambda m: next(replies))
    res = evaluate(wm, samples, judge, seed=0)
    assert set(res) == {"base", "all"} and res["all"]["n"] == 4
    assert res["all"]["factuality"] == pytest.approx((0.7 * 2 + 0.4 * 2) / 4)
    assert res["all"]["turing_error_rate"] == pytest.approx(0.5)


FIX = Path(__file__).parent.parent / "fixtures" / "webworld"


def test_bench_reads_the_official_eval_formats():
    from methods.webworld.bench_data import load_bench_file

    base, skipped = load_bench_file(FIX / "base.jsonl")
    assert len(base) == 3 and skipped == 1 and base[0].dim == "base"
    assert base[1].action == "click('11')" and base[1].gt == _page(2)
    assert base[1].context[-1]["content"] == FIRST_TURN.format(state=_page(1), action="click('11')")
    assert base[1].traj.startswith("Page State:\n" + _page(1))
    long, skipped = load_bench_file(FIX / "long.json")
    assert len(long) == 2 and skipped == 1  # the empty trajectory is counted
    for s, n in zip(long, (2, 3), strict=True):  # alternating items, then step dicts
        assert s.gt == _page(n) and s.action == f"click('{n + 9}')" and s.dim == "long"
        assert [m["role"] for m in s.context] == ["system"] + ["user", "assistant"] * (n - 1) + [
            "user"
        ]
        assert s.context[-2]["content"] == _page(n - 1)
    nal, _ = load_bench_file(FIX / "Web2NAL.jsonl")
    assert len(nal) == 2 and nal[0].gt == "The page p1 opens." and nal[0].traj == _page(0)


class _RecordingGenerator:
    def __init__(self):
        self.params = []

    def generate(self, convs, n, params):
        from types import SimpleNamespace

        self.params.append(params)
        return [[SimpleNamespace(text=_page(99), finish_reason="stop")] for _ in convs]


def test_bench_samples_with_the_official_settings():
    from methods.webworld.bench_data import load_bench_file

    samples, _ = load_bench_file(FIX / "base.jsonl")
    gen = _RecordingGenerator()
    judge = ScriptedChat(lambda m: '{"action_effect_accuracy_score": 1.0, "choice": "A"}')
    res = evaluate(gen, samples, judge, seed=0)
    p = gen.params[0]
    assert (p.temperature, p.top_p, p.max_new_tokens) == (0.7, 0.8, 8192)  # model_config.yaml
    assert res["all"]["n"] == 3 and res["all"]["factuality"] == 1.0


# ---- lookahead -----------------------------------------------------------------------------
class _TableSim:
    def __init__(self, table):
        self.table = table
        self.peeked = []

    def peek(self, actions):
        self.peeked.append(list(actions))
        return [(self.table[a], {}) for a in actions]


def test_lookahead_picks_best_and_ties_go_first():
    sim = _TableSim({"click('1')": "bad", "click('2')": "good", "click('3')": "good"})
    cands = iter(["click('1')", "click('2')", "click('3')"])
    a, info = lookahead_search(lambda: next(cands), sim, lambda s: float(s == "good"), k=3)
    assert a == "click('2')" and info["chosen"] == 1 and info["values"] == [0.0, 1.0, 1.0]
    cands = iter(["click('3')", "click('1')"])
    a, _ = lookahead_search(lambda: next(cands), sim, lambda s: 0.0, k=2)
    assert a == "click('3')"  # all tied: the agent's first sample (greedy)
    cands = iter(["not an action", "click('1')"])
    a, info = lookahead_search(lambda: next(cands), sim, lambda s: 1 / 0, k=2)
    assert a == "click('1')" and info["values"][0] == float("-inf")  # failing value -> 0
    with pytest.raises(ValueError, match="k"):
        lookahead_search(lambda: "noop()", sim, lambda s: 0.0, k=0)
    assert parse_value_reply("Status: SUCCESS") == ("SUCCESS", 1.0)
    assert parse_value_reply("status: ongoing\nScore: 0.3") == ("ONGOING", 0.3)
    assert parse_value_reply("I am not sure") == ("ONGOING", 0.0)


# ---- synthesis -----------------------------------------------------------------------------
def test_synthesize_filters_and_instantiate_none():
    assert instantiate_goal(ScriptedChat(["  none \n"]), "s", ["noop()"], "s") is None
    assert instantiate_goal(ScriptedChat(["Open p1"]), "s", ["noop()"], "s") == "Open p1"
    sim = WebWorldSimulator(_counting_llm(), window=10)
    acts = iter(
        ["click('10')", "send_msg_to_user('done')", "click('10')", "bogus"] + ["click('10')"] * 2
    )
    tasks = [("reach p1", _page(0)), ("x", _page(0)), ("reach p9", _page(0))]
    kept, counts = synthesize(
        lambda g, s: next(acts),
        sim,
        tasks,
        lambda g, s: g.endswith(page_title(s) or "?"),
        max_steps=2,
    )
    assert counts == dict(kept=1, bad_action=1, truncated=0, format_mismatch=0, failed=1, no_goal=0)
    assert kept[0].actions == ["click('10')", "send_msg_to_user('done')"]
    ds = agent_sft_dataset(kept)
    assert len(ds) == 2 and ds[0]["completion"][0]["content"] == "click('10')"


# ---- training recipe -----------------------------------------------------------------------
def test_stage_configs_follow_table9():
    # use_cpu only lets bf16 validate on this CPU machine; every recipe value is the paper's
    c1 = stage1_config("8B", output_dir="/tmp/x", use_cpu=True)
    assert c1.learning_rate == 2e-5 and c1.num_train_epochs == 1 and c1.packing
    assert c1.max_length == 20_000 and c1.assistant_only_loss and c1.lr_scheduler_type == "cosine"
    assert c1.per_device_train_batch_size * c1.gradient_accumulation_steps == 4
    c2 = stage2_config("14B", output_dir="/tmp/x", use_cpu=True)
    assert c2.learning_rate == 8e-6 and c2.num_train_epochs == 5 and c2.completion_only_loss
    with pytest.raises(ValueError, match="model_size"):
        stage1_config("7B")


def test_loss_masks_and_a_train_step(tmp_path):
    """Stage 1: labels on every assistant token only; Stage 2: only the last assistant turn."""
    from trl import SFTTrainer

    from common.tiny import tiny_causal_lm
    from methods.webworld.train import chat_dataset, site_tokenizer, train_world_model

    sites = make_sites(2, random.Random(0))
    trajs = [crawl(sites[i % 2], random.Random(i), 2, 3) for i in range(6)]
    ds = chat_dataset([t for t in trajs if t.n_transitions >= 2])
    tok = site_tokenizer([m["content"] for r in ds for m in r["messages"]], vocab_size=400)
    model, _ = tiny_causal_lm("qwen2", hidden_size=32, intermediate_size=64, tokenizer=tok)
    cfg = stage1_config(
        "tiny",
        output_dir=str(tmp_path),
        max_steps=2,
        learning_rate=1e-3,
        per_device_train_batch_size=2,
        packing=False,
        disable_tqdm=True,
    )
    tr = SFTTrainer(model=model, args=cfg, train_dataset=ds, processing_class=tok)
    row = tr.train_dataset[0]
    ids, labels = row["input_ids"], row["labels"]
    text_on = tok.decode([i for i, lab in zip(ids, labels) if lab != -100])
    msgs = ds[0]["messages"]
    for m in msgs:
        if m["role"] == "assistant":
            assert m["content"] in text_on
    assert "Initial Page State" not in text_on and msgs[0]["content"] not in text_on
    before = [p.detach().clone() for p in model.parameters()]
    _, loss = train_world_model(model, tok, ds, cfg)
    assert loss == loss and any((a != b).any() for a, b in zip(before, model.parameters()))
    # Stage 2: prompt-completion form, completion = the last assistant turn only
    cfg2 = stage2_config("tiny", output_dir=str(tmp_path), max_steps=1, disable_tqdm=True)
    ds2 = last_turn_dataset(ds)
    tr2 = SFTTrainer(model=model, args=cfg2, train_dataset=ds2, processing_class=tok)
    row2 = tr2.train_dataset[0]
    on = tok.decode([i for i, lab in zip(row2["input_ids"], row2["labels"]) if lab != -100])
    assert msgs[-1]["content"] in on
    assert all(m["content"] not in on for m in msgs[:-1] if m["role"] == "assistant")
    with pytest.raises(ValueError, match="assistant"):
        last_turn_dataset([{"messages": msgs[:-1]}])


# ---- toy sites -----------------------------------------------------------------------------
def test_toy_browser_semantics():
    site = make_sites(1, random.Random(3))[0]
    b = ToyBrowser(site)
    s0 = b.reset()
    page = site.pages[site.start]
    bid, target = page.links[0]
    s1 = b.step(f"click('{bid}')")
    assert page_title(s1) == target  # title equals the link name
    b.step(f"click('{site.pages[target].checkbox}')")
    assert "checked='true'" in b.state()
    b.step(f"fill('{site.pages[target].textbox}', 'tea')")
    assert "value='tea'" in b.state()
    s_fill = b.state()
    assert page_title(b.step(f"click('{site.pages[target].search}')")) == "Results for tea"
    assert b.step("go_back()") == s_fill  # go_back restores the page exactly
    assert b.step("go_back()") == s0
    assert b.step("click('999')") == s0  # unknown bid: no change
    for i in range(20):
        t = crawl(site, random.Random(i))
        assert all(a != b for a, b in zip(t.states, t.states[1:]))  # no-op transitions dropped


def test_word_tokenizer_single_token_names_and_bids_lossless():
    """Our toy's WordLevel vocabulary: a title / link name / bid is one token, shared between the page
    and the action, and decoding is lossless on the grammar."""
    from methods.webworld.train import chat_dataset, site_tokenizer

    sites = make_sites(3, random.Random(4))
    trajs = [crawl(sites[i % 3], random.Random(i), 2, 4) for i in range(12)]
    ds = chat_dataset([t for t in trajs if t.n_transitions])
    corpus = [m["content"] for r in ds for m in r["messages"]]
    tok = site_tokenizer(corpus, vocab_size=1000, kind="word")
    for r in ds:
        text = tok.apply_chat_template(r["messages"], tokenize=False)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids and tok.decode(ids) == text
    page = sites[0].pages[sites[0].start]
    bid, name = page.links[0]
    state = ToyBrowser(sites[0]).reset()
    toks = tok.convert_ids_to_tokens(tok(state, add_special_tokens=False)["input_ids"])
    assert name in toks and bid in toks  # one token each
    act = tok.convert_ids_to_tokens(tok(f"click('{bid}')", add_special_tokens=False)["input_ids"])
    assert bid in act  # the same token in the action and in the page
    with pytest.raises(ValueError, match="kind"):
        site_tokenizer(corpus, kind="char")
    with pytest.raises(ValueError, match="vocab_size"):
        site_tokenizer(corpus, vocab_size=20, kind="word")


def test_toy_effect_metric_hand_cases():
    from methods.webworld.toy import effect_present, line_f1

    prev = "RootWebArea 'a', focused\n\t[1] textbox 'search', value=''"
    gt = "RootWebArea 'a', focused\n\t[1] textbox 'search', value='x'"
    assert effect_present(prev, gt, gt) and not effect_present(prev, prev, gt)
    nxt = "RootWebArea 'b', focused\n\t[7] link 'c'"
    assert effect_present(prev, "RootWebArea 'b', focused\n\t[9] link 'zz'", nxt)
    assert not effect_present(prev, "RootWebArea 'c', focused", nxt)
    assert line_f1(gt, gt) == 1.0 and line_f1("", gt) == 0.0


def test_load_chats_skips_corrupt_and_counts_too_long(tmp_path, tiny_tok):
    from methods.webworld.paper import load_chats

    short = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
    long = {
        "messages": [{"role": "user", "content": "x " * 400}, {"role": "assistant", "content": "y"}]
    }
    no_answer = {"messages": [{"role": "user", "content": "a"}]}
    f = tmp_path / "c.jsonl"
    f.write_text("\n".join([json.dumps(short), "{bad", json.dumps(long), json.dumps(no_answer)]))
    ds, counts = load_chats(str(f), tiny_tok, max_length=64)
    assert len(ds) == 1 and counts == {"kept": 1, "too_long": 1}


# ----------------------------------------------------------------------------- paper smoke
_WFIX = "{repo}/tests/fixtures/webworld"
_TINY_SFT = [
    "model.path={tiny_qwen2}",
    "method.paper.size=tiny",  # the CPU variant of the Table 9 recipe (no bf16 / liger)
    "method.paper.output_dir={tmp}/out",
]
PAPER_SMOKE = {
    "stage1": [
        *_TINY_SFT,
        f"method.paper.data.path={_WFIX}/chats.jsonl",  # WebWorldData's chat layout
        "+method.stage1_trainer.max_steps=1",
        "method.stage1_trainer.max_length=2048",
    ],
    "stage2": [
        *_TINY_SFT,
        f"method.paper.stage2_data={_WFIX}/chats.jsonl",
        "+method.stage2_trainer.max_steps=1",
    ],
    "synth": [
        "method.paper.output_dir={tmp}/out",
        f"method.paper.synth.seeds={_WFIX}/seed_tasks.jsonl",
        "method.paper.synth.world_model_url={webworld_url}",
        "method.paper.synth.agent_url={webworld_url}",
        "method.paper.synth.value_url={webworld_url}",
        "method.paper.synth.max_steps=3",
    ],
    "agent": [
        *_TINY_SFT,
        f"method.paper.agent_data={_WFIX}/synth.jsonl",
        "+method.agent_trainer.max_steps=1",
        "method.agent_trainer.max_length=2048",
    ],
    "bench": [
        "model.path={tiny_qwen2}",
        f"benchmark.sets.base.path={_WFIX}/base.jsonl",  # upstream {observation, action, ...} rows
        f"benchmark.sets.long.path={_WFIX}/long.json",  # upstream long.json trajectories
        f"benchmark.sets.Web2NAL.path={_WFIX}/Web2NAL.jsonl",
        "method.paper.bench.judge_url={webworld_url}",
        "method.paper.bench.max_new_tokens=4",
        "method.paper.bench.n_samples=2",
    ],
}


def _fake_reply(body):
    """Scripted agent, world model, value model and judge behind one OpenAI-compatible server."""
    text = body["messages"][-1]["content"]
    if text.startswith("You are a web agent."):
        done = "RootWebArea 'p1'" in text
        return (
            "<action>send_msg_to_user('done')</action>" if done else "<action>click('10')</action>"
        )
    if text.startswith("You judge progress of a web agent."):
        return "Status: SUCCESS\nScore: 1.0"
    if "action_effect_accuracy_score" in text or '"choice"' in text:
        return '{"reasoning": "ok", "action_effect_accuracy_score": 1.0, "choice": "A"}'
    return "RootWebArea 'p1', focused\n\t[11] link 'next', clickable"


def paper_smoke_setup(tmp_path):
    """A local OpenAI-compatible server for the stages that call APIs (synth, the bench judge)."""
    from tests.fake_openai import FakeOpenAI

    return {"webworld_url": FakeOpenAI(_fake_reply).url}  # the daemon thread ends with pytest
