"""DOCCI (Onoe et al. 2024, ``google/docci``) read from its official files, the paper stage's images.

The hub repository ``google/docci`` is a loading script, which ``datasets`` >= 4 refuses ("Dataset
scripts are no longer supported"). The script only reads two files that Google publishes
(https://google.github.io/docci/#downloads), so we read them directly:

* ``docci_descriptions.jsonlines``: one JSON object per image with ``example_id``, ``split``
  (``train`` 9,647 / ``test`` 5,000 / ``qual_dev`` 100 / ``qual_test`` 100), ``image_file``
  (``<example_id>.jpg``) and ``description`` (the human-written detailed description);
* ``docci_images.tar.gz``: the JPEG images, extracted to ``images/<image_file>``.

``train_data.path`` points at the folder that holds both (the descriptions file and the extracted
``images/``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = [
    "DESCRIPTIONS",
    "DOCCI_FILES",
    "DOCCI_HUB_ID",
    "docci_hint",
    "is_docci_folder",
    "load_docci",
]

DOCCI_HUB_ID = "google/docci"
DESCRIPTIONS = "docci_descriptions.jsonlines"
_BASE = "https://storage.googleapis.com/docci/data/"
#: The official files and where they go under the folder ``train_data.path`` names.
DOCCI_FILES = {DESCRIPTIONS: _BASE + DESCRIPTIONS, "images/": _BASE + "docci_images.tar.gz"}
_FIELDS = ("split", "image_file", "description")


def docci_hint(folder: str = "data/docci") -> str:
    """The steps that make DOCCI loadable offline (the message for the hub id; the file names are the
    official release's, as the hub's loading script docci.py downloads them)."""
    return (
        f"{DOCCI_HUB_ID} is a loading-script dataset, which datasets >= 4 refuses; download its "
        f"official files instead: {DOCCI_FILES[DESCRIPTIONS]} into {folder}/ and "
        f"{DOCCI_FILES['images/']} extracted there (tar -xzf docci_images.tar.gz -C {folder} "
        f"gives {folder}/images/), then set method.train_data.path={folder}"
    )


def is_docci_folder(path: str | Path) -> bool:
    """True when ``path`` is a folder holding ``docci_descriptions.jsonlines`` (the official release's
    description file)."""
    return (Path(path) / DESCRIPTIONS).is_file()


def _records(folder: Path, split: str) -> list[dict]:
    rows = []
    with open(folder / DESCRIPTIONS, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{folder / DESCRIPTIONS}:{line_no} is not JSON ({err})") from err
            missing = [k for k in _FIELDS if not rec.get(k)]
            if missing:
                raise ValueError(
                    f"{folder / DESCRIPTIONS}:{line_no} lacks {missing} (DOCCI records hold "
                    f"{list(_FIELDS)} and example_id), got keys {sorted(rec)}"
                )
            if rec["split"] == split:
                rows.append(rec)
    return rows


def load_docci(folder: str | Path, split: str = "train"):
    """One DOCCI split as a ``datasets.Dataset`` with ``image`` (decoded on access),
    ``description`` and ``example_id``, from the official release's files (the columns the hub's
    loading script docci.py yields).

    Raises:
        FileNotFoundError: the descriptions file, or an image it names, is missing (the first
            missing images are listed; nothing is loaded before every file is found).
        ValueError: a malformed record, or no record of ``split``.
    """
    from datasets import Dataset, Image

    folder = Path(folder)
    if not is_docci_folder(folder):
        raise FileNotFoundError(f"{folder / DESCRIPTIONS} not found; {docci_hint(str(folder))}")
    rows = _records(folder, split)
    if not rows:
        raise ValueError(
            f"DOCCI has no records of split {split!r} in {folder / DESCRIPTIONS} "
            "(splits: train, test, qual_dev, qual_test)"
        )
    paths = [folder / "images" / r["image_file"] for r in rows]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"{len(missing)} of {len(paths)} DOCCI {split} images are missing, first "
            f"{missing[:3]}; extract {DOCCI_FILES['images/']} into {folder}"
        )
    logger.info("DOCCI %s: %d images from %s", split, len(rows), folder)
    ds = Dataset.from_dict(
        {
            "image": [str(p) for p in paths],
            "description": [r["description"] for r in rows],
            "example_id": [r.get("example_id", Path(r["image_file"]).stem) for r in rows],
        }
    )
    return ds.cast_column("image", Image())
