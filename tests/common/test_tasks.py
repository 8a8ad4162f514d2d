import json

import pytest

from common.tasks import (
    FIXTURES,
    arithmetic_reward,
    boxed_reward,
    extract_boxed,
    load_math_dataset,
    make_arithmetic_dataset,
    verify_arithmetic,
    verify_boxed,
)


def test_arithmetic_answers_are_correct_and_seeded():
    ds = make_arithmetic_dataset(50, seed=1, max_operand=20, ops=("+", "-", "*"))
    for row in ds:
        a, op, b = row["prompt"].removeprefix("What is ").removesuffix("?").split()
        assert int(row["answer"]) == eval(f"{a}{op}{b}")  # noqa: S307 - our own digits
    assert (
        make_arithmetic_dataset(5, seed=1)["prompt"] == make_arithmetic_dataset(5, seed=1)["prompt"]
    )
    chat = make_arithmetic_dataset(2, chat=True)
    assert chat[0]["prompt"][0]["role"] == "user"


def test_arithmetic_verifier_and_reward():
    assert verify_arithmetic(" 12 because 5 + 7", "12") == 1.0
    assert verify_arithmetic("it is 13", "12") == 0.0
    assert verify_arithmetic("no digits", "12") == 0.0
    assert verify_arithmetic([{"role": "assistant", "content": "-3"}], "-3") == 1.0
    assert arithmetic_reward(["4", "5"], answer=["4", "4"], prompts=["x", "y"]) == [1.0, 0.0]


def test_arithmetic_bad_input():
    with pytest.raises(ValueError, match="ops"):
        make_arithmetic_dataset(3, ops=("/",))
    with pytest.raises(ValueError, match="n must"):
        make_arithmetic_dataset(0)


def test_extract_boxed_nested_and_last():
    assert extract_boxed(r"so \boxed{1} then \boxed{\frac{3}{4}}.") == r"\frac{3}{4}"
    assert extract_boxed("no box") is None
    assert extract_boxed(r"\boxed{unbalanced") is None


def test_load_fixtures_both_layouts():
    gsm = load_math_dataset(FIXTURES / "gsm8k_mini.jsonl")
    assert sorted(gsm.column_names) == ["answer", "problem"] and gsm[2]["answer"] == "1000"
    math = load_math_dataset(FIXTURES / "math500_mini.jsonl")
    assert [r["answer"] for r in math] == [r"\frac{3}{4}", "5", "4", "2x+1"]


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_math_dataset(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "x"}) + "\n")
    with pytest.raises(ValueError, match="unknown layout"):
        load_math_dataset(bad)


def test_verify_boxed_symbolic():
    assert verify_boxed(r"the answer is \boxed{0.75}", r"\frac{3}{4}") == 1.0
    assert verify_boxed(r"\boxed{1/2}", "0.5") == 1.0
    assert verify_boxed(r"\boxed{2x + 1}", "2x+1") == 1.0
    assert verify_boxed(r"\boxed{3}", "4") == 0.0
    assert verify_boxed("4", "4") == 0.0  # no box, no credit
    assert boxed_reward([r"\boxed{5}", "5"], answer=["5", "5"]) == [1.0, 0.0]
