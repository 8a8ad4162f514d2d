"""The real-format samples' metadata is complete and their README table is current."""

from __future__ import annotations

import re

import pytest

from tests.artifact_samples import KINDS, README, REQUIRED, rendered_readme, samples

SOURCE = re.compile(r"https?://\S+|[\w.-]+/[\w.-]+(:|/)\S+")  # a URL, or owner/repo path[@commit]


@pytest.mark.parametrize("name", sorted(samples()) or ["(none)"])
def test_sample_metadata_is_complete(name):
    if name == "(none)":
        pytest.skip("no samples yet")
    s = samples()[name]
    missing = [k for k in REQUIRED if not s.get(k)]
    assert not missing, f"{name}/ARTIFACT.json lacks {missing}"
    assert s["kind"] in KINDS, f"{name}: kind must be one of {KINDS}, got {s['kind']!r}"
    assert SOURCE.search(s["layout_source"]), f"{name}: layout_source must name a URL or repo file"
    data = [p for p in s["dir"].rglob("*") if p.is_file() and p.name != "ARTIFACT.json"]
    assert data, f"{name}: the folder holds no sample file"
    for split, rel in s.get("files", {}).items():
        assert (s["dir"] / rel).is_file(), f"{name}: files[{split!r}] = {rel} does not exist"


def test_sample_ids_are_unique():
    ids = [s["id"] for s in samples().values()]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_readme_table_is_current():
    assert README.read_text() == rendered_readme(), "run: python -m tests.artifact_samples"
