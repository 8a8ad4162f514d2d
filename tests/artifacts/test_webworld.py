"""webworld_paper reads its real artifacts: the ShareGPT rows of ``Qwen/WebWorldData`` (stage 1,
streamed from the hub) and the upstream WebWorld-Bench files (bench stage)."""

from __future__ import annotations

import json

import datasets
import pytest

from common.config import dataset_source, validate
from common.registry import compose
from tests.artifact_samples import sample_for

WWD = sample_for("Qwen/WebWorldData")
BENCH = sample_for("format:webworld_bench")


def _hub_rows(monkeypatch, sample: dict, calls: list) -> None:
    """Serves ``sample``'s train file where the stage streams the hub id (``datasets.load_dataset``)."""

    def fake(hub_id, split=None, streaming=False, **kw):
        calls.append((hub_id, split, streaming))
        if hub_id != sample["id"]:
            raise FileNotFoundError(hub_id)
        path = sample["dir"] / sample["files"][split]
        return iter([json.loads(x) for x in path.read_text().splitlines() if x.strip()])

    monkeypatch.setattr(datasets, "load_dataset", fake)


def test_stage1_reads_webworlddata_sharegpt_rows(monkeypatch):
    from methods.webworld.paper import _source, iter_chats

    run = validate(compose(["experiment=webworld_paper", "method.stage=stage1"]))
    calls: list = []
    _hub_rows(monkeypatch, WWD, calls)
    chats = list(iter_chats(_source(run.method.paper.data)))
    assert calls == [("Qwen/WebWorldData", "train", True)]
    assert len(chats) == 2
    first, second = (c["messages"] for c in chats)
    assert [m["role"] for m in first] == ["user", "assistant", "user", "assistant"]
    assert first[0]["content"].startswith("Initial Page State:\nRootWebArea 'Cheap Flights'")
    assert first[-1]["content"].startswith("RootWebArea 'Results: Paris'")
    assert [m["role"] for m in second] == ["system", "user", "assistant"]  # ShareGPT "system"


def test_stage1_stops_on_the_first_bad_rows_naming_the_layouts(monkeypatch, tmp_path):
    from methods.webworld.paper import iter_chats

    rows = ({"text": f"row {i}"} for i in range(10**9))  # would never end if the loader read on
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: rows)
    with pytest.raises(ValueError, match=r"first 20 rows.*row 0: no 'messages' or 'conversations'"):
        list(iter_chats("hf:Qwen/WebWorldData"))
    bad = tmp_path / "c.jsonl"
    turn = {"from": "human", "value": "a"}
    bad.write_text(json.dumps({"conversations": [turn, {"from": "bot", "value": "b"}]}) + "\n")
    with pytest.raises(ValueError, match=r"unknown 'from' value 'bot'.*ShareGPT"):
        list(iter_chats(str(bad), max_leading_bad=1))


def test_stage1_counts_bad_rows_after_a_good_one(tmp_path, caplog):
    from methods.webworld.paper import iter_chats

    f = tmp_path / "c.jsonl"
    good = (WWD["dir"] / "train.jsonl").read_text().splitlines()[0]
    f.write_text(
        "\n".join(
            [good, "{broken", json.dumps({"conversations": [{"from": "human", "value": "q"}]})]
        )
    )
    assert len(list(iter_chats(str(f)))) == 1
    assert "skipped 2 corrupt or malformed rows" in caplog.text


def test_bench_reads_every_upstream_dimension(monkeypatch):
    from methods.webworld.bench_data import load_bench_file

    monkeypatch.setenv("WEBWORLD_BENCH", str(BENCH["dir"]))
    run = validate(compose(["experiment=webworld_paper", "method.stage=bench"]))
    assert set(run.benchmark.sets) == set(BENCH["files"])  # a new dimension needs a sample
    for dim, spec in run.benchmark.sets.items():
        samples, skipped = load_bench_file(dataset_source(spec), dim)
        assert samples and skipped == 0, dim
        if dim == "long":
            assert samples[0].gt.startswith("RootWebArea 'Results: Paris'")
            assert samples[0].action == samples[1].action == "click('18')"
            assert [m["role"] for m in samples[0].context][-1] == "user"
            continue
        src = [json.loads(x) for x in (BENCH["dir"] / BENCH["files"][dim]).read_text().splitlines()]
        assert [s.gt for s in samples] == [r["next_observation"] for r in src]
        assert [s.action for s in samples] == [r["action"] for r in src]
        assert src[0]["observation"] in (samples[0].traj or "")
