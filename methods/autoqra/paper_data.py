"""The paper stage's data: Alpaca SFT features and WinoGrande partial scoring.

Both come from local files in the benchmarks' own formats (no download at run time): Alpaca is a JSON
list (or JSON lines) of ``{"instruction", "input", "output"}``; WinoGrande is JSON lines of
``{"sentence"`` with one ``_``, ``"option1", "option2", "answer": "1" | "2"}``. WinoGrande accuracy is
0-shot partial scoring: each option fills the blank and the log-likelihood of the text after the
blank is compared (lm-evaluation-harness's ``winogrande`` rule; the official real-task mode).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

logger = logging.getLogger(__name__)

__all__ = [
    "alpaca_features",
    "alpaca_prompt",
    "alpaca_rows",
    "collate",
    "continuation_logprob",
    "dataset_records",
    "load_alpaca",
    "load_winogrande",
    "read_records",
    "winogrande_accuracy",
    "winogrande_pairs",
    "winogrande_rows",
]

# Instruction-tuning prompt layout of the Alpaca data (instruction, optional input, then the response).
PROMPT_WITH_INPUT = "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
PROMPT_NO_INPUT = "### Instruction:\n{instruction}\n\n### Response:\n"


def read_records(path: str | Path) -> list[dict]:
    """A JSON list or JSON-lines file as a list of dicts."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such data file: {path}")
    text = path.read_text(encoding="utf-8").strip()
    if not text:
        raise ValueError(f"{path} is empty")
    if text[0] == "[":
        records = json.loads(text)
    else:
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not all(isinstance(r, dict) for r in records):
        raise ValueError(f"{path} must hold JSON objects (a list or one per line)")
    return records


# datasets >= 4 refuses a hub set that still ships a loading script (allenai/winogrande's main branch:
# winogrande.py; its parquet PRs are unmerged). The Hub's own parquet export of such a set lives on
# the refs/convert/parquet branch, one folder per config: <config>/<split>/0000.parquet.
SCRIPT_REFUSED = "Dataset scripts are no longer supported"
PARQUET_EXPORT = "refs/convert/parquet"


def dataset_records(spec: Any, what: str, n: int | None) -> list[dict]:
    """The records of a :class:`common.config.DatasetSpec`: its local file (JSON list / JSON lines),
    else ``datasets.load_dataset(hub_id, config, split=split)`` (cached beforehand when offline).

    A script-based hub set is read from the Hub's parquet export instead (``revision=
    "refs/convert/parquet"``, ``data_dir=<config>``), with a warning; ``spec.columns`` renames columns
    (``{format field: this set's column}``).
    """
    if spec.path:
        return read_records(spec.path)[:n]
    if not spec.hub_id:
        raise ValueError(f"{what} needs a hub_id or a local path")
    from datasets import load_dataset

    try:
        ds = load_dataset(spec.hub_id, spec.config, split=spec.split)
    except RuntimeError as err:
        if SCRIPT_REFUSED not in str(err):
            raise
        logger.warning(
            "%s: %s is script-based (%s); reading its parquet export (revision=%s, data_dir=%s)",
            what, spec.hub_id, err, PARQUET_EXPORT, spec.config or "default",
        )  # fmt: skip
        ds = load_dataset(
            spec.hub_id,
            revision=PARQUET_EXPORT,
            data_dir=spec.config or "default",
            split=spec.split,
        )
    rows = [dict(r) for r in (ds.select(range(min(n, len(ds)))) if n else ds)]
    rename = {col: field for field, col in spec.columns.items()}
    return [{rename.get(k, k): v for k, v in r.items()} for r in rows]


def load_alpaca(path: str | Path, n: int | None = None) -> list[dict[str, str]]:
    """Read Alpaca-format records (``instruction``, optional ``input``, ``output``).

    Raises:
        ValueError: naming the record index when ``instruction`` or ``output`` is missing.
    """
    return alpaca_rows(read_records(path)[:n], str(path))


def alpaca_rows(records: list[dict], where: str) -> list[dict[str, str]]:
    """Checked Alpaca rows (``input`` defaults to ""); ``where`` names the source in errors."""
    for i, r in enumerate(records):
        for key in ("instruction", "output"):
            if not isinstance(r.get(key), str):
                raise ValueError(f"{where}: record {i} has no string field {key!r} (Alpaca format)")
    return [
        {"instruction": r["instruction"], "input": r.get("input") or "", "output": r["output"]}
        for r in records
    ]


def alpaca_prompt(record: dict[str, str]) -> str:
    """The prompt text of one Alpaca record (the response follows it)."""
    tpl = PROMPT_WITH_INPUT if record.get("input") else PROMPT_NO_INPUT
    return tpl.format(**record)


def alpaca_features(
    records: list[dict[str, str]], tokenizer: Any, max_len: int = 512
) -> list[dict]:
    """Tokenise for SFT: ``input_ids`` = prompt + response + EOS, ``labels`` = -100 on the prompt.

    Examples whose prompt alone fills ``max_len`` are dropped (they carry no response tokens).
    """
    if max_len < 2:
        raise ValueError(f"max_len must be >= 2, got {max_len}")
    feats = []
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    for r in records:
        p = tokenizer.encode(alpaca_prompt(r), add_special_tokens=False)
        a = tokenizer.encode(r["output"], add_special_tokens=False) + eos
        ids = (p + a)[:max_len]
        labels = ([-100] * len(p) + a)[:max_len]
        if any(x != -100 for x in labels):
            feats.append({"input_ids": ids, "labels": labels})
    if not feats:
        raise ValueError("no Alpaca example has response tokens within max_len")
    return feats


def collate(feats: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a batch: ``input_ids``, ``attention_mask``, ``labels`` (−100 on padding), ``[B, T]``."""
    t = max(len(f["input_ids"]) for f in feats)
    ids = torch.full((len(feats), t), pad_id, dtype=torch.long)
    labels = torch.full((len(feats), t), -100, dtype=torch.long)
    mask = torch.zeros((len(feats), t), dtype=torch.long)
    for i, f in enumerate(feats):
        n = len(f["input_ids"])
        ids[i, :n] = torch.tensor(f["input_ids"])
        labels[i, :n] = torch.tensor(f["labels"])
        mask[i, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def load_winogrande(path: str | Path, n: int | None = None) -> list[dict]:
    """Read WinoGrande-format items (``sentence`` with one ``_``, ``option1``, ``option2``, ``answer``).

    Raises:
        ValueError: naming the item index on a missing field, a blank count other than one, or an
            answer outside {1, 2}.
    """
    return winogrande_rows(read_records(path)[:n], str(path))


def winogrande_rows(items: list[dict], where: str = "benchmark") -> list[dict]:
    """Checked WinoGrande items (``answer`` as int 1 or 2); ``where`` names the source in errors."""
    out = []
    for i, it in enumerate(items):
        for key in ("sentence", "option1", "option2", "answer"):
            if key not in it:
                raise ValueError(f"{where}: item {i} has no field {key!r} (WinoGrande format)")
        if it["sentence"].count("_") != 1:
            raise ValueError(f"{where}: item {i} sentence must contain exactly one '_' blank")
        if str(it["answer"]) not in ("1", "2"):
            raise ValueError(f"{where}: item {i} answer must be '1' or '2', got {it['answer']!r}")
        out.append({**it, "answer": int(it["answer"])})
    return out


def winogrande_pairs(item: dict) -> tuple[list[str], str]:
    """Partial scoring inputs: the two contexts (text before the blank + option) and the shared
    continuation (text after the blank)."""
    i = item["sentence"].index("_")
    before, after = item["sentence"][:i], item["sentence"][i + 1 :]
    contexts = [before + item["option1"], before + item["option2"]]
    return contexts, " " + after.strip()


@torch.no_grad()
def continuation_logprob(model: torch.nn.Module, tokenizer: Any, context: str, cont: str) -> float:
    """``Σ log p(cont tokens | context)`` under a causal LM (BOS prepended when the tokenizer has one)."""
    ctx = tokenizer.encode(context, add_special_tokens=False)
    if tokenizer.bos_token_id is not None:
        ctx = [tokenizer.bos_token_id, *ctx]
    c = tokenizer.encode(cont, add_special_tokens=False)
    if not ctx or not c:
        raise ValueError("context and continuation must both tokenise to >= 1 token")
    device = next(model.parameters()).device
    ids = torch.tensor([ctx + c], device=device)  # [1, T]
    logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)  # [T-1, V]
    tgt = ids[0, 1:]
    return float(logp[len(ctx) - 1 :].gather(-1, tgt[len(ctx) - 1 :, None]).sum())


def winogrande_accuracy(model: torch.nn.Module, tokenizer: Any, items: list[dict]) -> float:
    """Fraction of items whose higher-likelihood option is the answer (0-shot partial scoring)."""
    if not items:
        raise ValueError("items is empty")
    model.eval()
    correct = 0
    for it in items:
        contexts, cont = winogrande_pairs(it)
        scores = [continuation_logprob(model, tokenizer, ctx, cont) for ctx in contexts]
        correct += int(np.argmax(scores)) + 1 == it["answer"]
    return correct / len(items)
