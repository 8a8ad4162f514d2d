"""common.checkpoint: atomic files, settings bound to a folder, and the call journal."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from common.checkpoint import (
    CallJournal,
    CheckpointMismatch,
    atomic_pickle,
    atomic_write_json,
    check_settings,
    fingerprint,
    load_pickle,
)


@dataclass
class _S:
    seed: int = 0
    budget: float = 4.0
    ops: tuple = ("a", "b")


def test_fingerprint_is_stable_and_sensitive():
    assert fingerprint(_S()) == fingerprint(_S())
    assert fingerprint(_S()) == fingerprint({"budget": 4.0, "ops": ["a", "b"], "seed": 0})
    assert fingerprint(_S()) != fingerprint(_S(seed=1))


def test_atomic_files_roundtrip_and_leave_no_temporaries(tmp_path):
    atomic_write_json(tmp_path / "a.json", {"x": 1})
    atomic_pickle(tmp_path / "b.pkl", {"y": [1, 2]})
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": 1}
    assert load_pickle(tmp_path / "b.pkl") == {"y": [1, 2]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.pkl"]


def test_check_settings_binds_and_refuses_other_settings_naming_the_keys(tmp_path):
    assert check_settings(tmp_path, _S()) is False
    assert check_settings(tmp_path, _S()) is True
    with pytest.raises(CheckpointMismatch, match=r"seed: folder has 0, this run has 1") as err:
        check_settings(tmp_path, _S(seed=1, budget=3.0))
    assert "budget" in str(err.value) and "ops" not in str(err.value)


def test_journal_replays_recorded_calls_and_executes_only_new_ones(tmp_path):
    calls = []

    def f(x):
        calls.append(x)
        return x * 10

    j = CallJournal(tmp_path / "j.jsonl")
    assert [j.call(f, i, tag=str(i)) for i in range(3)] == [0, 10, 20]
    # A torn last line (killed mid-write) is dropped.
    with open(tmp_path / "j.jsonl", "a") as fh:
        fh.write('{"tag": "3", "res')
    j2 = CallJournal(tmp_path / "j.jsonl")
    assert len(j2) == 3
    assert [j2.call(f, i, tag=str(i)) for i in range(5)] == [0, 10, 20, 30, 40]
    assert calls == [0, 1, 2, 3, 4]  # nothing repeated, nothing lost
    assert (j2.replayed, j2.executed) == (3, 2)
    j3 = CallJournal(tmp_path / "j.jsonl")
    with pytest.raises(CheckpointMismatch, match="diverged"):
        j3.call(f, 0, tag="other")
    with pytest.raises(ValueError, match="position"):
        j3.seek(99)
