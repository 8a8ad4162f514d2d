"""llminertia_paper reads the official induction test sets (THUMLP/LLMInertia) and HaluEval's four
official files through ``benchmark_datasets`` and ``_load_items`` as a real run does, for both
``benchmark=inertia6`` and ``benchmark=halueval``; llminertia_induce reads the official
co-occurrence corpus."""

from __future__ import annotations

import json

import pytest

from common.config import validate
from common.registry import compose
from tests.artifact_samples import sample_for

INDUCTION = sample_for("format:llminertia_induction")
HALUEVAL = sample_for("format:halueval_json")


def _file(sample: dict, key: str) -> str:
    return str(sample["dir"] / sample["files"][key])


def _overrides() -> list[str]:
    out = [
        f"benchmark.sets.medical.path={_file(INDUCTION, 'medical')}",
        f"benchmark.sets.synthetic.path={_file(INDUCTION, 'synthetic')}",
    ]
    return out + [
        f"benchmark.sets.halueval_{t}.path={_file(HALUEVAL, t)}"
        for t in ("qa", "dialogue", "summarization", "general")
    ]


def _items(*overrides: str) -> dict[str, tuple[list[str], list[str]]]:
    from methods.llminertia.paper import _load_items, benchmark_datasets

    run = validate(compose(["experiment=llminertia_paper", *overrides]))
    return {d.name: _load_items(d, run.seed) for d in benchmark_datasets(run.benchmark)}


def test_inertia6_sets_load_through_the_preset():
    items = _items(*_overrides())
    assert list(items) == [
        "medical", "synthetic", "halueval_qa", "halueval_dialogue", "halueval_summarization",
        "halueval_general",
    ]  # fmt: skip
    texts, labels = items["medical"]
    assert labels == ["no", "no"]  # the released items are all "No."
    assert texts[0].startswith("Description：The patient complains of Headache")
    assert texts[0].endswith("Question：Does Hypertension exist or hold?")  # full-width colons
    assert items["synthetic"][1] == ["no"]
    # HaluEval: right candidate -> yes (supported), hallucinated -> no
    qa_texts, qa_labels = items["halueval_qa"]
    assert qa_labels == ["yes", "no"]
    assert "Answer: Arthur's Magazine" in qa_texts[0] and "Knowledge: Arthur's" in qa_texts[0]
    assert "First for Women was started first." in qa_texts[1]
    assert items["halueval_dialogue"][1] == ["yes", "no"]
    assert "Dialogue: [Human]: Do you like Iron Man" in items["halueval_dialogue"][0][0]
    assert items["halueval_summarization"][1] == ["yes", "no"]
    gen_texts, gen_labels = items["halueval_general"]
    assert gen_labels == ["yes", "no"]  # hallucination_label no -> supported (yes)
    assert "Charles Dickens" in gen_texts[1]


def test_halueval_group_reads_the_same_files():
    over = [
        f"benchmark.sets.halueval_{t}.path={_file(HALUEVAL, t)}"
        for t in ("qa", "dialogue", "summarization", "general")
    ]
    items = _items("benchmark=halueval", *over)
    assert sorted(items) == [
        f"halueval_{t}" for t in ("dialogue", "general", "qa", "summarization")
    ]
    assert items["halueval_general"][1] == ["yes", "no"]


def test_hub_copy_general_label_is_read_too(tmp_path):
    from methods.llminertia.paper_data import load_halueval

    hub = tmp_path / "general.jsonl"  # pminervini/HaluEval 'general': hallucination + spans
    row = {"ID": "1", "user_query": "q", "chatgpt_response": "r", "hallucination": "yes",
           "hallucination_spans": ["r"]}  # fmt: skip
    hub.write_text(json.dumps(row) + "\n")
    assert load_halueval(hub, "general")["label"] == ["no"]
    row.pop("hallucination")
    hub.write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=r"record 0 lacks 'hallucination_label'"):
        load_halueval(hub, "general")


def test_induce_reads_the_cooccurrence_corpus():
    from methods.llminertia.paper_data import load_cooccurrence_corpus

    run = validate(
        compose(
            ["experiment=llminertia_induce", f"method.corpus_path={_file(INDUCTION, 'corpus')}"]
        )
    )
    assert run.method.stage == "induce"
    ds = load_cooccurrence_corpus(run.method.corpus_path)
    assert ds["text"][0].startswith("In the diagnostic process, Headache and Hypertension")
    assert len(ds) == 2
