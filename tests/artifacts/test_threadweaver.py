"""threadweaver_paper reads its real artifacts through ``methods.threadweaver.paper.load_set``:
POLARIS-53K (``rl`` / ``self_train``) and the six math6 sets (``eval``), the hub ids served from
their real-format samples. (``sft_data`` is the ``synth`` stage's own output, not an artifact.)"""

from __future__ import annotations

import datasets
import pytest

from common.config import validate
from common.registry import compose
from tests.artifacts.hub import serve_hub


@pytest.fixture(scope="module")
def run():
    return validate(compose(["experiment=threadweaver_paper", "method.stage=eval"]))


def test_rl_reads_polaris(run, monkeypatch):
    from methods.threadweaver.paper import load_set

    calls = serve_hub(monkeypatch, datasets)
    rows = load_set(run.method.rl_data)
    assert calls == [("POLARIS-Project/Polaris-Dataset-53K", None, "train")]
    assert [r["answer"] for r in rows] == ["5", "15", "10"]
    assert rows[0]["problem"] == "If $2^a = 32$, what is $a$?"


def test_eval_reads_every_math6_set(run, monkeypatch):
    from methods.threadweaver.paper import BENCHMARKS, load_set
    from methods.threadweaver.pgrpo import is_correct

    calls = serve_hub(monkeypatch, datasets)
    sets = {name: load_set(spec) for name, spec in run.benchmark.sets.items()}
    assert set(sets) == set(BENCHMARKS)
    assert sorted(c[0] for c in calls) == sorted(hub for hub, _ in BENCHMARKS.values())
    answers = {n: [r["answer"] for r in rows] for n, rows in sets.items()}
    assert answers["amc23"] == ["14", "27", "1.5"]  # float64 answers, no trailing '.0'
    assert answers["olympiadbench"] == ["23", "-2, 2"]  # every entry of a multi-answer list
    assert answers["aime24"] == ["1", "45"] and answers["minerva"] == ["4", "620"]
    assert sets["minerva"][0]["problem"].startswith("A star radiates")
    assert is_correct("thus \\boxed{27}", answers["amc23"][1])
    assert not is_correct("thus \\boxed{2}", answers["olympiadbench"][1])  # half an answer
