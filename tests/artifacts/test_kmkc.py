"""kmkc_paper reads its QA sets as a real run does: ``python -m methods.kmkc.flashrag`` exports every
hub set of the composed preset from ``RUC-NLPIR/FlashRAG_datasets`` (served here from the sample,
one file per ``<config>/<split>``) to its ``path``; beerqa and searchqa come as local files; the
stage config then reads every file through :func:`methods.kmkc.pipeline.load_qa_jsonl`."""

from __future__ import annotations

import json
import shutil

import datasets
import pytest

from common.config import validate
from common.registry import compose
from tests.artifact_samples import sample_for

HUB = "RUC-NLPIR/FlashRAG_datasets"


def _serve(monkeypatch, calls: list) -> None:
    """``load_dataset(hub_id, config, split=...)`` at the export's call site, from the sample."""
    from methods.kmkc import flashrag

    def fake(hub_id, config=None, split=None, **kw):
        calls.append((hub_id, config, split))
        s = sample_for(hub_id)
        lines = (s["dir"] / s["files"][f"{config}/{split}"]).read_text().splitlines()
        return datasets.Dataset.from_list([json.loads(ln) for ln in lines])  # the hub's json rows

    monkeypatch.setattr(flashrag, "load_dataset", fake)


def _run(tmp_path, monkeypatch, *extra: str):
    monkeypatch.setenv("FLASHRAG_DIR", str(tmp_path / "flashrag"))
    return validate(compose(["experiment=kmkc_paper", *extra]))


def _local_sets(tmp_path) -> None:
    """beerqa / searchqa as a user converts them (their official releases are not on the hub)."""
    s = sample_for("format:flashrag_qa_jsonl")
    for name in ("beerqa", "searchqa"):
        dst = tmp_path / "flashrag" / name / "dev.jsonl"
        dst.parent.mkdir(parents=True)
        shutil.copy(s["dir"] / s["files"][f"{name}/dev"], dst)


def test_every_set_of_the_preset_exports_and_loads(tmp_path, monkeypatch):
    from methods.kmkc.flashrag import export_sets, run_sets
    from methods.kmkc.paper import _paper_config
    from methods.kmkc.pipeline import load_qa_jsonl

    run = _run(tmp_path, monkeypatch)
    _local_sets(tmp_path)
    calls: list = []
    _serve(monkeypatch, calls)
    states = export_sets(run_sets(run))
    assert states["eval/beerqa"] == states["eval/searchqa"] == "present"
    assert sorted(c[1:] for c in calls) == sorted(
        [("nq", "train"), ("hotpotqa", "train"), ("2wikimultihopqa", "train")]
        + [(s.config, s.split) for n, s in run.benchmark.sets.items() if s.hub_id]
    )
    assert all(c[0] == HUB for c in calls) and len(calls) == 12
    pc = _paper_config(run)
    train = {n: load_qa_jsonl(p, lim, 0) for n, (p, lim) in pc.train_sets.items()}
    evals = {n: load_qa_jsonl(p, lim, 0) for n, (p, lim) in pc.eval_sets.items()}
    assert set(evals) == set(run.benchmark.sets) and len(evals) == 11
    assert [it["question"] for it in train["nq"]][:1] == [
        "total number of death row inmates in the us"
    ]
    assert evals["nq"][1] == {
        "id": "dev_1",
        "question": "how many episodes are there in dragon ball z",
        "golds": ["291 episodes", "291"],
    }
    assert evals["popqa"][0]["golds"][:2] == ["politician", "political leader"]
    assert evals["nq"][0]["golds"] == ["Wilhelm Conrad Röntgen"]  # non-ASCII kept
    assert evals["beerqa"][0]["golds"] == ["Trave"] and evals["searchqa"][0]["id"] == "searchqa_0"
    exported = json.loads((tmp_path / "flashrag/hotpotqa/train.jsonl").read_text().splitlines()[0])
    assert sorted(exported) == ["golden_answers", "id", "question"]  # metadata not kept


def test_a_missing_beerqa_stops_before_any_download(tmp_path, monkeypatch):
    from methods.kmkc.flashrag import export_sets, run_sets

    run = _run(tmp_path, monkeypatch)
    calls: list = []
    _serve(monkeypatch, calls)
    with pytest.raises(ValueError, match=r"'beerqa' has no hub_id.*beerqa\.github\.io"):
        export_sets(run_sets(run))
    assert calls == []


def test_a_bad_hub_row_stops_on_that_row_and_leaves_no_file(tmp_path, monkeypatch):
    from methods.kmkc import flashrag

    rows = [{"id": "0", "question": "q", "golden_answers": ["a"]}, {"id": "1", "question": "q"}]
    monkeypatch.setattr(flashrag, "load_dataset", lambda *a, **k: rows)
    run = _run(tmp_path, monkeypatch)
    spec = run.benchmark.sets["nq"]
    with pytest.raises(ValueError, match=r"\(nq, dev\) row 1: 'golden_answers'"):
        flashrag.export_set("nq", spec)
    assert list((tmp_path / "flashrag" / "nq").iterdir()) == []  # no partial file left


def test_a_set_without_path_names_the_hub_set(tmp_path, monkeypatch):
    from methods.kmkc.paper import _paper_config

    run = _run(tmp_path, monkeypatch, "benchmark.sets.nq.path=null")
    with pytest.raises(ValueError, match=r"'nq' has no local path: export RUC-NLPIR/Flash"):
        _paper_config(run)
