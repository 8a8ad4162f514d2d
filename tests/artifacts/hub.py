"""Serve the real-format samples where a loader calls ``datasets.load_dataset(hub_id, ...)``.

``serve_hub(monkeypatch, module)`` replaces ``module.load_dataset`` (the name the loader calls) by
a function that reads the sample of ``hub_id`` (``tests/fixtures/artifacts/<name>/``) for the
requested split with the real ``datasets`` json/parquet builders, so the loader sees the columns
and value types the hub set yields. A hub id without a sample, or a split the sample does not
ship, raises, so a preset naming a new set fails until its sample exists.
"""

from __future__ import annotations

import datasets

from tests.artifact_samples import sample_for

_REAL = datasets.load_dataset
_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}


def sample_dataset(hub_id: str, split: str) -> datasets.Dataset:
    """The sample of ``hub_id``'s ``split`` as the ``datasets`` library yields it."""
    s = sample_for(hub_id)
    if split not in s.get("files", {}):
        raise KeyError(
            f"sample of {hub_id!r} ships splits {sorted(s.get('files', {}))}, not {split!r}"
        )
    path = s["dir"] / s["files"][split]
    return _REAL(_BUILDERS[path.suffix], data_files=str(path), split="train")


def serve_hub(monkeypatch, module, calls: list | None = None) -> list:
    """Patches ``module.load_dataset``; returns the list of ``(hub_id, config, split)`` calls."""
    calls = [] if calls is None else calls

    def fake(path, name=None, split=None, **kw):
        if path in _BUILDERS.values():  # a local file read (json/parquet builder): the real one
            return _REAL(path, name, split=split, **kw)
        calls.append((path, name, split))
        return sample_dataset(path, split)

    monkeypatch.setattr(module, "load_dataset", fake)
    return calls
