"""Real-format samples of every data artifact a paper preset reads (``tests/fixtures/artifacts/``).

Each sample is a folder ``tests/fixtures/artifacts/<name>/`` holding a few rows written by hand in
exactly the real artifact's record layout (column names, nesting, value types, file format) and an
``ARTIFACT.json``::

    {"id": "BytedTsinghua-SIA/DAPO-Math-17k",       # hub id, or the name of a local file format
     "kind": "dataset" | "format",                  # a hub data set, or a file layout read from disk
     "layout_source": "https://huggingface.co/...",  # the card, or official loader file @ commit
     "read_by": ["apo_paper/train", ...],           # preset[/stage] or benchmark group that reads it
     "files": {"train": "train.parquet"}}           # optional: split -> sample file in the folder

``python -m tests.artifact_samples`` rewrites the table in ``tests/fixtures/artifacts/README.md``;
``tests/test_artifact_samples.py`` checks the metadata and that the table is current.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).parent / "fixtures" / "artifacts"
README = ROOT / "README.md"
REQUIRED = ("id", "kind", "layout_source", "read_by")
KINDS = ("dataset", "format")
BEGIN, END = "<!-- artifact table: begin -->", "<!-- artifact table: end -->"


def samples() -> dict[str, dict]:
    """``folder name -> ARTIFACT.json`` (plus ``dir``) of every sample, sorted by folder name."""
    out = {}
    for meta in sorted(ROOT.glob("*/ARTIFACT.json")):
        info = json.loads(meta.read_text())
        out[meta.parent.name] = {**info, "dir": meta.parent}
    return out


def sample_for(artifact_id: str) -> dict:
    """The sample whose ``id`` is ``artifact_id`` (KeyError naming the known ids otherwise)."""
    found = [s for s in samples().values() if s["id"] == artifact_id]
    if not found:
        known = ", ".join(sorted(s["id"] for s in samples().values()))
        raise KeyError(f"no real-format sample for {artifact_id!r}; samples exist for: {known}")
    return found[0]


def table() -> str:
    rows = ["| artifact | kind | layout source | read by | sample |", "|---|---|---|---|---|"]
    for name, s in samples().items():
        rows.append(
            f"| `{s['id']}` | {s['kind']} | {s['layout_source']} | "
            f"{', '.join(f'`{r}`' for r in s['read_by'])} | [`{name}/`]({name}/) |"
        )
    return "\n".join(rows)


def rendered_readme() -> str:
    text = README.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


if __name__ == "__main__":
    README.write_text(rendered_readme())
    print(f"wrote {README} ({len(samples())} samples)")
