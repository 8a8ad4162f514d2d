"""Paper-scale data (official ``common/data.py``, official README): Tulu pools, query sets and the
raw formats of the five target tasks.

* :func:`load_pool` reads a Tulu-style pool (``{"id", "dataset", "messages": [...]}`` rows) from a
  local JSON/JSONL file or a hub id (``Harvard-DCML/tulu-v2-197K-processed``), drops rows with no
  assistant turn and rejects duplicate ids (docs/methods/instruction_selection.md).
* :func:`load_queries` reads the processed query set (``{"prompts", "labels"}``; hub
  ``Harvard-DCML/targeted-query-set-processed``, one config per task) or a local file of that format.
* :data:`TASK_CONVERTERS` turn the raw benchmark formats of the five target tasks (BBH task JSON,
  HumanEval JSONL, GSM8K JSONL, TyDiQA-GoldP SQuAD-style JSON, MMLU-Pro rows) into query rows with the
  Tulu generation prompt, for the query loss and for building query sets from raw files.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

logger = logging.getLogger(__name__)

TARGET_TASKS = ("bbh", "codex", "gsm8k", "tydiqa", "mmlu_pro")
USER, ASSISTANT = "<|user|>\n", "\n<|assistant|>\n"


def _read_rows(source: str, split: str, config: str | None = None) -> Sequence[Mapping[str, Any]]:
    """Rows of a local ``.json``/``.jsonl`` file, or the hub dataset itself
    (``datasets.load_dataset(source, config, split=split)``, iterated row by row so the callers stop
    on the first bad row without first copying the 197K pool into Python dicts)."""
    if os.path.exists(source):
        with open(source) as fh:
            text = fh.read()
        if source.endswith(".jsonl"):
            return [json.loads(ln) for ln in text.splitlines() if ln.strip()]
        data = json.loads(text)
        return data if isinstance(data, list) else [data]
    from datasets import load_dataset

    return load_dataset(source, config, split=split)


def load_pool(source: str, split: str = "train", limit: int | None = None) -> list[dict[str, Any]]:
    """A Tulu-style pool: ``{"id", "dataset", "messages": [{"role", "content"}, ...]}`` rows.

    Args:
        source: local JSON/JSONL path or hub id (paper: ``Harvard-DCML/tulu-v2-197K-processed``).
        split: hub split.
        limit: keep the first ``limit`` valid rows (None: all).

    Raises:
        ValueError: on a row without ``id``/``messages``, a duplicate id, or an empty result.
    """
    rows, seen, dropped = [], set(), 0
    for i, r in enumerate(_read_rows(source, split)):
        if "id" not in r or "messages" not in r:
            raise ValueError(f"pool row {i} needs 'id' and 'messages', got keys {sorted(r)}")
        if r["id"] in seen:
            raise ValueError(f"pool has a duplicate id {r['id']!r} (row {i})")
        seen.add(r["id"])
        msgs = [{"role": m["role"], "content": m["content"]} for m in r["messages"]]
        if not any(m["role"] == "assistant" and str(m["content"]).strip() for m in msgs):
            dropped += 1  # docs/methods/instruction_selection.md: no supervised tokens
            continue
        rows.append({"id": r["id"], "dataset": r.get("dataset", ""), "messages": msgs})
        if limit is not None and len(rows) >= limit:
            break
    if dropped:
        logger.warning("pool: dropped %d rows without an assistant turn", dropped)
    if not rows:
        raise ValueError(f"pool {source!r} has no usable rows")
    return rows


def load_queries(
    source: str, task: str, split: str = "dev", limit: int | None = None
) -> list[dict[str, str]]:
    """The processed query set of one target task: ``{"prompts", "labels"}`` rows.

    Args:
        source: local JSON/JSONL path or hub id (``Harvard-DCML/targeted-query-set-processed``,
            whose configs are the task names).
        task: one of :data:`TARGET_TASKS`.
        split: hub split (paper: ``dev``).
        limit: keep the first ``limit`` rows.

    Raises:
        ValueError: on an unknown task, a row without the two fields, an empty label or no rows.
    """
    if task not in TARGET_TASKS:
        raise ValueError(f"task must be one of {TARGET_TASKS}, got {task!r}")
    out = []
    for i, r in enumerate(_read_rows(source, split, config=task)):
        if "prompts" not in r or "labels" not in r:
            raise ValueError(f"query row {i} needs 'prompts' and 'labels', got keys {sorted(r)}")
        if not str(r["labels"]).strip():
            raise ValueError(f"query row {i} has an empty label")
        out.append({"prompts": str(r["prompts"]), "labels": str(r["labels"])})
    if limit is not None:
        out = out[:limit]
    if not out:
        raise ValueError(f"query set {source!r} ({task}) is empty")
    return out


def _query(prompt: str, label: str, **extra: Any) -> dict[str, Any]:
    """A query row with the Tulu generation prompt (official ``common/data.py``: prompts end in ``<|assistant|>``)."""
    return {"prompts": USER + prompt.strip() + ASSISTANT, "labels": label, **extra}


def convert_bbh(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """BBH task file (``{"examples": [{"input", "target"}]}`` or its example list) -> query rows."""
    ex = rows[0]["examples"] if len(rows) == 1 and "examples" in rows[0] else rows
    return [_query(str(e["input"]), str(e["target"]), answer=str(e["target"])) for e in ex]


def convert_gsm8k(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """GSM8K JSONL (``{"question", "answer"}``, answer ends ``#### n``) -> query rows.

    The label is the reasoning with the final line rewritten as ``So the answer is n.`` (the
    open-instruct CoT style); ``answer`` keeps the number for exact match.
    """
    out = []
    for r in rows:
        text = str(r["answer"])
        if "####" not in text:
            raise ValueError(f"a GSM8K answer must end with '#### <number>', got {text[-40:]!r}")
        steps, final = text.rsplit("####", 1)
        final = final.strip().replace(",", "")
        steps = re.sub(r"<<[^>]*>>", "", steps).strip()  # drop calculator annotations
        out.append(_query(str(r["question"]), f"{steps}\nSo the answer is {final}.", answer=final))
    return out


def convert_tydiqa(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """TyDiQA-GoldP (SQuAD-style ``{"data": [{"paragraphs": [{"context", "qas"}]}]}``) -> rows."""
    data = rows[0]["data"] if len(rows) == 1 and "data" in rows[0] else rows
    out = []
    for art in data:
        for par in art["paragraphs"]:
            for qa in par["qas"]:
                answers = [a["text"] for a in qa["answers"]]
                if not answers:
                    continue
                prompt = f"Passage: {par['context']}\nQuestion: {qa['question']}\nAnswer:"
                out.append(_query(prompt, answers[0], answer=answers, id=qa.get("id", "")))
    return out


def convert_codex(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """HumanEval JSONL (``task_id, prompt, canonical_solution, test, entry_point``) -> rows."""
    out = []
    for r in rows:
        prompt = "Complete the following python function.\n\n\n" + str(r["prompt"])
        row = _query(prompt, str(r["prompt"]) + str(r["canonical_solution"]))
        row.update(task_id=r["task_id"], test=r["test"], entry_point=r["entry_point"])
        out.append(row)
    return out


def convert_mmlu_pro(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """MMLU-Pro rows (``question, options, answer, answer_index, category``) -> rows."""
    letters = "ABCDEFGHIJKLMNOP"
    out = []
    for r in rows:
        opts = list(r["options"])
        if not 2 <= len(opts) <= len(letters):
            raise ValueError(f"an MMLU-Pro question needs 2..16 options, got {len(opts)}")
        body = "\n".join(f"({letters[i]}) {o}" for i, o in enumerate(opts))
        ans = str(r["answer"])
        prompt = f"Question: {r['question']}\nOptions:\n{body}\nAnswer:"
        out.append(_query(prompt, f"The answer is ({ans}).", answer=ans, category=r["category"]))
    return out


TASK_CONVERTERS: dict[str, Callable[[Sequence[Mapping[str, Any]]], list[dict[str, Any]]]] = {
    "bbh": convert_bbh,
    "codex": convert_codex,
    "gsm8k": convert_gsm8k,
    "tydiqa": convert_tydiqa,
    "mmlu_pro": convert_mmlu_pro,
}


def load_target_task(task: str, path: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Raw benchmark file of a target task -> query rows (``prompts``, ``labels``, ``answer``...)."""
    if task not in TASK_CONVERTERS:
        raise ValueError(f"task must be one of {TARGET_TASKS}, got {task!r}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{task} file not found: {path}")
    rows = TASK_CONVERTERS[task](_read_rows(path, "test"))
    return rows[:limit] if limit is not None else rows
