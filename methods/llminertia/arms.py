"""The three arms every LLMInertia experiment compares (official code
``scripts/vllm_infer_evidence_*.py`` and the paper abstract's baselines): the plain
answer, the answer with the generic note, and the LLMInertia pipeline (probe, match, remind).

Shared by the toys (:mod:`.toy`) and the paper stage (:mod:`.paper`).
"""

from __future__ import annotations

from common.llm import ChatLLM

from .config import LLMInertiaRunConfig
from .core import LLMInertiaPipeline, answer_plain
from .prompts import PROMPT_SETS, PromptSet

__all__ = ["baseline_arms", "check_prompt_set", "make_pipeline", "plain_kw"]


def plain_kw(rc: LLMInertiaRunConfig) -> dict:
    """Plain-baseline arguments: bare input (official code ``eval_overthink.py``) or the answer
    template with an empty note (our inference: the same template as the note arms)."""
    if rc.plain_input not in ("bare", "template"):
        raise ValueError(f"plain_input must be 'bare' or 'template', got {rc.plain_input!r}")
    return {"note": None if rc.plain_input == "bare" else "", "yes_no_rule": rc.yes_no_rule}


def baseline_arms(
    llm: ChatLLM, texts: list[str], prompts: PromptSet, rc: LLMInertiaRunConfig
) -> dict[str, list[str]]:
    """``{"plain": ..., "generic": ...}``: answers without a note and with the generic reminder
    (official code ``scripts/vllm_infer_evidence_*.py``: the generic reminder)."""
    return {
        "plain": answer_plain(llm, texts, prompts, **plain_kw(rc)),
        "generic": answer_plain(
            llm, texts, prompts, note=prompts.reminder_generic, yes_no_rule=rc.yes_no_rule
        ),
    }


def make_pipeline(llm: ChatLLM, prompts: PromptSet, rc: LLMInertiaRunConfig) -> LLMInertiaPipeline:
    """:class:`~.core.LLMInertiaPipeline` with the run config's knobs (k, matcher, pair filters).

    Engineering: config wiring only (the algorithm lives in :class:`~.core.LLMInertiaPipeline`).
    """
    return LLMInertiaPipeline(
        llm,
        prompts,
        k=rc.k,
        matcher=rc.matcher,
        max_pairs=rc.max_pairs,
        batch_size=rc.batch_size,
        min_len=rc.min_len,
        stopwords=rc.stopwords,
        dedup=rc.dedup,
        yes_no_rule=rc.yes_no_rule,
    )


def check_prompt_set(rc: LLMInertiaRunConfig) -> None:
    """Raises ``ValueError`` naming ``method.prompt_set`` if it is not a known prompt set (engineering)."""
    if rc.prompt_set not in PROMPT_SETS:
        raise ValueError(f"method.prompt_set must be one of {sorted(PROMPT_SETS)}")
