"""slicefine_paper reads the five GLUE sets of ``benchmark=glue`` from ``nyu-mll/glue`` through
``glue_sets`` (``datasets.load_dataset(hub_id, config)``, as a real run calls it) and checks them
before any model loads; slicefine_paper_vtab reads VTAB-1K's list files through ``vision_sets`` (every task read and
checked before any model loads)."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest

from common.config import validate
from common.registry import compose
from tests.artifact_samples import sample_for

GLUE = sample_for("nyu-mll/glue")
VTAB = sample_for("format:vtab1k_lists")
_REAL = datasets.load_dataset


def _serve_glue(monkeypatch, calls: list) -> None:
    def fake(hub_id, config=None, **kw):
        calls.append((hub_id, config))
        if hub_id != GLUE["id"]:
            raise KeyError(f"no sample for {hub_id!r}")
        files = {
            s: str(GLUE["dir"] / f)
            for key, f in GLUE["files"].items()
            for c, s in [key.split("/")]
            if c == config
        }
        return _REAL("json", data_files=files)

    monkeypatch.setattr(datasets, "load_dataset", fake)


def test_glue_sets_load_through_the_preset(monkeypatch):
    from methods.slicefine.paper import glue_sets

    calls: list = []
    _serve_glue(monkeypatch, calls)
    data = glue_sets(validate(compose(["experiment=slicefine_paper"])))
    assert calls == [(GLUE["id"], t) for t in ("rte", "mrpc", "sst2", "cola", "qnli")]
    assert data["rte"]["train"]["label"] == [1, 0]  # 0 = entailment, 1 = not_entailment
    assert data["rte"]["validation"][0]["sentence2"] == "Christopher Reeve had an accident."
    assert data["sst2"]["train"][1]["sentence"] == "that loves its characters "
    assert data["qnli"]["validation"][0]["question"].startswith("What came into force")
    assert data["cola"]["validation"]["label"] == [1, 0]


def test_a_glue_set_without_its_columns_stops_before_the_model(monkeypatch):
    from methods.slicefine.paper import glue_sets

    _serve_glue(monkeypatch, [])
    run = validate(compose(["experiment=slicefine_paper", "method.tasks=[rte]"]))
    real = datasets.load_dataset

    def renamed(*a, **k):
        return real(*a, **k).rename_column("sentence2", "hypothesis")

    monkeypatch.setattr(datasets, "load_dataset", renamed)
    with pytest.raises(ValueError, match=r"GLUE rte train: columns \['sentence2'\] missing"):
        glue_sets(run)


def test_vtab_lists_load_through_the_preset():
    from methods.slicefine.paper import vision_sets
    from methods.slicefine.vision import VTAB_TASKS

    run = validate(compose(["experiment=slicefine_paper_vtab"]))
    assert sorted(run.benchmark.sets) == sorted(VTAB_TASKS)
    spec = run.benchmark.sets["caltech101"]
    assert Path(spec.path).name == "caltech101" and spec.split == "test"
    folder = VTAB["dir"] / "caltech101"  # the stage reads <path>/train800val200.txt, test.txt
    run = validate(
        compose(
            [
                "experiment=slicefine_paper_vtab",
                f"benchmark.sets.caltech101.path={folder}",
                "method.tasks=[caltech101]",
            ]
        )
    )
    data, n_classes = vision_sets(run)["caltech101"]
    assert n_classes == 102  # Caltech101's head, not the three labels the list shows
    assert data["train"]["label"] == [0, 12, 101] and data[spec.split]["label"] == [12]
    img = data["train"][2]["image"]
    assert img.size == (8, 8) and img.convert("RGB").getpixel((4, 4))[2] > 200  # image_000002


def test_a_malformed_list_line_names_file_and_line(tmp_path):
    from methods.slicefine.vision import load_vtab1k

    task = tmp_path / "eurosat"
    (task / "images").mkdir(parents=True)
    (task / "images" / "a.jpg").write_bytes(b"")  # line 1 is valid; line 2 lacks its label
    (task / "train800val200.txt").write_text("images/a.jpg 3\nimages/b.jpg\n")
    (task / "test.txt").write_text("")
    with pytest.raises(ValueError, match=r"train800val200.txt:2: expected"):
        load_vtab1k(tmp_path, "eurosat")
