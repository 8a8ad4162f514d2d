"""autoqra_paper reads ``tatsu-lab/alpaca`` (SFT) and ``allenai/winogrande`` (evaluation) as a real run
does: through ``datasets.load_dataset`` on the hub id, WinoGrande from the Hub's parquet export once
datasets refuses the script on its main branch."""

from __future__ import annotations

import datasets
import pytest

from common.config import validate
from common.registry import compose
from tests.artifact_samples import sample_for

SCRIPT_ERROR = "Dataset scripts are no longer supported, but found winogrande.py"


def _fake_hub(monkeypatch, calls: list) -> None:
    """``load_dataset`` as datasets 5.2 answers for these two ids, serving the samples' parquet."""
    real = datasets.load_dataset

    def fake(hub_id, config=None, split=None, revision=None, data_dir=None, **kw):
        calls.append((hub_id, config, split, revision, data_dir))
        s = sample_for(hub_id)
        if hub_id == "allenai/winogrande":
            if revision != "refs/convert/parquet":  # main still ships the loading script
                raise RuntimeError(SCRIPT_ERROR)
            return real(
                "parquet",
                data_files=str(s["dir"] / data_dir / split / "0000.parquet"),
                split="train",
            )
        return real("parquet", data_files=str(s["dir"] / s["files"][split]), split="train")

    monkeypatch.setattr(datasets, "load_dataset", fake)


def test_alpaca_and_winogrande_through_the_preset(monkeypatch, caplog):
    from methods.autoqra.paper_data import alpaca_rows, dataset_records, winogrande_rows

    run = validate(compose(["experiment=autoqra_paper"]))
    calls: list = []
    _fake_hub(monkeypatch, calls)
    alpaca = alpaca_rows(dataset_records(run.method.paper.sft_data, "sft", None), "sft")
    (wspec,) = run.benchmark.sets.values()
    items = winogrande_rows(dataset_records(wspec, "benchmark", None))
    assert calls == [
        ("tatsu-lab/alpaca", None, "train", None, None),
        ("allenai/winogrande", "winogrande_xl", "validation", None, None),
        ("allenai/winogrande", None, "validation", "refs/convert/parquet", "winogrande_xl"),
    ]
    assert "script-based" in caplog.text and "refs/convert/parquet" in caplog.text
    assert alpaca[0] == {
        "instruction": "Give three tips for staying healthy.",
        "input": "",
        "output": "1. Eat a balanced diet.\n2. Exercise regularly.\n3. Sleep well.",
    }
    assert alpaca[1]["input"] == "I like apples."
    assert [it["answer"] for it in items] == [1, 2, 1]  # the hub's "1"/"2" strings as ints
    assert items[2]["option2"] == "suitcase" and items[2]["sentence"].count("_") == 1


def test_other_hub_errors_are_not_masked(monkeypatch):
    from methods.autoqra.paper_data import dataset_records

    def fake(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(datasets, "load_dataset", fake)
    run = validate(compose(["experiment=autoqra_paper"]))
    with pytest.raises(RuntimeError, match="disk full"):
        dataset_records(run.method.paper.sft_data, "sft", None)


def test_columns_map_format_fields_to_the_sets_columns(monkeypatch):
    from common.config import DatasetSpec
    from methods.autoqra.paper_data import dataset_records

    _fake_hub(monkeypatch, [])
    spec = DatasetSpec(hub_id="tatsu-lab/alpaca", split="train", columns={"response": "output"})
    row = dataset_records(spec, "sft", 1)[0]
    assert row["response"].startswith("1. Eat") and "output" not in row
