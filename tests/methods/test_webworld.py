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
from methods.webworld.toy import random_crawl, random_tree

# One example call per primitive (spec §3.9).
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
}


def test_examples_cover_all_twenty_actions():
    assert set(EXAMPLES) == set(ACTION_NAMES) and len(ACTION_NAMES) == 20


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
    from pathlib import Path

    from omegaconf import OmegaConf

    from methods.webworld import CONTINUE_TURN, FIRST_TURN, SYSTEM_PROMPT

    cfg = OmegaConf.load(Path(__file__).parents[2] / "configs/method/webworld.yaml")
    assert cfg.prompts.system == SYSTEM_PROMPT
    assert cfg.prompts.first_turn == FIRST_TURN and cfg.prompts.continue_turn == CONTINUE_TURN


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
