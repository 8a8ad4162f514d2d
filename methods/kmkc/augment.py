"""Region-specific data augmentation and the CGKE SFT set (paper Fig. 2).

Fig. 2 names the strategies (Boundary Expansion, Structural Disambiguation, Epistemic Foundation);
the procedures and prompts are our inference.

mastered → boundary expansion (harder neighbouring questions, kept only if the generator answers them
consistently); confused → structural disambiguation (an explanation that separates the gold answer
from the wrong answers the model actually gave); missing → epistemic foundation (a background
statement that establishes the fact, then the answer). The generator always sees the gold answer, so
the content stays grounded. Prompts and the JSON reply format are ours (the paper's are unknown).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .metrics import qa_correct
from .profile import BehaviorProfile
from .regions import REGIONS

logger = logging.getLogger(__name__)

STRATEGIES = {
    "mastered": "boundary_expansion",
    "confused": "structural_disambiguation",
    "missing": "epistemic_foundation",
}


@dataclass
class AugmentConfig:
    """Knobs of the CGKE augmentation (all our inference).

    Attributes:
        n_mastered / n_confused / n_missing: new items per question of each region.
        keep_original: also keep the seed (question, gold) pair for every region.
        consistency_checks: greedy re-asks a boundary-expansion item must pass (0 disables the filter).
        max_retries: extra attempts after an unparsable generator reply.
        max_drop_frac: abort when more than this share of questions yields no usable augmentation.
        qa_template: user turn of every SFT item; ``{question}`` is substituted.
        answer_template: assistant turn; ``{rationale}`` (may be empty) and ``{answer}`` substituted.
    """

    n_mastered: int = 2
    n_confused: int = 2
    n_missing: int = 2
    keep_original: bool = True
    consistency_checks: int = 2
    max_retries: int = 2
    max_drop_frac: float = 0.2
    qa_template: str = (
        "Answer the following question. End with a line 'Answer: <short answer>'.\n"
        "Question: {question}"
    )
    answer_template: str = "{rationale}Answer: {answer}"

    def __post_init__(self) -> None:
        for name in ("n_mastered", "n_confused", "n_missing", "consistency_checks", "max_retries"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.max_drop_frac <= 1.0:
            raise ValueError(f"max_drop_frac must be in [0, 1], got {self.max_drop_frac}")
        if "{question}" not in self.qa_template:
            raise ValueError("qa_template must contain '{question}'")
        if "{answer}" not in self.answer_template:
            raise ValueError("answer_template must contain '{answer}'")


def sft_messages(question: str, answer: str, rationale: str, cfg: AugmentConfig) -> list[dict]:
    """One chat-format SFT item (user: QA prompt, assistant: optional rationale + answer).

    Source: our inference (the paper's SFT prompt format is not public).
    """
    rat = rationale.strip()
    target = cfg.answer_template.format(rationale=f"{rat}\n" if rat else "", answer=answer)
    return [
        {"role": "user", "content": cfg.qa_template.format(question=question)},
        {"role": "assistant", "content": target.strip()},
    ]


_JSON_LIST = re.compile(r"\[.*\]", re.DOTALL)


def _parse_list(reply: str, keys: Sequence[str]) -> list[dict] | None:
    m = _JSON_LIST.search(reply or "")
    if m is None:
        return None
    try:
        obj = json.loads(m.group(0))
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, list):
        return None
    good = [
        o
        for o in obj
        if isinstance(o, dict) and all(isinstance(o.get(k), str) and o[k].strip() for k in keys)
    ]
    return good or None


def _ask(llm: Any, prompt: str, keys: Sequence[str], cfg: AugmentConfig) -> list[dict] | None:
    msgs = [{"role": "user", "content": prompt}]
    for _ in range(cfg.max_retries + 1):
        try:
            reply = llm.chat(msgs)
        except Exception as err:  # noqa: BLE001 - a failed call counts like a malformed reply
            logger.debug("augmentation call failed: %s", err)
            continue
        items = _parse_list(reply, keys)
        if items is not None:
            return items
    return None


def _record(p: BehaviorProfile, region: str, strategy: str, messages: list[dict]) -> dict:
    return {"id": p.id, "region": region, "strategy": strategy, "messages": messages}


def augment_boundary_expansion(
    llm: Any, p: BehaviorProfile, n: int, cfg: AugmentConfig | None = None
) -> list[dict] | None:
    """Mastered → harder neighbouring questions with answers (self-consistency filtered).

    Paper Fig. 2 ("Boundary Expansion"); the procedure and prompt are our inference.

    Returns None when the generator never produced a parsable reply (the caller counts a drop).
    """
    cfg = cfg or AugmentConfig()
    if n == 0:
        return []
    prompt = (
        f"Known fact. Question: {p.question}\nAnswer: {p.golds[0]}\n"
        f"Write {n} harder neighbouring questions that build on this fact (compose it with a related "
        "fact, ask it in reverse, or paraphrase it with distracting context), each with its short "
        'answer. Reply with a JSON list only: [{"question": "...", "answer": "..."}].'
    )
    items = _ask(llm, prompt, ("question", "answer"), cfg)
    if items is None:
        return None
    out = []
    for it in items[:n]:
        ok = all(
            qa_correct(llm.chat([{"role": "user", "content": it["question"]}]), [it["answer"]])
            for _ in range(cfg.consistency_checks)
        )
        if ok:
            msgs = sft_messages(it["question"], it["answer"], "", cfg)
            out.append(_record(p, "mastered", STRATEGIES["mastered"], msgs))
    return out


def augment_structural_disambiguation(
    llm: Any, p: BehaviorProfile, n: int, cfg: AugmentConfig | None = None
) -> list[dict] | None:
    """Confused → explanations that separate the gold answer from the model's own wrong answers.

    Paper Fig. 2 ("Structural Disambiguation"); the procedure and prompt are our inference.
    """
    cfg = cfg or AugmentConfig()
    if n == 0:
        return []
    wrong = sorted({a for a, c in zip(p.answers, p.correct, strict=True) if a and not c})
    prompt = (
        f"Question: {p.question}\nCorrect answer: {p.golds[0]}\n"
        f"Answers that were given wrongly: {', '.join(wrong) or '(none)'}\n"
        f"Write {n} short explanations, each naming the attribute that makes the correct answer "
        "right and the wrong ones wrong. Reply with a JSON list only: "
        '[{"explanation": "..."}].'
    )
    items = _ask(llm, prompt, ("explanation",), cfg)
    if items is None:
        return None
    return [
        _record(
            p,
            "confused",
            STRATEGIES["confused"],
            sft_messages(p.question, p.golds[0], it["explanation"], cfg),
        )
        for it in items[:n]
    ]


def augment_epistemic_foundation(
    llm: Any, p: BehaviorProfile, n: int, cfg: AugmentConfig | None = None
) -> list[dict] | None:
    """Missing → a background statement establishing the fact, then a QA item that restates it.

    Paper Fig. 2 ("Epistemic Foundation"); the procedure and prompt are our inference.
    """
    cfg = cfg or AugmentConfig()
    if n == 0:
        return []
    prompt = (
        f"Question: {p.question}\nCorrect answer: {p.golds[0]}\n"
        f"Write {n} concise background statements that establish this fact, each with a question "
        "it answers. Reply with a JSON list only: "
        '[{"background": "...", "question": "..."}].'
    )
    items = _ask(llm, prompt, ("background", "question"), cfg)
    if items is None:
        return None
    return [
        _record(
            p,
            "missing",
            STRATEGIES["missing"],
            sft_messages(it["question"], p.golds[0], it["background"], cfg),
        )
        for it in items[:n]
    ]


AUGMENTERS = {
    "mastered": augment_boundary_expansion,
    "confused": augment_structural_disambiguation,
    "missing": augment_epistemic_foundation,
}


def build_cgke_dataset(
    profiles: Sequence[BehaviorProfile],
    llm: Any,
    cfg: AugmentConfig | None = None,
    return_stats: bool = False,
):
    """The CGKE SFT set: region-specific augmentations (+ the seed pairs), as a ``datasets.Dataset``.

    Source: the official method figure ``assets/method.png`` (region-specific augmentation, SFT);
    the mixing with seed pairs is our inference.

    Columns ``id``, ``region``, ``strategy`` (``original`` for seed pairs) and ``messages`` (chat
    format, our ``cgke_sft.jsonl`` schema).

    Args:
        profiles: profiles with ``region`` set (see :func:`methods.kmkc.assign_regions`).
        llm: the augmentation generator (a :class:`common.llm.ChatLLM`).
        cfg: counts per region and templates.
        return_stats: also return ``{"dropped/<region>": n, "items/<strategy>": n}``.

    Raises:
        ValueError: if a profile has no valid region, or more than ``max_drop_frac`` of the
            questions yield no parsable augmentation.
    """
    import datasets

    cfg = cfg or AugmentConfig()
    if not profiles:
        raise ValueError("profiles must be non-empty")
    n_per = {"mastered": cfg.n_mastered, "confused": cfg.n_confused, "missing": cfg.n_missing}
    rows: list[dict] = []
    dropped = dict.fromkeys(REGIONS, 0)
    for i, p in enumerate(profiles):
        if p.region not in REGIONS:
            raise ValueError(
                f"profiles[{i}].region must be one of {REGIONS}, got {p.region!r}; "
                "run assign_regions first"
            )
        if cfg.keep_original:
            rows.append(
                _record(p, p.region, "original", sft_messages(p.question, p.golds[0], "", cfg))
            )
        new = AUGMENTERS[p.region](llm, p, n_per[p.region], cfg)
        if new is None:
            dropped[p.region] += 1
        else:
            rows.extend(new)
    n_drop = sum(dropped.values())
    if n_drop:
        logger.warning("augmentation: %d/%d questions dropped %s", n_drop, len(profiles), dropped)
    if n_drop > cfg.max_drop_frac * len(profiles):
        raise ValueError(
            f"{n_drop}/{len(profiles)} questions got no parsable augmentation (> max_drop_frac="
            f"{cfg.max_drop_frac}); check the generator's replies"
        )
    ds = datasets.Dataset.from_list(rows)
    if not return_stats:
        return ds
    stats = {f"dropped/{r}": float(v) for r, v in dropped.items()}
    for r in rows:
        key = f"items/{r['strategy']}"
        stats[key] = stats.get(key, 0.0) + 1.0
    return ds, stats
