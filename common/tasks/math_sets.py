"""Loaders for math-style answer sets (their hub layouts) and a boxed-answer verifier.

Real sets are read from local files (json, jsonl, parquet), a local ``datasets`` directory or the
hub cache; nothing is downloaded. Every layout is normalised to the columns ``problem`` and
``answer`` (a string):

- GSM8K / GSM8K-Platinum: ``question`` + ``answer`` whose last line is ``#### <number>``
  (Platinum's ``cleaning_status == "rejected"`` rows, if present, are dropped with a log line);
- MATH / MATH-500 / AIME / BeyondAIME / POLARIS: ``problem`` + ``answer`` (or ``solution`` holding
  ``\\boxed{...}``);
- AMC23 / Minerva Math: ``question`` + ``answer`` (AMC23's answers are floats: ``27.0`` -> ``"27"``);
- OlympiadBench: ``question`` + ``final_answer`` (a list of ``$...$`` strings);
- DAPO-Math-17k (verl RL layout): ``prompt`` (chat messages) + ``reward_model.ground_truth``; the
  problem is cut out of DAPO's own answer instruction and the 100-fold repetition is removed.

``verify_boxed`` compares with math-verify (symbolic equivalence) and falls back to a normalised
string comparison when math-verify cannot parse either side.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from datasets import Dataset, Features, Value, load_dataset, load_from_disk

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


def answer_text(value: object) -> str:
    """A gold answer as text, whatever type the set stores it in.

    Integral floats lose their ``.0`` (AMC23 stores ``27.0`` for 27, which a string comparison
    would score against ``27`` as wrong); a list (OlympiadBench's ``final_answer``, ``$...$``
    strings, several for a multi-answer problem) becomes its entries without ``$``, joined by
    ``", "``.
    """
    if isinstance(value, (list, tuple)):
        parts = [answer_text(v).strip("$").strip() for v in value]
        return ", ".join(p for p in parts if p)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


# DAPO-Math-17k wraps every problem in its own instruction (the dataset card's sample rows):
# "Solve the following math problem step by step. The last line of your response should be of the
# form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n<problem>
# \n\nRemember to put your answer on its own line after \"Answer:\"."
_DAPO_HEAD = "Solve the following math problem step by step."
_DAPO_TAIL = 'Remember to put your answer on its own line after "Answer:".'


def _dapo_problem(messages: list) -> str:
    """The bare problem of a DAPO-Math-17k prompt (its single user turn).

    Deviation from using the prompt as-is: DAPO's instruction asks for an ``Answer: <x>`` last
    line, while our rewards and evaluations read the last ``\\boxed{}`` (math-verify) and every
    benchmark is prompted with ``prompt_suffix``; keeping DAPO's instruction would train one answer
    format and score another. The problem is the text between the instruction's first paragraph
    and its closing reminder.
    """
    users = [m["content"] for m in messages if m.get("role") == "user"]
    if len(users) != 1:
        raise ValueError(
            f"DAPO prompt must hold one user turn, got roles {[m.get('role') for m in messages]}"
        )
    text = users[0].strip()
    if not (text.startswith(_DAPO_HEAD) and text.endswith(_DAPO_TAIL) and "\n\n" in text):
        raise ValueError(
            "DAPO prompt does not carry DAPO's answer instruction (expected it to start with "
            f"{_DAPO_HEAD!r} and end with {_DAPO_TAIL!r}); got {text[:120]!r}..."
        )
    body = text[: -len(_DAPO_TAIL)].split("\n\n", 1)[1]
    return body.strip()


def _normalise(row: dict) -> dict:
    if isinstance(row.get("prompt"), list) and isinstance(row.get("reward_model"), dict):
        gold = row["reward_model"].get("ground_truth")
        if gold in (None, ""):
            raise ValueError(f"DAPO row has no reward_model.ground_truth: {row['reward_model']}")
        return {"problem": _dapo_problem(row["prompt"]), "answer": answer_text(gold)}
    text = row.get("problem") if row.get("problem") else row.get("question")
    if not text:
        raise ValueError(
            "unknown layout: expected a problem/question column with answer (GSM8K '####', MATH, "
            "AMC23/Minerva), final_answer (OlympiadBench), a boxed solution, or DAPO's "
            f"prompt/reward_model; got columns {sorted(row)}"
        )
    ans = row.get("answer")
    if isinstance(ans, str) and "####" in ans:
        ans = _gsm8k_answer(ans)
    if ans in (None, "") and isinstance(row.get("final_answer"), list):
        ans = answer_text(row["final_answer"])
    if ans in (None, "") and row.get("solution"):
        sol = row["solution"]
        ans = extract_boxed(sol if isinstance(sol, str) else " ".join(map(str, sol)))
    if ans in (None, ""):
        raise ValueError(
            f"row has no 'answer', 'final_answer' or boxed 'solution' (columns {sorted(row)}): "
            f"{str(text)[:80]!r}"
        )
    return {"problem": str(text), "answer": answer_text(ans)}


_FEATURES = Features({"problem": Value("string"), "answer": Value("string")})


def _is_dapo(columns: list[str]) -> bool:
    return "prompt" in columns and "reward_model" in columns


def _drop_rejected(ds: Dataset, name: str) -> Dataset:
    """GSM8K-Platinum marks questions it removed as ``cleaning_status == "rejected"`` (its card)."""
    if "cleaning_status" not in ds.column_names:
        return ds
    keep = [i for i, s in enumerate(ds["cleaning_status"]) if s != "rejected"]
    if len(keep) < len(ds):
        logger.info("%s: dropped %d rows with cleaning_status=rejected", name, len(ds) - len(keep))
        ds = ds.select(keep)
    return ds


def _dedupe(ds: Dataset, name: str) -> Dataset:
    """Keeps the first row of each problem: DAPO-Math-17k repeats its ~17K problems ~100 times."""
    seen: set[str] = set()
    keep, i = [], 0
    for batch in ds.select_columns(["problem"]).iter(batch_size=65536):
        for problem in batch["problem"]:
            if problem not in seen:
                seen.add(problem)
                keep.append(i)
            i += 1
    logger.info(
        "%s: %d rows hold %d distinct problems; kept the first row of each",
        name,
        len(ds),
        len(keep),
    )
    return ds.select(keep)


def _normalised(raw: Dataset, name: str) -> Dataset:
    """``raw`` in the ``problem``/``answer`` layout; the first row is checked before mapping."""
    if len(raw) == 0:
        raise ValueError(f"math set {name!r} is empty")
    _normalise(raw[0])  # an unknown layout fails here, before the whole set is mapped
    raw = _drop_rejected(raw, name)
    dapo = _is_dapo(raw.column_names)
    # explicit features: without them an ``answer`` column of floats (AMC23) keeps its float type
    ds = raw.map(_normalise, remove_columns=raw.column_names, features=_FEATURES)
    return _dedupe(ds, name) if dapo else ds


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
    return _normalised(ds, str(p))


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
        ds = _normalised(raw, spec.hub_id)
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
