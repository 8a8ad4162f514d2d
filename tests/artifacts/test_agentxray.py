"""agentxray_paper reads every set of ``benchmark=agentxray`` from the hub dataset
``shiowen/AgentXRay-Datasets`` as a real run does: ``huggingface_hub.snapshot_download`` of the set's
files, then ``data/<subset>/{train,test}.json`` (``maps``: the Alpaca ``*_alpaca.json`` files)."""

from __future__ import annotations

import huggingface_hub
import pytest

from common.config import validate
from common.registry import compose
from tests.artifact_samples import sample_for

SAMPLE = sample_for("shiowen/AgentXRay-Datasets")


def _serve_snapshot(monkeypatch, calls: list) -> None:
    def fake(repo_id, repo_type=None, revision=None, allow_patterns=None, cache_dir=None, **kw):
        calls.append((repo_id, repo_type, tuple(allow_patterns)))
        return str(SAMPLE["dir"])

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)


def _pairs(monkeypatch, name: str, calls: list):
    from methods.agentxray.paper import _set_pairs

    run = validate(compose(["experiment=agentxray_paper"]))
    _serve_snapshot(monkeypatch, calls)
    return _set_pairs(run.method, name, run.benchmark.sets[name])


def test_preset_sets_are_hub_subsets_with_samples():
    run = validate(compose(["experiment=agentxray_paper"]))
    assert run.method.sets == ["chatdev", "metagpt", "eduagent", "gpt", "gemini"]
    for name, spec in run.benchmark.sets.items():
        assert spec.hub_id == SAMPLE["id"] and spec.config == name and not spec.path
        assert (SAMPLE["dir"] / "data" / name).is_dir(), f"no sample for subset {name}"


@pytest.mark.parametrize("name", ["chatdev", "metagpt", "eduagent", "gpt", "gemini", "atoms"])
def test_raw_subsets_load_through_the_preset(monkeypatch, name):
    calls: list = []
    train, test = _pairs(monkeypatch, name, calls)
    assert calls == [
        (SAMPLE["id"], "dataset", (f"data/{name}/train.json", f"data/{name}/test.json"))
    ]
    assert len(train) == 1 and len(test) == 1
    (task, expected), (test_task, _) = train[0], test[0]
    assert task and test_task and task != test_task  # the item's input, not its folder_name
    assert "folder_name" not in expected and "DefaultOrganization" not in task


def test_code_files_render_as_a_project(monkeypatch):
    train, _ = _pairs(monkeypatch, "chatdev", [])
    task, expected = train[0]
    assert task == "Design a gomoku game with a GUI."
    # code_files only (official experiment.py compares against code_files), each file fenced
    assert expected.startswith("File: main.py\n```python\nimport tkinter as tk")
    assert "File: board.py" in expected
    assert "requirements.txt" not in expected and "manual.md" not in expected


def test_string_outputs_stay_verbatim(monkeypatch):
    train, _ = _pairs(monkeypatch, "gpt", [])
    task, expected = train[0]
    assert task == "Model a unit cube in Blender."
    assert expected == "import bpy\nbpy.ops.mesh.primitive_cube_add(size=1)\n"


def test_maps_reads_the_alpaca_files(monkeypatch):
    calls: list = []
    train, test = _pairs(monkeypatch, "maps", calls)
    (task, expected), (test_task, _) = train[0], test[0]
    assert calls[0][2][:2] == ("data/maps/train_alpaca.json", "data/maps/train.json")
    assert task == "Draw a map of the campus with the library marked."  # instruction; input ''
    assert test_task == "Draw a map of the city centre."
    assert expected.startswith("### file: requirements.txt")


def test_a_malformed_item_names_its_index(monkeypatch, tmp_path):
    import json

    from methods.agentxray.paper import _set_pairs

    folder = tmp_path / "chatdev"
    folder.mkdir()
    (folder / "train.json").write_text(json.dumps([{"folder_name": "x", "output": "y"}]))
    (folder / "test.json").write_text("[]")
    run = validate(compose(["experiment=agentxray_paper", f"benchmark.sets.chatdev.path={folder}"]))
    with pytest.raises(ValueError, match=r"item 0 needs 'input'"):
        _set_pairs(run.method, "chatdev", run.benchmark.sets["chatdev"])
