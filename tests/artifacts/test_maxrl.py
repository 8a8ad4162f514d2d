"""maxrl_paper and maxrl_paper_smollm read their real artifacts through
``methods.maxrl.paper.load_prompts``: POLARIS-53K / GSM8K (train) and math4 / GSM8K-Platinum (eval),
the hub ids served from their real-format samples."""

from __future__ import annotations

import logging

import pytest

import common.tasks.math_sets as math_sets
from common.config import validate
from common.registry import compose
from tests.artifacts.hub import serve_hub


@pytest.fixture(scope="module")
def runs():
    return {
        p: validate(compose([f"experiment={p}", "method.stage=train"]))
        for p in ("maxrl_paper", "maxrl_paper_smollm")
    }


def _user_texts(ds) -> list[str]:
    assert all([t["role"] for t in turns] == ["user"] for turns in ds["prompt"])
    return [turns[0]["content"] for turns in ds["prompt"]]


def test_train_reads_polaris(runs, monkeypatch):
    from methods.maxrl.paper import load_prompts

    run = runs["maxrl_paper"]
    calls = serve_hub(monkeypatch, math_sets)
    data = load_prompts(run.method.train_data, run.method.prompt_suffix)
    assert calls == [("POLARIS-Project/Polaris-Dataset-53K", None, "train")]
    assert list(data["answer"]) == ["5", "15", "10"]
    texts = _user_texts(data)
    assert texts[1] == "Evaluate $\\binom{6}{2}$." + run.method.prompt_suffix


def test_eval_reads_every_math4_set(runs, monkeypatch):
    from methods.maxrl.paper import load_prompts

    run = runs["maxrl_paper"]
    calls = serve_hub(monkeypatch, math_sets)
    out = {n: load_prompts(s, run.method.eval.prompt_suffix) for n, s in run.benchmark.sets.items()}
    assert sorted(c[0] for c in calls) == sorted(s.hub_id for s in run.benchmark.sets.values())
    assert list(out["aime25"]["answer"]) == ["70", "9"]
    assert list(out["beyondaime"]["answer"]) == ["120"]
    assert list(out["minerva"]["answer"]) == ["4", "620"]  # math4 renames question -> problem
    assert _user_texts(out["minerva"])[1].startswith("Compute the wavelength")
    assert list(out["math500"]["answer"]) == ["11", "\\frac{3}{4}"]


def test_smollm_reads_gsm8k_main_and_platinum(runs, monkeypatch, caplog):
    from methods.maxrl.paper import load_prompts

    run = runs["maxrl_paper_smollm"]
    calls = serve_hub(monkeypatch, math_sets)
    train = load_prompts(run.method.train_data, run.method.prompt_suffix)
    with caplog.at_level(logging.INFO, logger="common.tasks.math_sets"):
        ((name, spec),) = run.benchmark.sets.items()
        platinum = load_prompts(spec, run.method.eval.prompt_suffix)
    assert calls == [("openai/gsm8k", "main", "train"), ("madrylab/gsm8k-platinum", "main", "test")]
    assert list(train["answer"]) == ["26", "6000"]  # '#### 6,000' -> 6000
    assert (
        _user_texts(train)[0].startswith("Ann has 3 boxes")
        and "####" not in train["prompt"][0][0]["content"]
    )
    assert list(platinum["answer"]) == ["8", "27"]  # the rejected question is dropped, and said
    assert "dropped 1 rows with cleaning_status=rejected" in caplog.text
