"""Meta-cognitive region assignment (CGKE; paper Fig. 2: meta-cognitive self-evaluation).

The self-evaluation prompt and the deterministic rule fallback are our inference: the paper shows
the components in Fig. 2 but gives neither prompt nor thresholds.

The model judges its own knowledge state from its behavioural profile (self-evaluation); a
deterministic rule is the fallback whenever the reply cannot be used. Both the rule's thresholds
and the prompt are inferred (the paper's are not available) and configurable.
"""

from __future__ import annotations

import json
import logging
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .profile import BehaviorProfile

logger = logging.getLogger(__name__)

Region = Literal["mastered", "confused", "missing"]
REGIONS: tuple[str, ...] = ("mastered", "confused", "missing")

SELF_EVAL_SYSTEM = (
    "You will judge your own knowledge of a question from how you answered it before. "
    "Regions: 'mastered' = you answer it correctly and consistently; 'confused' = you hold "
    "related but conflicting or unstable knowledge (some correct answers, or one stable wrong "
    "belief); 'missing' = you lack the knowledge (wrong and scattered answers). "
    'Reply with strict JSON only: {"region": "mastered"|"confused"|"missing", '
    '"rationale": "<one sentence>"}.'
)


@dataclass
class RegionConfig:
    """Thresholds of the rule fallback (our inference; the paper has no rule).

    Attributes:
        mastered_threshold: p̂ at or above which a question is mastered.
        stable_kappa: modal-answer share at or above which an all-wrong question holds a stable
            (wrong) belief.
        stable_u_max: Ū at or below which that belief counts as confident; our default is the
            median Ū over the dataset (:func:`assign_regions` fills it). None: no Ū condition.
        max_new_tokens: budget of the self-evaluation reply (greedy).
    """

    mastered_threshold: float = 0.75
    stable_kappa: float = 0.5
    stable_u_max: float | None = None
    max_new_tokens: int = 128

    def __post_init__(self) -> None:
        if not 0.0 < self.mastered_threshold <= 1.0:
            raise ValueError(f"mastered_threshold must be in (0, 1], got {self.mastered_threshold}")
        if not 0.0 < self.stable_kappa <= 1.0:
            raise ValueError(f"stable_kappa must be in (0, 1], got {self.stable_kappa}")


def rule_region(p: BehaviorProfile, cfg: RegionConfig | None = None) -> Region:
    """Deterministic region rule (our fallback for Fig. 2's self-evaluation).

    mastered if p̂ ≥ τ_m; confused if 0 < p̂ < τ_m, or p̂ = 0 with a stable wrong belief
    (κ ≥ κ_s and Ū ≤ U_max); missing otherwise. Depends only on counts and means, so it is invariant
    to the order of the samples.
    """
    cfg = cfg or RegionConfig()
    if p.p_hat >= cfg.mastered_threshold:
        return "mastered"
    if p.p_hat > 0:
        return "confused"
    confident = cfg.stable_u_max is None or (
        math.isfinite(p.U_mean) and p.U_mean <= cfg.stable_u_max
    )
    if p.kappa >= cfg.stable_kappa and confident:
        return "confused"
    return "missing"


def self_eval_messages(p: BehaviorProfile) -> list[dict[str, str]]:
    """The self-evaluation conversation for one profile (wording is ours; the paper's is unknown).

    Source: our inference (the official ``assets/method.png`` names meta-cognitive self-evaluation;
    its prompt is not public).
    """
    lines = [
        f"Question: {p.question}",
        f"Reference answer: {' / '.join(p.golds)}",
        f"Your {len(p.answers)} earlier answers:",
    ]
    for i, (a, c, u) in enumerate(zip(p.answers, p.correct, p.U, strict=True)):
        u_txt = f"{u:.3f}" if math.isfinite(u) else "n/a"
        lines.append(f"{i + 1}. {a or '(empty)'} [{'correct' if c else 'incorrect'}, U={u_txt}]")
    lines.append(
        f"Accuracy {p.p_hat:.3f}; modal-answer share {p.kappa:.3f}; mean uncertainty "
        f"{p.U_mean:.3f}. Which region does this question fall in?"
    )
    return [
        {"role": "system", "content": SELF_EVAL_SYSTEM},
        {"role": "user", "content": "\n".join(lines)},
    ]


_JSON_OBJ = re.compile(r"\{.*?\}", re.DOTALL)


def parse_region_reply(reply: str) -> Region | None:
    """The region in a self-evaluation reply, or None if the reply is malformed or unknown.

    Source: our inference (strict-JSON reply format of ours), not in the paper.
    """
    if not isinstance(reply, str):
        return None
    for m in _JSON_OBJ.finditer(reply):
        try:
            obj = json.loads(m.group(0))
        except json.JSONDecodeError:
            continue
        region = obj.get("region") if isinstance(obj, dict) else None
        if isinstance(region, str) and region.strip().lower() in REGIONS:
            return region.strip().lower()  # type: ignore[return-value]
        return None
    return None


def self_evaluate_region(
    llm: Any, p: BehaviorProfile, cfg: RegionConfig | None = None
) -> tuple[Region, str]:
    """Meta-cognitive self-evaluation with the rule fallback (Fig. 2; prompt our inference).

    Args:
        llm: a :class:`common.llm.ChatLLM` (the model itself in the paper's setting).
        p: the question's profile.
        cfg: thresholds for the fallback.

    Returns:
        ``(region, source)`` with source ``"self_eval"`` or ``"rule"`` (malformed JSON, unknown label,
        empty reply or a failed call).
    """
    cfg = cfg or RegionConfig()
    try:
        reply = llm.chat(self_eval_messages(p), max_new_tokens=cfg.max_new_tokens, temperature=0.0)
    except Exception as err:  # noqa: BLE001 - any client failure falls back to the rule
        logger.debug("self-evaluation call failed (%s); using the rule", err)
        reply = None
    region = parse_region_reply(reply) if reply is not None else None
    if region is None:
        return rule_region(p, cfg), "rule"
    return region, "self_eval"


def assign_regions(
    profiles: Sequence[BehaviorProfile], cfg: RegionConfig | None = None, llm: Any = None
) -> dict[str, float]:
    """Assigns a region to every profile in place; returns counts and the fallback rate.

    Fills ``cfg.stable_u_max`` with the median Ū over the dataset when it is None (our inference).
    Without ``llm`` the rule alone is used. Fallbacks are counted (``parse_failures``) and summarised
    in one warning.
    """
    if not profiles:
        raise ValueError("profiles must be non-empty")
    cfg = RegionConfig(**vars(cfg)) if cfg is not None else RegionConfig()
    if cfg.stable_u_max is None:
        finite = [p.U_mean for p in profiles if math.isfinite(p.U_mean)]
        cfg.stable_u_max = statistics.median(finite) if finite else None
    failures = 0
    for p in profiles:
        if llm is None:
            p.region, p.region_source = rule_region(p, cfg), "rule"
            continue
        p.region, p.region_source = self_evaluate_region(llm, p, cfg)
        failures += p.region_source == "rule"
    if llm is not None and failures:
        logger.warning(
            "self-evaluation: %d/%d replies unusable, rule fallback used", failures, len(profiles)
        )
    out = {f"n_{r}": float(sum(p.region == r for p in profiles)) for r in REGIONS}
    out["parse_failures"] = float(failures)
    out["stable_u_max"] = float(cfg.stable_u_max) if cfg.stable_u_max is not None else math.nan
    return out
