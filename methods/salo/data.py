"""Paper-scale data loaders (official ``process_data.py``, ``eval_attacks.py``): training, calibration and attack sets.

Every loader takes either a local file in the benchmark's published format (``.csv``, ``.json``,
``.jsonl``, ``.parquet``) or a Hugging Face dataset id (read with ``datasets.load_dataset``; offline
this needs the data in ``HF_HOME``). Labels are 1 = harmful / unsafe, 0 = benign / safe.

Formats:
    * XSTest (``paul-rottger/xstest`` ``xstest_prompts.csv`` or ``walledai/XSTest``): ``prompt``,
      ``type`` and, in v2, ``label`` ∈ {safe, unsafe}; without ``label`` a ``contrast_*`` type is unsafe.
    * AdvBench (``harmful_behaviors.csv`` from llm-attacks: ``goal``, ``target``; ``walledai/AdvBench``:
      ``prompt``, ``target``): the direct and the prefill (target after the assistant header) sets.
    * PKU-SafeRLHF: ``prompt``, ``is_response_0_safe``, ``is_response_1_safe`` (unsafe if either is not).
    * toxic-chat (``toxicchat0124``): ``user_input``, ``toxicity``, ``jailbreaking``.
    * Attack CSVs of the official code: ``prompt``, ``injection`` (:func:`load_attack_csv`).
    * JailbreakBench artifacts (GCG, PAIR, ...): ``{"jailbreaks": [{"goal", "prompt", ...}]}``.
    * AutoDAN results (``SheltonLiu-N/AutoDAN``): ``{index: {"goal", "target", "final_suffix", ...}}``,
      where ``final_suffix`` is a template whose ``[REPLACE]`` slot takes the lower-cased goal.
"""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

from methods.salo.paper import AttackSet, load_attack_csv

logger = logging.getLogger(__name__)

# Hub sets behind a licence gate: the message a failed load adds (the files are not fetched at run time).
GATED = {
    "walledai/XSTest": (
        "walledai/XSTest is gated on the Hugging Face Hub: accept its conditions at "
        "https://huggingface.co/datasets/walledai/XSTest while logged in, export HF_TOKEN and load it "
        "once online (it is then cached), or set benchmark.sets.xstest.path to the official "
        "xstest_prompts.csv of https://github.com/paul-rottger/xstest (not gated)."
    ),
}

__all__ = [
    "load_advbench",
    "load_attack_csv",
    "load_autodan_results",
    "load_jbb_artifact",
    "load_saferlhf",
    "load_toxic_chat",
    "load_xstest",
    "read_rows",
]


def read_rows(source: str | Path, split: str = "train", config: str | None = None) -> list[dict]:
    """Rows of a local table file or a hub dataset as a list of dicts.

    Raises:
        ValueError: on an unsupported file suffix or a JSON file that is not a list of records.
    """
    path = Path(str(source))
    if path.exists():
        suffix = path.suffix.lower()
        if suffix == ".csv":
            with open(path, newline="", encoding="utf-8") as f:
                return list(csv.DictReader(f))
        if suffix == ".jsonl":
            with open(path, encoding="utf-8") as f:
                return [json.loads(line) for line in f if line.strip()]
        if suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, list):
                raise ValueError(
                    f"{path}: expected a JSON list of records, got {type(data).__name__}"
                )
            return data
        if suffix == ".parquet":
            from datasets import load_dataset

            return list(load_dataset("parquet", data_files=str(path), split="train"))
        raise ValueError(f"unsupported data file {path} (use .csv, .json, .jsonl or .parquet)")
    from datasets import load_dataset

    try:
        return list(load_dataset(str(source), config, split=split))
    except Exception as err:  # gated: DatasetNotFoundError online, ConnectionError offline
        if str(source) in GATED:
            raise RuntimeError(f"{GATED[str(source)]} ({type(err).__name__}: {err})") from err
        raise


def _need(rows: list[dict], cols: set[str], what: str) -> None:
    if not rows:
        raise ValueError(f"{what}: no rows")
    missing = cols - set(rows[0])
    if missing:
        raise ValueError(f"{what}: missing column(s) {sorted(missing)}, got {sorted(rows[0])}")


def _truthy(v) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes")
    return bool(v)


def load_xstest(source: str | Path, split: str = "test") -> tuple[list[str], list[int]]:
    """XSTest calibration prompts and labels (1 = unsafe contrast prompt, 0 = safe).

    Uses the ``label`` column when present (v2 and ``walledai/XSTest``), else ``type`` starting with
    ``contrast_`` (the official code's rule). Threshold on the safe half (official ``train_probe.py``).

    Raises:
        ValueError: on missing columns or a label outside {safe, unsafe}.
    """
    rows = read_rows(source, split)
    _need(rows, {"prompt"}, "XSTest")
    if "label" in rows[0]:
        bad = {r["label"] for r in rows} - {"safe", "unsafe"}
        if bad:
            raise ValueError(f"XSTest label must be 'safe' or 'unsafe', got {sorted(bad)}")
        labels = [int(r["label"] == "unsafe") for r in rows]
    else:
        _need(rows, {"type"}, "XSTest (no label column)")
        labels = [int(str(r["type"]).startswith("contrast_")) for r in rows]
    return [r["prompt"] for r in rows], labels


def load_advbench(source: str | Path, limit: int | None = None) -> dict[str, AttackSet]:
    """AdvBench as ``{"direct": goals, "prefill": goals with the target after the header}``.

    Raises:
        ValueError: without a ``goal``/``prompt`` column or a ``target`` column.
    """
    rows = read_rows(source, "train")[:limit]
    key = "goal" if rows and "goal" in rows[0] else "prompt"
    _need(rows, {key, "target"}, "AdvBench")
    goals = [r[key] for r in rows]
    return {
        "direct": AttackSet(goals),
        "prefill": AttackSet(goals, "prefill", [r["target"] for r in rows]),
    }


def load_saferlhf(source: str | Path, cap: int = 4000) -> tuple[list[str], list[int]]:
    """The first ``cap`` PKU-SafeRLHF prompts; unsafe if either response is unsafe (repo rule)."""
    rows = read_rows(source, "train")[:cap]
    _need(rows, {"prompt", "is_response_0_safe", "is_response_1_safe"}, "PKU-SafeRLHF")
    labels = [
        int(not (_truthy(r["is_response_0_safe"]) and _truthy(r["is_response_1_safe"])))
        for r in rows
    ]
    return [r["prompt"] for r in rows], labels


def load_toxic_chat(
    source: str | Path,
    config: str | None = "toxicchat0124",
    cap_per_class: int = 1500,
    max_chars: int = 400,
) -> tuple[list[str], list[int]]:
    """toxic-chat prompts: drops jailbreaking rows and inputs over ``max_chars``; caps each class."""
    rows = read_rows(source, "train", config if not Path(str(source)).exists() else None)
    _need(rows, {"user_input", "toxicity", "jailbreaking"}, "toxic-chat")
    prompts, labels, count = [], [], {0: 0, 1: 0}
    for r in rows:
        if int(r["jailbreaking"]) == 1 or len(r["user_input"]) > max_chars:
            continue
        y = int(int(r["toxicity"]) == 1)
        if count[y] >= cap_per_class:
            continue
        count[y] += 1
        prompts.append(r["user_input"])
        labels.append(y)
    return prompts, labels


def load_jbb_artifact(path: str | Path) -> AttackSet:
    """A JailbreakBench artifact JSON (GCG, PAIR, ...) as an :class:`AttackSet`.

    When every ``prompt`` starts with its ``goal`` (GCG), the rest is the suffix (``attack_type=
    "suffix"``); otherwise the full prompt is the user turn (``"direct"``). Rows whose prompt is null
    (no jailbreak found) are skipped.

    Raises:
        ValueError: without a ``jailbreaks`` list or when no row has a prompt.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("jailbreaks"), list):
        raise ValueError(f"{path}: a JailbreakBench artifact needs a 'jailbreaks' list")
    rows = [r for r in data["jailbreaks"] if r.get("prompt")]
    if not rows:
        raise ValueError(f"{path}: no jailbreak row has a prompt")
    if all(r["prompt"].startswith(r["goal"]) for r in rows):
        return AttackSet(
            [r["goal"] for r in rows],
            "suffix",
            # the exact rest, leading space included: prompt == goal + suffix, as concatenated
            [r["prompt"][len(r["goal"]) :] for r in rows],
        )
    return AttackSet([r["prompt"] for r in rows])


def load_autodan_results(path: str | Path, placement: str = "user") -> AttackSet:
    """AutoDAN results JSON as an :class:`AttackSet` (both placements: AutoDAN's own user turn and the official SALO prefill).

    ``placement="user"`` (AutoDAN's own): the user turn is ``final_suffix`` with ``[REPLACE]`` filled by
    the lower-cased goal. ``placement="prefill"`` (the official SALO code): the goal is the user turn
    and the filled template is injected after the assistant header.

    Raises:
        ValueError: on an unknown placement or missing fields.
    """
    if placement not in ("user", "prefill"):
        raise ValueError(f"placement must be 'user' or 'prefill', got {placement!r}")
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    rows = list(data.values()) if isinstance(data, dict) else list(data)
    _need(rows, {"goal", "final_suffix"}, "AutoDAN results")
    goals = [r["goal"] for r in rows]
    filled = [r["final_suffix"].replace("[REPLACE]", r["goal"].lower()) for r in rows]
    if placement == "user":
        return AttackSet(filled)
    return AttackSet(goals, "prefill", filled)
