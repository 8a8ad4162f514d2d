"""AgentXRay dataset loading (official code ``cli.py``, ``README.md``): ``<root>/<name>/{train,test}.json``.

The datasets live on the Hugging Face hub as ``shiowen/AgentXRay-Datasets`` (a dataset repo of
plain JSON files under ``data/<name>/``; ``maps`` uses ``train_alpaca.json``/``test_alpaca.json``).
Items are raw ``{"folder_name", "input", "output"}`` or Alpaca ``{"instruction", "input",
"output"}``; ``output`` may be a string or a dict with ``code_files`` (rendered as a project) and
optionally ``docs``, ``configs``, ``logs``, ``requirements``.

:func:`resolve_data_root` turns a hub id (``"shiowen/AgentXRay-Datasets"`` or
``"hf://shiowen/AgentXRay-Datasets"``) into a local folder with ``huggingface_hub.snapshot_download``
(only the requested subsets are fetched; with ``HF_HUB_OFFLINE=1`` the local cache is used), and
leaves local paths alone.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .similarity import codes_to_content

__all__ = [
    "DATASETS",
    "HUB_ID",
    "item_to_pair",
    "load_dataset",
    "load_set_folder",
    "load_split",
    "resolve_data_root",
]

logger = logging.getLogger(__name__)

DATASETS = ("atoms", "chatdev", "eduagent", "gemini", "gpt", "maps", "metagpt")
HUB_ID = "shiowen/AgentXRay-Datasets"


def item_to_pair(item: dict, index: int) -> tuple[str, str]:
    """Turn one JSON item into ``(task τ, expected output o*)`` (official code ``cli.py``; Alpaca
    items use instruction + input, our inference)."""
    if not isinstance(item, dict):
        raise ValueError(f"item {index} must be an object, got {type(item).__name__}")
    if "output" not in item or ("input" not in item and "instruction" not in item):
        raise ValueError(f"item {index} needs 'input' (or 'instruction') and 'output'")
    task = "\n".join(str(item[k]) for k in ("instruction", "input") if item.get(k))
    out = item["output"]
    if isinstance(out, dict):
        if "code_files" in out and isinstance(out["code_files"], dict):
            out = codes_to_content({str(k): str(v) for k, v in out["code_files"].items()})
        else:
            logger.warning("item %d: output dict without code_files, treated as text", index)
            out = json.dumps(out)
    return task, str(out)


def load_split(data_root: str, dataset: str, split: str) -> list[tuple[str, str]]:
    """Load one split of ``<data_root>/<dataset>`` as ``(task, output)`` pairs.

    Rejects ``..`` and absolute names.
    """
    for arg, val in (("dataset", dataset), ("split", split)):
        if ".." in Path(val).parts or Path(val).is_absolute():
            raise ValueError(f"{arg} must be a relative name without '..', got {val!r}")
    return load_set_folder(Path(data_root) / dataset, dataset, split)


def load_set_folder(folder: str | Path, dataset: str, split: str) -> list[tuple[str, str]]:
    """Load one split from a subset's own folder (``train.json`` / ``test.json``; ``maps``:
    ``*_alpaca.json``), as a benchmark set's local ``path`` gives it."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    base = Path(folder)
    paths = [base / n for n in _split_files(dataset, split)]
    path = next((p for p in paths if p.is_file()), None)
    if path is None:
        raise FileNotFoundError(
            f"no {split} split for {dataset!r}; looked for {[str(p) for p in paths]}"
        )
    items = json.loads(path.read_text())
    if not isinstance(items, list):
        raise ValueError(f"{path} must hold a JSON list, got {type(items).__name__}")
    return [item_to_pair(it, i) for i, it in enumerate(items)]


def _split_files(dataset: str, split: str) -> list[str]:
    return [f"{split}_alpaca.json", f"{split}.json"] if dataset == "maps" else [f"{split}.json"]


def resolve_data_root(
    data_root: str | None,
    datasets: list[str] | tuple[str, ...] = DATASETS,
    revision: str | None = None,
    cache_dir: str | None = None,
) -> str:
    """A local folder holding ``<name>/{train,test}.json`` for every name in ``datasets``.

    Args:
        data_root: A local folder (returned unchanged), a hub dataset id such as
            ``"shiowen/AgentXRay-Datasets"`` (``hf://`` prefix optional), or ``None`` for
            :data:`HUB_ID`. For a hub id the snapshot's ``data/`` folder is returned.
        datasets: Subsets to fetch from the hub (only their files are downloaded).
        revision: Hub revision (branch, tag or commit); default the main branch.
        cache_dir: Hugging Face cache folder; default the library's (``HF_HUB_CACHE``).
    """
    if data_root is not None and not str(data_root).startswith("hf://"):
        local = Path(data_root)
        if local.is_dir():
            return str(local)
        if str(data_root).count("/") != 1 or str(data_root).startswith((".", "/")):
            raise FileNotFoundError(f"data_root {data_root!r} is neither a folder nor a hub id")
    repo_id = HUB_ID if data_root is None else str(data_root).removeprefix("hf://")
    for name in datasets:
        if ".." in Path(name).parts or Path(name).is_absolute():
            raise ValueError(f"dataset must be a relative name without '..', got {name!r}")
    from huggingface_hub import snapshot_download

    patterns = [
        f"data/{n}/{f}" for n in datasets for s in ("train", "test") for f in _split_files(n, s)
    ]
    snap = snapshot_download(
        repo_id,
        repo_type="dataset",
        revision=revision,
        allow_patterns=patterns,
        cache_dir=cache_dir,
    )
    logger.info("hub dataset %s -> %s", repo_id, snap)
    return str(Path(snap) / "data")


def load_dataset(
    dataset: str, data_root: str | None = None, revision: str | None = None
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``(train, test)`` pairs of one AgentXRay subset, from a folder or the hub (by id)."""
    root = resolve_data_root(data_root, [dataset], revision=revision)
    return load_split(root, dataset, "train"), load_split(root, dataset, "test")
