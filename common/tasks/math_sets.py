"""Loaders for math-style answer sets (GSM8K and MATH-500 layouts) and a boxed-answer verifier.

Real sets are read from local files (json, jsonl, parquet) or a local ``datasets`` directory; nothing is
downloaded. Both layouts are normalised to the columns ``problem`` and ``answer``:

- GSM8K: ``question`` + ``answer`` whose last line is ``#### <number>``;
- MATH / MATH-500: ``problem`` + ``answer`` (or ``solution`` holding ``\\boxed{...}``).

``verify_boxed`` compares with math-verify (symbolic equivalence) and falls back to a normalised
string comparison when math-verify cannot parse either side.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from datasets import Dataset, load_dataset, load_from_disk

from common.tasks.arithmetic import _completion_text

logger = logging.getLogger(__name__)

FIXTURES = Path(__file__).parent / "fixtures"
_BOXED = "\\boxed"


def extract_boxed(text: str) -> str | None:
    """Returns the content of the last ``\\boxed{...}`` in ``text`` (nested braces handled), or None."""
    start = text.rfind(_BOXED + "{")
    if start < 0:
        return None
    i = start + len(_BOXED) + 1
    depth, out = 1, []
    while i < len(text):
        ch = text[i]
        depth += (ch == "{") - (ch == "}")
        if depth == 0:
            return "".join(out).strip()
        out.append(ch)
        i += 1
    return None  # unbalanced braces: no answer


def _gsm8k_answer(answer: str) -> str:
    final = answer.split("####")[-1].strip()
    return final.replace(",", "")


def _normalise(row: dict) -> dict:
    if "question" in row and "answer" in row and "####" in str(row["answer"]):
        return {"problem": row["question"], "answer": _gsm8k_answer(row["answer"])}
    if "problem" in row:
        ans = row.get("answer")
        if ans in (None, "") and row.get("solution"):
            ans = extract_boxed(row["solution"])
        if ans in (None, ""):
            raise ValueError(f"row has neither 'answer' nor a boxed 'solution': {row}")
        return {"problem": row["problem"], "answer": str(ans)}
    raise ValueError(
        "unknown layout: expected columns question/answer (GSM8K) or problem/answer|solution "
        f"(MATH), got {sorted(row)}"
    )


def load_math_dataset(path: str | Path, split: str = "test") -> Dataset:
    """Loads a GSM8K- or MATH-layout set from a local file or ``save_to_disk`` folder.

    Args:
        path: a ``.json``/``.jsonl``/``.parquet`` file, or a directory written by ``save_to_disk``.
        split: the split name when ``path`` is a DatasetDict folder.

    Returns:
        A Dataset with columns ``problem`` and ``answer``.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: on an unknown column layout or file type.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(
            f"math dataset {str(p)!r} not found; pass a local json/jsonl/parquet file or a "
            "save_to_disk folder (download hub sets beforehand: nothing is fetched at run time)"
        )
    if p.is_dir():
        ds = load_from_disk(str(p))
        if hasattr(ds, "keys"):
            ds = ds[split]
    else:
        kinds = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
        if p.suffix not in kinds:
            raise ValueError(f"path must end in {sorted(kinds)}, got {p.name!r}")
        ds = load_dataset(kinds[p.suffix], data_files=str(p), split="train")
    return ds.map(_normalise, remove_columns=ds.column_names)


def load_math_set(spec) -> Dataset:
    """Loads one set of a ``format: math`` benchmark (a :class:`common.config.DatasetSpec`).

    A local ``spec.path`` wins over ``spec.hub_id`` (read by :func:`load_math_dataset`); a hub set
    is loaded with ``datasets.load_dataset(hub_id, config, split)`` (from the local cache when
    offline). ``spec.columns`` renames the set's columns to the layout's names first
    (``{"problem": "question"}``), and ``spec.limit`` keeps the first rows.

    Returns:
        A Dataset with columns ``problem`` and ``answer``.

    Raises:
        ValueError: when the spec names neither a path nor a hub id, or the layout is unknown.
    """
    if spec.path:
        ds = load_math_dataset(spec.path, split=spec.split)
    elif spec.hub_id:
        raw = load_dataset(spec.hub_id, spec.config, split=spec.split)
        renames = {col: name for name, col in spec.columns.items() if col != name}
        if renames:
            raw = raw.rename_columns(renames)
        ds = raw.map(_normalise, remove_columns=raw.column_names)
    else:
        raise ValueError("a math benchmark set needs `path` (local file) or `hub_id`")
    if spec.limit is not None:
        ds = ds.select(range(min(spec.limit, len(ds))))
    if len(ds) == 0:
        raise ValueError(f"math set {spec.path or spec.hub_id!r} is empty")
    return ds


def _plain(s: str) -> str:
    s = s.strip().strip("$").replace(" ", "").replace("\\!", "").replace(",", "")
    s = re.sub(r"\\(?:text|mathrm)\{([^}]*)\}", r"\1", s)
    return s.rstrip(".")


def verify_boxed(completion, answer: str) -> float:
    """1.0 if the completion's last boxed answer equals ``answer`` (math-verify, else string match)."""
    pred = extract_boxed(_completion_text(completion))
    if pred is None:
        return 0.0
    try:
        from math_verify import parse, verify

        gold_p, pred_p = parse(f"${answer}$"), parse(f"${pred}$")
        if gold_p and pred_p:
            return float(verify(gold_p, pred_p))
    except ImportError:  # math-verify is optional at run time; string match below
        pass
    return float(_plain(pred) == _plain(str(answer)))


def boxed_reward(completions: list, answer: list[str], **_: object) -> list[float]:
    """A TRL reward function over a batch: ``verify_boxed`` per completion."""
    return [verify_boxed(c, a) for c, a in zip(completions, answer, strict=True)]
