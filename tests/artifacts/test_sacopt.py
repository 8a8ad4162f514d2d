"""sacopt_paper reads the seven cleaned benchmarks of ``benchmark=or_clean7`` in the LLM4OR
``static/clean_benchmarks`` layout through ``methods.sacopt.data.load_clean_benchmark``."""

from __future__ import annotations

from common.config import dataset_source, validate
from common.registry import compose
from tests.artifact_samples import sample_for

CLEAN = sample_for("format:llm4or_clean_benchmarks")
WANT = {
    "NL4Opt": 1100.0,
    "IndustryOR": 120.0,
    "EasyLP": 20.0,
    "ComplexLP": 9.0,
    "NLP4LP": 74.0,
    "ReSocratic": 400.0,
    "ComplexOR": 15.0,
}


def test_every_or_clean7_set_loads_from_the_llm4or_layout(monkeypatch):
    from methods.sacopt.data import load_clean_benchmark

    monkeypatch.setenv("SACOPT_DATA", str(CLEAN["dir"]))
    run = validate(compose(["experiment=sacopt_paper"]))
    assert set(run.benchmark.sets) == set(WANT)  # a new set needs a sample
    for name, spec in run.benchmark.sets.items():
        problems, excluded = load_clean_benchmark(name, dataset_source(spec))
        assert not excluded, (name, excluded)
        (p,) = problems
        assert p["dataset"] == name and p["answer"] == WANT[name], name
        assert p["description"].strip() and "answer" not in p["description"].lower()
        assert (p["input"] is not None) == (name == "ComplexOR")  # only ComplexOR is abstract
