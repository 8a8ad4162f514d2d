"""AgentXRay dataset loading (spec §3.1, §8): ``<root>/<name>/{train,test}.json`` item lists.

Items are raw ``{"folder_name", "input", "output"}`` or Alpaca ``{"instruction", "input",
"output"}``; ``output`` may be a string or a dict with ``code_files`` (rendered as a project).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .similarity import codes_to_content

logger = logging.getLogger(__name__)

DATASETS = ("atoms", "chatdev", "eduagent", "gemini", "gpt", "maps", "metagpt")
HUB_ID = "shiowen/AgentXRay-Datasets"


def item_to_pair(item: dict, index: int) -> tuple[str, str]:
    """Turn one JSON item into ``(task τ, expected output o*)``."""
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
    """Load one split as ``(task, output)`` pairs; rejects ``..`` and absolute names."""
    for arg, val in (("dataset", dataset), ("split", split)):
        if ".." in Path(val).parts or Path(val).is_absolute():
            raise ValueError(f"{arg} must be a relative name without '..', got {val!r}")
    base = Path(data_root) / dataset
    names = [f"{split}_alpaca.json", f"{split}.json"] if dataset == "maps" else [f"{split}.json"]
    paths = [base / n for n in names]
    path = next((p for p in paths if p.is_file()), None)
    if path is None:
        raise FileNotFoundError(
            f"no {split} split for {dataset!r}; looked for {[str(p) for p in paths]}"
        )
    items = json.loads(path.read_text())
    if not isinstance(items, list):
        raise ValueError(f"{path} must hold a JSON list, got {type(items).__name__}")
    return [item_to_pair(it, i) for i, it in enumerate(items)]
