"""Loaders for the paper-scale data and the chat back-ends of the driver.

Formats read (all JSON lines, one object per line; a JSON array file is accepted too):

* induction test sets of the official repo (``data/faithful/test/explicit_test_1000.jsonl``,
  ``explicit_xugou_test_1000.jsonl``): ``{"instruction", "input", "output"}`` with
  ``input = "Description：...\\nQuestion：Does X exist or hold?"`` and ``output = "No."``;
* co-occurrence corpora of the repo (``data/faithful/train/gongxian_<r>%_train.json``,
  ``gongxian_xugou<r>%_train.json``): ``{"text"}``;
* HaluEval (``pminervini/HaluEval`` / the HaluEval GitHub ``data/`` files), our choice for the
  four context-rich sets (the paper's four were not recovered; ):
  ``qa_data.json`` ``{"knowledge", "question", "right_answer", "hallucinated_answer"}``,
  ``dialogue_data.json`` ``{"knowledge", "dialogue_history", "right_response",
  "hallucinated_response"}``, ``summarization_data.json`` ``{"document", "right_summary",
  "hallucinated_summary"}``, ``general_data.json`` ``{"ID", "user_query", "chatgpt_response",
  "hallucination_label": "yes"|"no"}`` (the hub copy names it ``hallucination``).

Every HaluEval row becomes yes/no items "is this answer supported by the evidence?" (gold ``yes``
for the right candidate, ``no`` for the hallucinated one), so the same pipeline, parser and
accuracy apply to all four sets.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import datasets

from common.llm import VLLMChat  # re-exported: the backbone's vLLM backend

__all__ = [
    "HALUEVAL_TASKS",
    "VLLMChat",
    "load_cooccurrence_corpus",
    "load_halueval",
    "load_induction_tests",
    "read_json_records",
]

HALUEVAL_TASKS = ("qa", "dialogue", "summarization", "general")


def read_json_records(path: str | Path) -> list[dict[str, Any]]:
    """Reads a JSON-lines file (or a JSON array file) into a list of dicts.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if a line is not a JSON object or the file has no record.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"path does not exist: {p}")
    text = p.read_text(encoding="utf-8").strip()
    if text.startswith("["):
        rows = json.loads(text)
    else:
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{p}:{n} is not valid JSON: {err}") from err
    if not rows or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{p} must hold at least one JSON object per line")
    return rows


def _need(row: dict, keys: tuple[str, ...], path: str | Path, i: int) -> None:
    miss = [k for k in keys if k not in row]
    if miss:
        raise ValueError(f"{path} record {i} lacks field(s) {miss}")


def load_induction_tests(path: str | Path) -> datasets.Dataset:
    """The repo's negative-evidence test set: columns ``id``, ``input``, ``label`` (yes/no).

    ``input`` is the repo's ``input`` field unchanged (full-width colons kept); ``label`` is the
    ``output`` field mapped to ``yes``/``no`` (the released sets are all ``"No."``).

    Raises:
        ValueError: on a record without ``input``/``output`` or an output that is not yes/no.
    """
    rows = read_json_records(path)
    labels = []
    for i, r in enumerate(rows):
        _need(r, ("input", "output"), path, i)
        lab = str(r["output"]).strip().rstrip(".").lower()
        if lab not in ("yes", "no"):
            raise ValueError(f"{path} record {i}: output must be Yes./No., got {r['output']!r}")
        labels.append(lab)
    return datasets.Dataset.from_dict(
        {
            "id": list(range(len(rows))),
            "input": [str(r["input"]) for r in rows],
            "label": labels,
        }
    )


def load_cooccurrence_corpus(path: str | Path) -> datasets.Dataset:
    """A repo co-occurrence corpus (``{"text"}`` per line) as a ``text`` Dataset.

    Raises:
        ValueError: on a record without ``text``.
    """
    rows = read_json_records(path)
    for i, r in enumerate(rows):
        _need(r, ("text",), path, i)
    return datasets.Dataset.from_dict({"text": [str(r["text"]) for r in rows]})


def _general_label(row: dict, path: str | Path, i: int) -> str:
    """A ``general`` row's yes/no hallucination flag: ``hallucination_label`` in the official
    GitHub file, ``hallucination`` in the hub copy ``pminervini/HaluEval``."""
    key = next((k for k in ("hallucination_label", "hallucination") if k in row), None)
    if key is None:
        raise ValueError(
            f"{path} record {i} lacks 'hallucination_label' (official general_data.json) or "
            "'hallucination' (pminervini/HaluEval)"
        )
    h = str(row[key]).strip().lower()
    if h not in ("yes", "no"):
        raise ValueError(f"{path} record {i}: {key} must be yes/no, got {row[key]!r}")
    return h


def _item(evidence: str, candidate: str, kind: str) -> str:
    return (
        f"{evidence}\n{kind}: {candidate}\n"
        f"Question: Is the {kind.lower()} fully supported by the text above, with nothing "
        "contradicted or invented?"
    )


def load_halueval(
    path: str | Path, task: str, both: bool = True, seed: int = 0
) -> datasets.Dataset:
    """HaluEval rows as yes/no faithfulness items: columns ``id``, ``input``, ``label``.

    Args:
        path: the task's JSON-lines file.
        task: ``qa`` | ``dialogue`` | ``summarization`` | ``general``.
        both: emit the right and the hallucinated candidate of each row (two items); if False,
            one of the two chosen with ``seed`` (HaluEval's own protocol). Ignored for
            ``general`` (one response per row, label from ``hallucination_label``, or
            ``hallucination`` in the hub copy).
        seed: RNG seed for ``both=False``.

    Raises:
        ValueError: on an unknown ``task`` or a record lacking the task's fields.
    """
    if task not in HALUEVAL_TASKS:
        raise ValueError(f"task must be one of {HALUEVAL_TASKS}, got {task!r}")
    rows = read_json_records(path)
    rng = random.Random(seed)
    texts, labels, src = [], [], []
    for i, r in enumerate(rows):
        if task == "general":
            _need(r, ("user_query", "chatgpt_response"), path, i)
            h = _general_label(r, path, i)
            ev = f"User query: {r['user_query']}"
            texts.append(_item(ev, str(r["chatgpt_response"]), "Response"))
            labels.append("no" if h == "yes" else "yes")
            src.append(i)
            continue
        if task == "qa":
            _need(r, ("knowledge", "question", "right_answer", "hallucinated_answer"), path, i)
            ev = f"Knowledge: {r['knowledge']}\nQuestion asked: {r['question']}"
            cands, kind = (r["right_answer"], r["hallucinated_answer"]), "Answer"
        elif task == "dialogue":
            _need(
                r,
                ("knowledge", "dialogue_history", "right_response", "hallucinated_response"),
                path,
                i,
            )
            ev = f"Knowledge: {r['knowledge']}\nDialogue: {r['dialogue_history']}"
            cands, kind = (r["right_response"], r["hallucinated_response"]), "Response"
        else:
            _need(r, ("document", "right_summary", "hallucinated_summary"), path, i)
            ev = f"Document: {r['document']}"
            cands, kind = (r["right_summary"], r["hallucinated_summary"]), "Summary"
        picks = (0, 1) if both else (rng.randint(0, 1),)
        for j in picks:
            texts.append(_item(ev, str(cands[j]), kind))
            labels.append("yes" if j == 0 else "no")
            src.append(i)
    return datasets.Dataset.from_dict(
        {"id": list(range(len(texts))), "input": texts, "label": labels, "row": src}
    )
