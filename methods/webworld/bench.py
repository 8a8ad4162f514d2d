"""WebWorld-Bench judge metrics (paper §4, App. N.3) and the evaluation driver.

* **Factuality** (pointwise): a judge LLM sees the history, the action, the prediction and the real
  next state and returns JSON ``{"reasoning", "action_effect_accuracy_score"}`` on the rubric
  1.0 / 0.7 / 0.4 / 0.0; the score is clamped to ``[0, 1]``.
* **Web Turing** (pairwise): prediction and real state are shown as A/B in a random order; the
  judge picks the one it believes is real. Score 1 if it picks the prediction (a perfect simulator
  averages about 0.5).
* ``total = (fact + turing) / 2`` per sample. Judge failures (exception, unparsable output, a
  ``choice`` outside A/B) score 0 and are counted: the error rates are reported with the scores.

The judge prompts are our own wording (``JUDGE_PROMPTS``); exact upstream wording can be passed in.
The bench files and their readers are in :mod:`methods.webworld.bench_data`.
The ``bench`` stage (:func:`methods.webworld.paper.bench_stage`) drives it from the CLI.
"""

from __future__ import annotations

import json
import logging
import random
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from methods.webworld.bench_data import (
    BenchSample,
    load_bench_file,
    load_bench_jsonl,
    load_official_eval,
)

logger = logging.getLogger(__name__)

__all__ = [
    "DIMENSIONS",
    "JUDGE_PROMPTS",
    "BenchSample",
    "JudgeResult",
    "aggregate",
    "evaluate",
    "factuality",
    "load_bench_file",
    "load_bench_jsonl",
    "load_official_eval",
    "parse_judge_json",
    "web_turing",
]

DIMENSIONS = (
    "long",
    "base",
    "fine_grained",
    "multi_tab",
    "xml",
    "html",
    "markdown",
    "playwright",
    "Web2NAL",
)

JUDGE_PROMPTS = {
    "factuality": (
        "You grade a web-page simulator. Below are the interaction so far, the last action, the "
        "simulator's predicted next page and the real next page.\n\nHistory:\n{traj}\n\nAction: "
        "{action}\n\nPredicted next page:\n{pred}\n\nReal next page:\n{gt}\n\nScore how well the "
        "prediction shows the main effect of the action: 1.0 if the main effect is present, 0.7 if "
        "it is mostly present but clearly incomplete, 0.4 if the right kind of element was acted on "
        "but the effect is largely wrong, 0.0 if the main effect is absent. Answer with JSON only: "
        '{{"reasoning": "...", "action_effect_accuracy_score": <number>}}'
    ),
    "factuality_web2nal": (
        "You grade a description of what an action changed on a web page.\n\nHistory:\n{traj}\n\n"
        "Action: {action}\n\nCandidate description:\n{pred}\n\nReference description:\n{gt}\n\n"
        "Score completeness: 1.0 complete, 0.7 mostly complete, 0.4 partly right, 0.0 wrong. "
        'Answer with JSON only: {{"reasoning": "...", "action_effect_accuracy_score": <number>}}'
    ),
    "turing": (
        "One of two page states is what a real browser showed after the action; the other was "
        "generated.\n\nHistory:\n{traj}\n\nAction: {action}\n\nObservation A:\n{a}\n\n"
        "Observation B:\n{b}\n\nWhich observation is the real browser result? Answer with JSON "
        'only: {{"reasoning": "...", "choice": "A" or "B"}}'
    ),
    "turing_web2nal": (
        "Two descriptions of what an action changed on a web page.\n\nHistory:\n{traj}\n\n"
        "Action: {action}\n\nDescription A:\n{a}\n\nDescription B:\n{b}\n\nWhich one is more "
        'plausible? Answer with JSON only: {{"reasoning": "...", "choice": "A" or "B"}}'
    ),
}


@dataclass
class JudgeResult:
    """One judged sample: ``score`` (0 on failure), ``error`` (None if fine) and the raw reply."""

    score: float
    error: str | None = None
    raw: str = ""
    reasoning: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)
_OBJ = re.compile(r"\{.*\}", re.S)


def parse_judge_json(text: str) -> Any:
    """Parses a judge reply leniently: plain JSON, fenced JSON, the first ``{...}`` span, then
    ``json_repair`` if it is installed.

    Source: paper App. N.3 (judge replies JSON); the lenient fallbacks are
    our choice.

    Raises:
        ValueError: if nothing parses.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    cands = [text.strip()]
    cands += [m.group(1).strip() for m in _FENCE.finditer(text)]
    cands += [m.group(0) for m in _OBJ.finditer(text)]
    for c in cands:
        try:
            return json.loads(c)
        except (json.JSONDecodeError, ValueError):
            continue
    try:  # optional dependency (paper §4, App. N.3 uses it); not required
        import json_repair  # type: ignore[import-not-found]

        out = json_repair.loads(text)
        if out not in ("", None, [], {}):
            return out
    except ImportError:
        pass
    raise ValueError(f"judge reply is not JSON: {text[:120]!r}")


def _ask(judge: Any, prompt: str, **kw: Any) -> str:
    return judge.chat([{"role": "user", "content": prompt}], **kw)


def factuality(
    judge: Any,
    traj_str: str,
    action: str,
    pred: str,
    gt: str,
    web2nal: bool = False,
    prompts: dict[str, str] | None = None,
    **judge_kw: Any,
) -> JudgeResult:
    """Pointwise Factuality score of one prediction (paper App. N.3), clamped to ``[0, 1]``.

    A reply that is a bare number is taken as the score; failures give score 0 with ``error`` set.
    """
    tpl = (prompts or JUDGE_PROMPTS)["factuality_web2nal" if web2nal else "factuality"]
    try:
        raw = _ask(judge, tpl.format(traj=traj_str, action=action, pred=pred, gt=gt), **judge_kw)
    except Exception as e:  # noqa: BLE001 - any judge failure scores 0 and is counted
        return JudgeResult(0.0, error=f"judge call failed: {type(e).__name__}: {e}")
    try:
        obj = parse_judge_json(raw)
        if isinstance(obj, dict):
            val, reasoning = obj["action_effect_accuracy_score"], str(obj.get("reasoning", ""))
        else:
            val, reasoning = obj, ""
        if isinstance(val, bool):
            raise TypeError("boolean score")
        score = float(val)
        if score != score:
            raise ValueError("NaN score")
    except (ValueError, KeyError, TypeError) as e:
        return JudgeResult(0.0, error=f"unparsable judge reply: {e}", raw=raw)
    return JudgeResult(min(max(score, 0.0), 1.0), raw=raw, reasoning=reasoning)


def web_turing(
    judge: Any,
    traj_str: str,
    action: str,
    pred: str,
    gt: str,
    rng: random.Random,
    web2nal: bool = False,
    prompts: dict[str, str] | None = None,
    **judge_kw: Any,
) -> JudgeResult:
    """Pairwise Web Turing score: 1 if the judge takes the prediction for the real page, else 0.

    §4 / App. N.3. A/B order drawn from ``rng`` (uniform); ``extra``: ``pred_slot``, ``choice``.
    """
    if not isinstance(rng, random.Random):
        raise TypeError(f"rng must be a random.Random, got {type(rng).__name__}")
    pred_slot = "A" if rng.random() < 0.5 else "B"
    a, b = (pred, gt) if pred_slot == "A" else (gt, pred)
    tpl = (prompts or JUDGE_PROMPTS)["turing_web2nal" if web2nal else "turing"]
    extra = {"pred_slot": pred_slot}
    try:
        raw = _ask(judge, tpl.format(traj=traj_str, action=action, a=a, b=b), **judge_kw)
    except Exception as e:  # noqa: BLE001
        return JudgeResult(0.0, error=f"judge call failed: {type(e).__name__}: {e}", extra=extra)
    try:
        obj = parse_judge_json(raw)
        choice = str(obj["choice"] if isinstance(obj, dict) else obj).strip().strip("'\"").upper()
    except (ValueError, KeyError, TypeError) as e:
        return JudgeResult(0.0, error=f"unparsable judge reply: {e}", raw=raw, extra=extra)
    if choice not in ("A", "B"):
        return JudgeResult(
            0.0, error=f"choice must be A or B, got {choice!r}", raw=raw, extra=extra
        )
    extra["choice"] = choice
    reasoning = str(obj.get("reasoning", "")) if isinstance(obj, dict) else ""
    return JudgeResult(float(choice == pred_slot), raw=raw, reasoning=reasoning, extra=extra)


def aggregate(
    fact: Sequence[JudgeResult], turing: Sequence[JudgeResult], truncated: Sequence[bool] = ()
) -> dict[str, float]:
    """Means of Factuality, Web Turing and ``total = (fact + turing) / 2`` (§4), plus error rates.

    Source: paper Section 4 (Factuality, Web Turing and their mean).
    """
    if len(fact) != len(turing):
        raise ValueError(f"fact and turing must have equal length, got {len(fact)}, {len(turing)}")
    if not fact:
        raise ValueError("fact must not be empty")
    f = [r.score for r in fact]
    t = [r.score for r in turing]
    out = {
        "factuality": statistics.mean(f),
        "turing": statistics.mean(t),
        "total": statistics.mean((x + y) / 2 for x, y in zip(f, t, strict=True)),
        "fact_error_rate": sum(r.error is not None for r in fact) / len(fact),
        "turing_error_rate": sum(r.error is not None for r in turing) / len(turing),
        "n": float(len(fact)),
    }
    if truncated:
        out["truncated_rate"] = sum(map(bool, truncated)) / len(truncated)
    return out


def _traj_str(context: list[dict]) -> str:
    return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in context if m["role"] != "system")


def evaluate(
    world_model: Any,
    samples: Iterable[BenchSample],
    judge: Any,
    seed: int = 0,
    batch_size: int = 8,
    judge_kw: dict | None = None,
    temperature: float = 0.7,
    top_p: float = 0.8,
    max_new_tokens: int = 8192,
) -> dict[str, dict[str, float]]:
    """Runs a world model (a ``Generator``, or any ``ChatLLM``) on bench samples and judges every
    prediction.

    Source: paper Section 4 and App. N.3; official ``core/tasks/web_wm.py``.

    Sampling defaults are the upstream bench's (``config/model_config.yaml``: temperature 0.7, top_p
    0.8, 8192 tokens); a ``ChatLLM`` world model uses the settings it was built with.

    Returns:
        ``{dim: metrics}`` with an ``all`` entry; metrics from :func:`aggregate`.
    """
    from methods.webworld.prompts import strip_reasoning

    samples = list(samples)
    if not samples:
        raise ValueError("samples must not be empty")
    rng = random.Random(seed)
    preds: list[str] = []
    trunc: list[bool] = []
    for i in range(0, len(samples), batch_size):
        chunk = samples[i : i + batch_size]
        convs = [s.context for s in chunk]
        if hasattr(world_model, "generate"):
            from common.generation import SamplingParams

            params = SamplingParams(
                max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed + i
            )
            outs = world_model.generate(convs, n=1, params=params)
            preds += [strip_reasoning(o[0].text) for o in outs]
            trunc += [o[0].finish_reason == "length" for o in outs]
        else:
            preds += [strip_reasoning(t) for t in world_model.chat_batch(convs)]
            trunc += [False] * len(chunk)
    by_dim: dict[str, tuple[list, list, list]] = {}
    for s, p, tr in zip(samples, preds, trunc, strict=True):
        w = s.dim == "Web2NAL"
        ts = s.traj if s.traj is not None else _traj_str(s.context)
        f = factuality(judge, ts, s.action, p, s.gt, web2nal=w, **(judge_kw or {}))
        t = web_turing(judge, ts, s.action, p, s.gt, rng, web2nal=w, **(judge_kw or {}))
        for key in (s.dim, "all"):
            by_dim.setdefault(key, ([], [], []))
            by_dim[key][0].append(f)
            by_dim[key][1].append(t)
            by_dim[key][2].append(tr)
    return {k: aggregate(*v) for k, v in by_dim.items()}
