"""The FlashRAG QA files of the paper stages: exported from the hub once, on a connected machine.

The paper stages read local JSON-lines files only (:func:`methods.kmkc.pipeline.load_qa_jsonl`).
:func:`export_sets` writes them from ``RUC-NLPIR/FlashRAG_datasets``: every set of a composed
``kmkc_paper`` run (``method.train_sets`` and ``benchmark.sets``) that names a ``hub_id`` is loaded
with ``datasets.load_dataset(hub_id, config, split=split)`` (the hub repository keeps one folder per
config with ``train/dev/test.jsonl``; rows ``id``, ``question``, ``golden_answers`` and, for most
sets, a ``metadata`` dict) and written to the set's ``path`` with the three fields the loader reads.
A set without a ``hub_id`` (``beerqa``, ``searchqa``: not configs of that repository) must already
exist at its ``path``; the error names its official release.

``python -m methods.kmkc.flashrag experiment=kmkc_paper [overrides]`` runs it
(``scripts/reproduce/kmkc.sh paper`` does).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from datasets import load_dataset

from common.config import DatasetSpec

__all__ = ["OFFICIAL_SOURCES", "export_set", "export_sets", "flashrag_row", "run_sets"]

logger = logging.getLogger(__name__)

# Sets of KMKC's Table 1 that RUC-NLPIR/FlashRAG_datasets does not ship (configs/benchmark/flashrag11.yaml).
OFFICIAL_SOURCES = {
    "beerqa": "beerqa_dev_v1.0.json of https://beerqa.github.io",
    "searchqa": "the SearchQA release of https://github.com/nyu-dl/dl4ir-searchQA",
}


def flashrag_row(row: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``{"id", "question", "golden_answers"}`` of one hub row (``metadata`` is not kept): the official
    FlashRAG jsonl layout.

    Raises:
        ValueError: naming ``where`` when the question is empty or ``golden_answers`` is not a
            non-empty list of strings.
    """
    question, golds = row.get("question"), row.get("golden_answers")
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"{where}: needs a non-empty 'question', got keys {sorted(row)}")
    if (
        not isinstance(golds, list)
        or not golds
        or not all(isinstance(g, str) and g.strip() for g in golds)
    ):
        raise ValueError(
            f"{where}: 'golden_answers' must be a non-empty list of answer strings, got {golds!r}"
        )
    return {"id": str(row.get("id", "")), "question": question, "golden_answers": golds}


def export_set(name: str, spec: DatasetSpec) -> str:
    """Writes one hub set to ``spec.path`` (a temporary file renamed at the end, so a failed export
    leaves nothing); returns ``"present"``, ``"exported (<n> rows)"``.

    Raises:
        ValueError: when the set has no ``path``, or neither a ``hub_id`` nor a file at its path
            (naming the official release for beerqa / searchqa), or on the first bad row.
    """
    if not spec.path:
        raise ValueError(f"set {name!r} needs a local `path` to export {spec.hub_id} to")
    path = Path(spec.path)
    if path.is_file():
        return "present"
    if not spec.hub_id:
        source = OFFICIAL_SOURCES.get(name, "its official release")
        raise ValueError(
            f"set {name!r} has no hub_id and {path} does not exist: convert {source} to JSON lines "
            f"with 'id', 'question', 'golden_answers' (a list of answer strings) at that path"
        )
    rows = load_dataset(spec.hub_id, spec.config, split=spec.split)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    n = 0
    try:
        with tmp.open("w") as fh:
            for i, row in enumerate(rows):
                where = f"{spec.hub_id} ({spec.config}, {spec.split}) row {i}"
                fh.write(json.dumps(flashrag_row(row, where), ensure_ascii=False) + "\n")
                n += 1
        if not n:
            raise ValueError(f"{spec.hub_id} ({spec.config}, {spec.split}) has no rows")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.rename(path)
    return f"exported ({n} rows)"


def run_sets(run: Any) -> dict[str, DatasetSpec]:
    """Every QA set a composed kmkc run reads: ``train/<name>`` and ``eval/<name>`` (our engineering)."""
    sets = {f"train/{n}": s for n, s in run.method.train_sets.items()}
    if run.benchmark is not None:
        sets.update({f"eval/{n}": s for n, s in run.benchmark.sets.items()})
    return sets


def export_sets(sets: Mapping[str, DatasetSpec]) -> dict[str, str]:
    """:func:`export_set` for every set; the sets that need a manual step are checked first, so the
    run stops before any download when one is missing (our engineering)."""
    manual = [
        (key, s)
        for key, s in sets.items()
        if not s.hub_id and not (s.path and Path(s.path).is_file())
    ]
    for key, spec in manual:
        export_set(key.split("/")[-1], spec)  # raises with the official source
    states = {}
    for key, spec in sets.items():
        states[key] = export_set(key.split("/")[-1], spec)
        logger.info("%s -> %s: %s", key, spec.path, states[key])
    return states


def main(argv: list[str]) -> int:
    """``python -m methods.kmkc.flashrag [overrides]``: export every hub QA set of the composed run to
    its local path (our engineering; scripts/reproduce/kmkc.sh calls it)."""
    from common.config import validate
    from common.registry import compose

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    run = validate(compose(argv or ["experiment=kmkc_paper"]))
    for key, state in export_sets(run_sets(run)).items():
        print(f"{key}: {state}")
    return 0


if __name__ == "__main__":  # pragma: no cover - network export on a connected machine
    sys.exit(main(sys.argv[1:]))
