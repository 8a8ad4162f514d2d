"""Style-consistent rationale synthesis for reasoning-native targets (the paper's
rationale synthesis, known from secondary notes; section number not verified).

For each selected step, the target model is shown the normal agent prompt plus a hint naming the
gold action, and asked to think about why that action is right and then output it. The generated
``<think>`` text replaces the expert rationale when the model's ``<action>`` equals the gold action
(after normalising whitespace and quotes); otherwise it is resampled, and after ``max_tries`` the
expert rationale is kept and a failure counted. The hint never enters the emitted training prompt.

The paper's prompt and decoding settings are unpublished; the hint wording is ours (docs/methods/weasel.md).
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["SynthStats", "SynthesisConfig", "normalize_action", "synthesize_rationales"]

logger = logging.getLogger(__name__)

_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL)


@dataclass
class SynthesisConfig:
    """Settings of rationale synthesis (paper, via secondary notes; hint wording and tries are our choice)."""

    hint: str = (
        "The correct next action is {action}. Think about why it is correct, then output it as "
        "<action>{action}</action>."
    )
    max_tries: int = 5  # 1 + 4 resamples (paper, via secondary notes)
    temperature: float = 0.6  # paper, via secondary notes
    top_p: float = 0.95
    max_new_tokens: int = 1024

    def __post_init__(self) -> None:
        if self.max_tries < 1:
            raise ValueError(f"max_tries must be >= 1, got {self.max_tries}")
        if "{action}" not in self.hint:
            raise ValueError("hint must contain the placeholder {action}")


@dataclass
class SynthStats:
    """Counts of accepted samples, rejections by reason, and fallbacks to the expert rationale."""

    accepted: int = 0
    rejected_missing_tags: int = 0
    rejected_changed_action: int = 0
    rejected_empty_rationale: int = 0
    synthesis_failed: int = 0
    skipped_no_action: int = 0

    @property
    def rejection_rate(self) -> float:
        rej = self.rejected_missing_tags + self.rejected_changed_action
        rej += self.rejected_empty_rationale
        return rej / max(rej + self.accepted, 1)


def normalize_action(action: str) -> str:
    """Whitespace removed and double quotes turned into single quotes, for the equality check.

    Source: our choice (the paper's action check in rationale synthesis is not released).
    """
    return re.sub(r"\s+", "", action).replace('"', "'")


def synthesize_rationales(
    records: Sequence[dict], llm, cfg: SynthesisConfig | None = None
) -> tuple[list[dict], SynthStats]:
    """Replaces each record's expert rationale with one written by ``llm`` (the paper's rationale synthesis).

    Args:
        records: chat records ``{"messages": [system, user, assistant]}``; the assistant text is
            ``<think>…</think><action>…</action>``.
        llm: a ``common.llm.ChatLLM`` (``chat(messages, **kw) -> str``); for Qwen3 pass an
            ``OpenAIChat`` on ``vllm serve`` with thinking enabled.
        cfg: synthesis settings.

    Returns:
        ``(new records, stats)``; the prompts are unchanged (no hint), the action is byte-identical.
    """
    cfg = cfg or SynthesisConfig()
    stats = SynthStats()
    out = []
    for rec in records:
        new = copy.deepcopy(rec)
        msgs = new["messages"]
        asst = msgs[-1]["content"]
        gold = _ACTION.search(asst)
        if gold is None:
            stats.skipped_no_action += 1
            out.append(new)
            continue
        action = gold.group(1).strip()
        query = [dict(m) for m in msgs[:-1]]
        query[-1]["content"] = query[-1]["content"] + "\n\n" + cfg.hint.format(action=action)
        rationale = None
        for _ in range(cfg.max_tries):
            reply = llm.chat(
                query,
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                max_new_tokens=cfg.max_new_tokens,
            )
            think, act = _THINK.search(reply), _ACTION.search(reply)
            if think is None or act is None:
                stats.rejected_missing_tags += 1
            elif normalize_action(act.group(1)) != normalize_action(action):
                stats.rejected_changed_action += 1
            elif not think.group(1).strip():
                stats.rejected_empty_rationale += 1
            else:
                rationale = think.group(1).strip()
                stats.accepted += 1
                break
        if rationale is None:
            stats.synthesis_failed += 1
        else:
            msgs[-1]["content"] = f"<think>{rationale}</think><action>{action}</action>"
        out.append(new)
    if stats.synthesis_failed:
        logger.warning(
            "rationale synthesis fell back to the expert rationale %d time(s)",
            stats.synthesis_failed,
        )
    return out, stats
