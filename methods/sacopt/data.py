"""Converters for the seven cleaned optimisation-modelling benchmarks (official data layout).

The paper evaluates on the *cleaned* benchmarks released with the survey of Xiao et al. 2025
(github.com/LLM4OR/LLM4OR, folder ``static/clean_benchmarks``). Each source keeps its own file
format; this module turns every one of them into one record schema, :class:`ORProblem`::

    {"id": str, "dataset": str, "description": str, "answer": float,
     "input": dict | None,   # parameter values given separately (ComplexOR only)
     "meta": dict}           # source-specific extras (difficulty, type, full result dict ...)

Source formats (as published in ``static/clean_benchmarks``):

==============  ==============================================  ==================================
benchmark       file(s)                                         question / answer fields
==============  ==============================================  ==================================
NL4Opt          ``NL4Opt/prob_<k>/description.txt`` +           text file / ``sample[0]["output"][0]``
                ``sample.json`` (``[{"input", "output"}]``)
IndustryOR      ``IndustryOR.jsonl``                            ``en_question`` / ``en_answer`` (str)
EasyLP          ``Mamo/Mamo_easy_lp_clean.jsonl``               ``Question`` / ``Answer`` (str), ``id``
ComplexLP       ``Mamo/Mamo_complex_lp_clean.jsonl``            ``Question`` / ``Answer`` (str), ``id``
NLP4LP          ``NL4LP/<k>/description.txt`` + ``solution.json``  text file / ``objective``
ReSocratic      ``ReSocratic.jsonl``                            ``question`` / the objective entry
                                                                of ``results`` (``{label: str}``)
ComplexOR       ``ComplexOR/<name>/description.txt`` +          text file / ``sample[0]["output"][0]``;
                ``sample.json``                                 ``sample[0]["input"]`` = the data
==============  ==============================================  ==================================

The official SAC-Opt repo converts these into ``<dataset>/<id>/{description.txt, answer.txt}``
folders (its ``process_data.py``); :func:`convert_problem_dirs` reads that layout too, and
:func:`write_problem_dirs` writes it. Only ComplexOR is an *abstract* benchmark whose numbers come
separately; the NL4Opt ``sample.json`` inputs are test-harness arguments, not problem data, so they
are kept in ``meta`` and never shown to the model.

Records whose answer is missing or not a finite number are excluded, with the reason returned, so
the reported denominator is explicit (our bad-input rules).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

logger = logging.getLogger(__name__)

__all__ = [
    "CLEAN_BENCHMARKS",
    "ORProblem",
    "convert_complexor",
    "convert_industryor",
    "convert_mamo",
    "convert_nl4opt",
    "convert_nlp4lp",
    "convert_problem_dirs",
    "convert_resocratic",
    "load_clean_benchmark",
    "write_problem_dirs",
]


class ORProblem(TypedDict):
    """One benchmark problem in the common schema."""

    id: str
    dataset: str
    description: str
    answer: float
    input: dict[str, Any] | None
    meta: dict[str, Any]


Converted = tuple[list[ORProblem], list[str]]


def _natural_key(s: str) -> list:
    """``prob_2`` before ``prob_10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def _number(value: Any) -> float | None:
    """A finite float from an int/float/numeric string, else ``None``."""
    if isinstance(value, bool):
        return None
    try:
        x = float(str(value).strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _add(
    out: list[ORProblem],
    excluded: list[str],
    dataset: str,
    pid: str,
    description: Any,
    answer: Any,
    input_data: dict | None = None,
    meta: dict | None = None,
) -> None:
    if not isinstance(description, str) or not description.strip():
        excluded.append(f"{dataset}/{pid}: empty or missing question text")
        return
    num = _number(answer)
    if num is None:
        excluded.append(f"{dataset}/{pid}: answer {answer!r} is not a finite number")
        return
    out.append(
        ORProblem(
            id=pid,
            dataset=dataset,
            description=description.strip(),
            answer=num,
            input=input_data,
            meta=meta or {},
        )
    )


def _read_jsonl(path: Path) -> list[tuple[int, dict]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if line.strip():
                try:
                    rows.append((line_no, json.loads(line)))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}:{line_no} is not valid JSON ({err})") from None
    return rows


def _need(path: Path, kind: str) -> Path:
    path = Path(path)
    ok = path.is_dir() if kind == "dir" else path.is_file()
    if not ok:
        raise ValueError(f"expected a {kind} at {path}, found none")
    return path


def _sample_io(path: Path) -> tuple[dict | None, Any]:
    """``sample.json`` = ``[{"input": {...}, "output": [value]}]`` -> (input, first output)."""
    sample = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(sample, list) or not sample or not isinstance(sample[0], dict):
        return None, None
    out = sample[0].get("output")
    first = out[0] if isinstance(out, list) and out else out
    return sample[0].get("input"), first


def convert_nl4opt(root: str | Path, dataset: str = "NL4Opt") -> Converted:
    """``NL4Opt/prob_<k>/{description.txt, sample.json}``; the answer is ``output[0]``.

    The ``input`` of ``sample.json`` holds arguments of the benchmark's reference function stub,
    not problem data (the description already states every number), so it goes to ``meta``.
    """
    root = _need(root, "dir")
    out: list[ORProblem] = []
    excluded: list[str] = []
    for d in sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: _natural_key(p.name)):
        desc = d / "description.txt"
        sample = d / "sample.json"
        if not desc.is_file() or not sample.is_file():
            excluded.append(f"{dataset}/{d.name}: description.txt or sample.json missing")
            continue
        harness_input, answer = _sample_io(sample)
        _add(
            out,
            excluded,
            dataset,
            d.name,
            desc.read_text(encoding="utf-8"),
            answer,
            meta={"harness_input": harness_input},
        )
    return out, excluded


def convert_industryor(path: str | Path, dataset: str = "IndustryOR") -> Converted:
    """``IndustryOR.jsonl``: ``en_question``, ``en_answer`` (string), ``difficulty``,
    ``question_type``. Ids are 1-based line numbers, as in the official repo's processed data."""
    out: list[ORProblem] = []
    excluded: list[str] = []
    for line_no, row in _read_jsonl(_need(path, "file")):
        meta = {k: row[k] for k in ("difficulty", "question_type") if k in row}
        _add(
            out, excluded, dataset, str(line_no), row.get("en_question"), row.get("en_answer"),
            meta=meta,
        )  # fmt: skip
    return out, excluded


def convert_mamo(path: str | Path, dataset: str) -> Converted:
    """MAMO ``Mamo_{easy,complex}_lp_clean.jsonl``: ``id``, ``Question``, ``Answer`` (string),
    ``Category``, ``Type``. The cleaned files keep the original ids (with gaps)."""
    out: list[ORProblem] = []
    excluded: list[str] = []
    for line_no, row in _read_jsonl(_need(path, "file")):
        pid = str(row.get("id", line_no))
        meta = {k: row[k] for k in ("Category", "Type") if k in row}
        _add(out, excluded, dataset, pid, row.get("Question"), row.get("Answer"), meta=meta)
    return out, excluded


def convert_nlp4lp(root: str | Path, dataset: str = "NLP4LP") -> Converted:
    """``NL4LP/<k>/{description.txt, solution.json, parameters.json, problem_info.json}``;
    the answer is ``solution.json["objective"]``. The description is concrete (it states the
    numbers), so ``parameters.json`` is kept in ``meta`` only."""
    root = _need(root, "dir")
    out: list[ORProblem] = []
    excluded: list[str] = []
    for d in sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: _natural_key(p.name)):
        desc, sol = d / "description.txt", d / "solution.json"
        if not desc.is_file() or not sol.is_file():
            excluded.append(f"{dataset}/{d.name}: description.txt or solution.json missing")
            continue
        solution = json.loads(sol.read_text(encoding="utf-8"))
        meta: dict[str, Any] = {"variables": solution.get("variables")}
        if (d / "parameters.json").is_file():
            meta["parameters"] = json.loads((d / "parameters.json").read_text(encoding="utf-8"))
        _add(
            out,
            excluded,
            dataset,
            d.name,
            desc.read_text(encoding="utf-8"),
            solution.get("objective"),
            meta=meta,
        )
    return out, excluded


# Labels that name an objective value ("The maximum profit", "Total cost", "The optimal number of
# fire stations to be built is"). "Max" alone is left out: it occurs in product names.
_OBJECTIVE_LABEL = re.compile(
    r"(maxim|minim|objective|optimal (number|value|cost|profit)|\btotal\b|\bcost\b|profit|revenue)",
    re.IGNORECASE,
)


def _objective_label(results: dict) -> str:
    """Which ReSocratic ``results`` entry is the optimal objective.

    Most records list decision values first and the objective last; a few (7 of 403 in the
    cleaned file, e.g. the fire-station and shift-scheduling problems) put the objective first
    and per-item values after it. Rule: the last label that names an objective value, else the
    last label.
    """
    labels = list(results)
    named = [k for k in labels if _OBJECTIVE_LABEL.search(k)]
    return named[-1] if named else labels[-1]


def _objective_from_results(results: Any) -> Any:
    """The objective value of a ReSocratic-style ``results`` dict (see :func:`_objective_label`)."""
    if isinstance(results, dict) and results:
        return results[_objective_label(results)]
    return results


def convert_resocratic(path: str | Path, dataset: str = "ReSocratic") -> Converted:
    """``ReSocratic.jsonl``: ``question``, ``index``, ``type``, ``results`` — a dict from a label
    to a numeric string, usually decision values first and the optimal objective last (e.g.
    ``{"The number of Process J": "0.0", ..., "The total metal extracted": "2250.0"}``); the
    objective entry is picked by :func:`_objective_label`."""
    out: list[ORProblem] = []
    excluded: list[str] = []
    for line_no, row in _read_jsonl(_need(path, "file")):
        results = row.get("results")
        meta = {"type": row.get("type"), "results": results}
        if isinstance(results, dict) and results:
            meta["objective_label"] = _objective_label(results)
        pid = str(row.get("index", line_no))
        _add(
            out, excluded, dataset, pid, row.get("question"), _objective_from_results(results),
            meta=meta,
        )  # fmt: skip
    return out, excluded


def convert_complexor(root: str | Path, dataset: str = "ComplexOR") -> Converted:
    """``ComplexOR/<name>/{description.txt, sample.json[, gt_model.txt, code_example.py]}``.

    Abstract problems: the description names parameters without values; ``sample[0]["input"]``
    holds the instance data (passed to extraction as ``input_data``), ``sample[0]["output"][0]``
    the optimal objective.
    """
    root = _need(root, "dir")
    out: list[ORProblem] = []
    excluded: list[str] = []
    for d in sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: _natural_key(p.name)):
        desc, sample = d / "description.txt", d / "sample.json"
        if not desc.is_file() or not sample.is_file():
            excluded.append(f"{dataset}/{d.name}: description.txt or sample.json missing")
            continue
        input_data, answer = _sample_io(sample)
        if not isinstance(input_data, dict) or not input_data:
            excluded.append(f"{dataset}/{d.name}: sample.json has no input data")
            continue
        _add(
            out, excluded, dataset, d.name, desc.read_text(encoding="utf-8"), answer,
            input_data=input_data,
        )  # fmt: skip
    return out, excluded


def convert_problem_dirs(root: str | Path, dataset: str | None = None) -> Converted:
    """The official repo's processed layout: ``<root>/<id>/description.txt`` + ``answer.txt``
    (a number, or a ReSocratic-style JSON ``results`` dict) and an
    optional ``sample.json`` whose ``input`` is the instance data of an abstract problem."""
    root = _need(root, "dir")
    dataset = dataset or root.name
    out: list[ORProblem] = []
    excluded: list[str] = []
    for d in sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: _natural_key(p.name)):
        desc, ans = d / "description.txt", d / "answer.txt"
        if not desc.is_file():
            excluded.append(f"{dataset}/{d.name}: description.txt missing")
            continue
        if not ans.is_file():
            excluded.append(f"{dataset}/{d.name}: answer.txt missing")
            continue
        raw = ans.read_text(encoding="utf-8").strip()
        answer: Any = raw
        if raw.startswith("{"):
            try:
                answer = _objective_from_results(json.loads(raw))
            except json.JSONDecodeError:
                answer = raw
        input_data = None
        if (d / "sample.json").is_file():
            input_data, _ = _sample_io(d / "sample.json")
        _add(
            out, excluded, dataset, d.name, desc.read_text(encoding="utf-8"), answer,
            input_data=input_data or None,
        )  # fmt: skip
    return out, excluded


# benchmark name -> (path under static/clean_benchmarks, converter)
CLEAN_BENCHMARKS: dict[str, tuple[str, Callable[[Path], Converted]]] = {
    "NL4Opt": ("NL4Opt", convert_nl4opt),
    "IndustryOR": ("IndustryOR.jsonl", convert_industryor),
    "EasyLP": ("Mamo/Mamo_easy_lp_clean.jsonl", lambda p: convert_mamo(p, "EasyLP")),
    "ComplexLP": ("Mamo/Mamo_complex_lp_clean.jsonl", lambda p: convert_mamo(p, "ComplexLP")),
    "NLP4LP": ("NL4LP", convert_nlp4lp),
    "ReSocratic": ("ReSocratic.jsonl", convert_resocratic),
    "ComplexOR": ("ComplexOR", convert_complexor),
}
_ALIASES = {"nl4lp": "NLP4LP", "mamo_easy": "EasyLP", "mamo_complex": "ComplexLP"}


def _canonical(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"benchmark name must be a non-empty string, got {name!r}")
    by_lower = {k.lower(): k for k in CLEAN_BENCHMARKS}
    key = name.lower()
    if key in by_lower:
        return by_lower[key]
    if key in _ALIASES:
        return _ALIASES[key]
    raise ValueError(f"unknown benchmark {name!r}; choose from {sorted(CLEAN_BENCHMARKS)}")


# How to provide the data, for the messages of a missing benchmark (here and paper.py).
DATA_HINT = (
    "set SACOPT_DATA to the LLM4OR static/clean_benchmarks folder (configs/benchmark/or_clean7.yaml "
    "reads it for every set; scripts/reproduce/sacopt.sh clones github.com/LLM4OR/LLM4OR into "
    "data/LLM4OR), or point benchmark.sets.<set>.path at it"
)


def load_clean_benchmark(name: str, root: str | Path) -> Converted:
    """Load one cleaned benchmark from ``root`` into :class:`ORProblem` records.

    ``root`` is either the survey's ``static/clean_benchmarks`` folder (the source files listed
    in the module docstring) or a folder holding ``<name>/<id>/{description.txt, answer.txt}``
    (the official SAC-Opt repo's processed layout, any capitalisation of ``name``). The
    source-format file wins when both exist.

    Args:
        name: ``NL4Opt``, ``IndustryOR``, ``EasyLP``, ``ComplexLP``, ``NLP4LP``, ``ReSocratic``
            or ``ComplexOR`` (case-insensitive; ``NL4LP`` is accepted for NLP4LP).
        root: Data folder.

    Returns:
        ``(problems, excluded_reasons)``.

    Raises:
        ValueError: Unknown name, or neither layout found under ``root``.
    """
    canon = _canonical(name)
    root = Path(root)
    rel, convert = CLEAN_BENCHMARKS[canon]
    if (root / rel).exists():
        problems, excluded = convert(root / rel)
    else:
        folder = next(
            (
                root / n
                for n in (canon, name, canon.lower(), rel)
                if (root / n).is_dir() and any(root.joinpath(n).glob("*/answer.txt"))
            ),
            None,
        )
        if folder is None:
            raise ValueError(
                f"benchmark {canon}: found neither {root / rel} (LLM4OR clean_benchmarks layout) "
                f"nor {root / canon}/<id>/answer.txt (SAC-Opt processed layout); {DATA_HINT}"
            )
        problems, excluded = convert_problem_dirs(folder, canon)
    for r in excluded:
        logger.warning("excluded %s", r)
    logger.info("%s: %d problems, %d excluded", canon, len(problems), len(excluded))
    return problems, excluded


def write_problem_dirs(problems: list[ORProblem], out_dir: str | Path) -> Path:
    """Write records as ``<out_dir>/<id>/{description.txt, answer.txt[, sample.json]}``.

    This is the layout the official repo's ``run.py`` reads; :func:`convert_problem_dirs` reads it
    back to the same records (minus ``meta``).
    """
    out = Path(out_dir)
    for p in problems:
        d = out / p["id"]
        d.mkdir(parents=True, exist_ok=True)
        (d / "description.txt").write_text(p["description"], encoding="utf-8")
        (d / "answer.txt").write_text(repr(float(p["answer"])), encoding="utf-8")
        if p["input"] is not None:
            sample = [{"input": p["input"], "output": [p["answer"]]}]
            (d / "sample.json").write_text(json.dumps(sample), encoding="utf-8")
    return out
