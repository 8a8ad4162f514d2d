"""apo_paper reads its real artifacts: DAPO-Math-17k (train) and the math5 suite (eval), each
through ``methods.apo.paper._data`` with the hub ids served from their real-format samples."""

from __future__ import annotations

import logging

import pytest

import common.tasks.math_sets as math_sets
from common.config import validate
from common.registry import compose
from common.tasks import verify_boxed
from tests.artifacts.hub import sample_dataset, serve_hub


@pytest.fixture(scope="module")
def run():
    return validate(compose(["experiment=apo_paper"]))


def test_train_reads_dapo_math_17k_once_per_problem(run, monkeypatch, caplog):
    from methods.apo.paper import _data

    calls = serve_hub(monkeypatch, math_sets)
    with caplog.at_level(logging.INFO, logger="common.tasks.math_sets"):
        train, _ = _data(run, evals=False)
    assert calls == [("BytedTsinghua-SIA/DAPO-Math-17k", None, "train")]
    assert "8 rows hold 3 distinct problems" in caplog.text  # the repetition is removed, and said
    assert list(train["answer"]) == ["4", "12", "-2"]
    suffix = run.method.prompt_suffix
    for turns in train["prompt"]:
        assert [t["role"] for t in turns] == ["user"]
        text = turns[0]["content"]
        assert text.endswith(suffix) and "\\boxed" in suffix  # one answer format: the boxed one
        assert "Answer:" not in text and not text.startswith("Solve the following")
    first = train["prompt"][1][0]["content"]
    assert (
        first.startswith("Find the number of positive divisors") and "\n\nGive the count" in first
    )


def test_eval_reads_every_math5_set(run, monkeypatch):
    from methods.apo.paper import _data

    calls = serve_hub(monkeypatch, math_sets)
    _, evals = _data(run, train=False)
    assert sorted(c[0] for c in calls) == sorted(s.hub_id for s in run.benchmark.sets.values())
    assert {c[2] for c in calls} == {"test"}
    assert list(evals["amc23"]["answer"]) == ["14", "27", "1.5"]  # float64 27.0 -> "27"
    assert list(evals["aime24"]["answer"]) == ["1", "45"]  # boxed solution
    assert list(evals["minerva"]["answer"]) == ["4", "620"]  # 'question' column, no rename
    assert evals["minerva"]["prompt"][0][0]["content"].startswith("A star radiates")
    assert list(evals["math500"]["answer"]) == ["11", "\\frac{3}{4}"]
    assert verify_boxed("so \\boxed{27}", evals["amc23"]["answer"][1]) == 1.0


def test_dapo_prompt_without_its_instruction_is_refused(monkeypatch):
    raw = sample_dataset("BytedTsinghua-SIA/DAPO-Math-17k", "train")
    bare = raw.map(lambda r: {"prompt": [{"content": "What is 1+1?", "role": "user"}]})
    monkeypatch.setattr(math_sets, "load_dataset", lambda *a, **k: bare)
    spec = validate(compose(["experiment=apo_paper"])).method.train_data
    with pytest.raises(ValueError, match="does not carry DAPO's answer instruction"):
        math_sets.load_math_set(spec)


def test_unknown_layout_fails_on_the_first_row(monkeypatch):
    from datasets import Dataset

    raw = Dataset.from_list([{"text": f"row {i}", "label": i} for i in range(1000)])
    seen = []
    original = math_sets._normalise
    monkeypatch.setattr(math_sets, "_normalise", lambda r: seen.append(r) or original(r))
    monkeypatch.setattr(math_sets, "load_dataset", lambda *a, **k: raw)
    spec = validate(compose(["experiment=apo_paper"])).method.train_data
    with pytest.raises(ValueError, match=r"unknown layout.*\['label', 'text'\]"):
        math_sets.load_math_set(spec)
    assert len(seen) == 1
