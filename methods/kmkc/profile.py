"""Multi-sample behavioural profile of one question (CGKE; paper Fig. 2).

Fig. 2 names the three parts (correctness pattern, response consistency, uncertainty trend); their
formulas here are our inference.

Correctness pattern (K-bit vector, p̂), response consistency (κ = modal-answer share, number of
distinct answers) and uncertainty trend (Ū, U over correct / wrong samples, ΔU).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import torch

from .metrics import check_golds, normalize_answer, qa_correct
from .signals import sequence_nll

logger = logging.getLogger(__name__)

K_PAPER = 16  # samples per query, paper §2


@dataclass
class SampleOut:
    """One sampled response with the log-probabilities of its answer tokens."""

    text: str
    token_logprobs: list[float]
    answer: str | None = None  # extracted short answer; defaults to the whole text
    entropy: float | None = None  # mean token entropy H̄ if the backend computed it


@dataclass
class BehaviorProfile:
    """Per-question profile; field names are our ``profile.jsonl`` schema."""

    question: str
    golds: list[str]
    answers: list[str]
    correct: list[bool]
    U: list[float]  # +inf for empty generations (excluded from the statistics)
    p_hat: float
    kappa: float
    n_distinct: int
    U_mean: float
    U_correct: float
    U_wrong: float
    id: str = ""
    n_empty: int = 0
    region: str | None = None
    region_source: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def delta_U(self) -> float:
        """ΔU = U_wrong − U_correct (NaN when either side is empty).

        Source: our inference (one statistic of the behavioural profile of the official
        ``assets/method.png``).
        """
        return self.U_wrong - self.U_correct

    @property
    def modal_answer(self) -> str:
        """The most frequent normalised non-empty answer ('' if all were empty).

        Source: our inference (response consistency of the profile in the official
        ``assets/method.png``).
        """
        valid = [a for a in self.answers if a]
        return Counter(valid).most_common(1)[0][0] if valid else ""

    def to_dict(self) -> dict:
        """The profile as a plain dict (its dataclass fields); engineering, not in the paper."""
        return asdict(self)


def _nanmean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if math.isfinite(x)]
    return sum(xs) / len(xs) if xs else float("nan")


def build_profile(
    question: str, golds: list[str], samples: Sequence[SampleOut], qid: str = ""
) -> BehaviorProfile:
    """Builds the behavioural profile of one question from K >= 2 sampled responses.

    Empty or whitespace-only generations count as wrong and get U = +inf, which is excluded from the
    U statistics (our choice); ``n_empty`` records how many.

    Raises:
        TypeError: if ``golds`` is not a list of strings (e.g. a bare string).
        ValueError: if K < 2, golds are empty, a non-empty sample lacks token log-probs, or every
            sample is empty.
    """
    golds = check_golds(golds)
    if not isinstance(question, str) or not question.strip():
        raise ValueError("question must be a non-empty string")
    samples = list(samples)
    if len(samples) < 2:
        raise ValueError(f"samples: need K >= 2 responses for consistency, got {len(samples)}")
    if len(samples) != K_PAPER:
        logger.debug("profiling with K=%d samples (paper: %d)", len(samples), K_PAPER)
    answers, correct, us = [], [], []
    for i, s in enumerate(samples):
        if not isinstance(s, SampleOut):
            raise TypeError(f"samples[{i}] must be a SampleOut, got {type(s).__name__}")
        ans = normalize_answer(s.answer if s.answer is not None else s.text)
        if not s.text.strip() or not ans:
            answers.append("")
            correct.append(False)
            us.append(math.inf)
            continue
        if not s.token_logprobs:
            raise ValueError(
                f"samples[{i}] has no token_logprobs; sample with log-probs enabled "
                "(vLLM: SamplingParams(logprobs=0); HF: common.generation.HFGenerator)"
            )
        lp = torch.tensor([s.token_logprobs], dtype=torch.float64)
        us.append(float(sequence_nll(lp, torch.ones_like(lp, dtype=torch.bool))[0]))
        answers.append(ans)
        correct.append(qa_correct(ans, golds))
    n_empty = sum(1 for a in answers if not a)
    if n_empty == len(samples):
        raise ValueError(f"all {len(samples)} samples for question {question!r} are empty")
    if n_empty:
        logger.warning("%d/%d empty generations for %r", n_empty, len(samples), question[:60])
    valid = [a for a in answers if a]
    counts = Counter(valid)
    k = len(samples)
    return BehaviorProfile(
        question=question,
        golds=golds,
        answers=answers,
        correct=correct,
        U=us,
        p_hat=sum(correct) / k,
        kappa=counts.most_common(1)[0][1] / k,
        n_distinct=len(counts),
        U_mean=_nanmean(us),
        U_correct=_nanmean([u for u, c in zip(us, correct, strict=True) if c]),
        U_wrong=_nanmean([u for u, c in zip(us, correct, strict=True) if not c]),
        id=qid,
        n_empty=n_empty,
    )
