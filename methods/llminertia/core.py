"""The LLMInertia inference pipeline: extract -> probe -> match -> remind -> answer.

Official code: THUMLP/LLMInertia ``scripts/vllm_infer_evidence_medical.py`` (``vllm_chain_multi_steps``,
``find_entity_pairs_in_input``, ``build_entity_pair_prompt``) and, for the plain baseline,
``evaluation/batch_vllm_infer_origin.sh`` on the ``*_input.jsonl`` files (bare input, no template).

Every step is one batched ``ChatLLM.chat_batch`` call over all inputs of a batch, so a batch of
``n`` inputs costs exactly three batched calls (``3 n`` conversations).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from common.llm import ChatLLM

from .parse import YesNo, parse_entity_list, parse_pairs, parse_yes_no
from .prompts import PromptSet

__all__ = [
    "InertiaRecord",
    "LLMInertiaPipeline",
    "build_note",
    "extract_entities",
    "match_pairs",
    "probe_associations",
]

logger = logging.getLogger(__name__)

MATCHERS = ("substring", "word_boundary", "fuzzy")
_STOPWORDS = frozenset(
    "the a an and or of in on at to for with is are was were be not no yes does do it this that".split()
)


def _user(content: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content}]


def _check_texts(texts: object, name: str = "texts") -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise TypeError(f"{name} must be a list of strings, got {type(texts).__name__}")
    if len(texts) == 0:
        raise ValueError(f"{name} must not be empty")
    for t in texts:
        if not isinstance(t, str):
            raise TypeError(f"{name} must contain strings, got {type(t).__name__}")
        if not t.strip():
            raise ValueError(f"{name} must not contain empty strings")
    return list(texts)


def extract_entities(
    llm: ChatLLM, texts: Sequence[str], prompts: PromptSet | None = None, **gen_kw: Any
) -> list[list[str]]:
    """Step 1: asks the model for the entities in each input (one batched call).

    Paper abstract (the framework "probes input-related cognitive inertia": first the input's
    entities); official code ``scripts/vllm_infer_evidence_medical.py`` (``vllm_chain_multi_steps``,
    first step).

    Args:
        llm: any ``common.llm.ChatLLM``.
        texts: inputs x (evidence + question).
        prompts: the prompt set (default: ``MEDICAL``).
        **gen_kw: passed to ``chat_batch`` (e.g. ``temperature=0``).

    Returns:
        One entity list per input (``parse_entity_list`` of the reply).

    Raises:
        ValueError: if ``texts`` is empty or holds an empty string.
    """
    from .prompts import MEDICAL

    texts = _check_texts(texts)
    p = prompts or MEDICAL
    replies = llm.chat_batch([_user(p.extract.format(text=t)) for t in texts], **gen_kw)
    return [parse_entity_list(r) for r in replies]


def probe_associations(
    llm: ChatLLM,
    entity_lists: Sequence[Sequence[str]],
    k: int = 3,
    prompts: PromptSet | None = None,
    dedup: bool = False,
    **gen_kw: Any,
) -> list[list[tuple[str, str]]]:
    """Step 2: asks the model which ``k`` entities it associates with each extracted entity.

    Paper abstract (probing the model itself for its co-occurrence associations); official code
    ``scripts/vllm_infer_evidence_medical.py`` (``vllm_chain_multi_steps``, second step).

    Inputs whose entity list is empty are not sent (their result is ``[]``); all others go in one
    batched call.

    Args:
        llm: any ``ChatLLM``.
        entity_lists: per input, the entities from step 1.
        k: associations requested per entity (paper: 3).
        prompts: the prompt set (default: ``MEDICAL``).
        dedup: passed to :func:`parse_pairs` (official: ``False``, every tuple kept).
        **gen_kw: passed to ``chat_batch``.

    Returns:
        Per input, the parsed ``(entity, associated)`` pairs in reply order.

    Raises:
        ValueError: if ``k < 1``.
    """
    from .prompts import MEDICAL

    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    p = prompts or MEDICAL
    todo = [i for i, ents in enumerate(entity_lists) if len(ents) > 0]
    out: list[list[tuple[str, str]]] = [[] for _ in entity_lists]
    if not todo:
        return out
    batch = [_user(p.probe.format(entities=", ".join(entity_lists[i]), k=k)) for i in todo]
    replies = llm.chat_batch(batch, **gen_kw)
    for i, r in zip(todo, replies, strict=True):
        out[i] = parse_pairs(r, dedup=dedup)
        if not out[i]:
            logger.warning("probe reply had no parsable (a, b) tuple: %r", r[:200])
    return out


def _usable(entity: str, min_len: int, stopwords: bool) -> bool:
    e = entity.strip().lower()
    return len(e) >= min_len and not (stopwords and e in _STOPWORDS)


def _contains(text: str, entity: str, matcher: str, fuzzy_threshold: float) -> bool:
    t, e = text.lower(), entity.strip().lower()
    if matcher == "substring":
        return e in t
    if matcher == "word_boundary":
        return re.search(r"(?<!\w)" + re.escape(e) + r"(?!\w)", t) is not None
    try:
        from rapidfuzz import fuzz  # optional dependency, only for matcher="fuzzy"
    except ImportError as err:
        raise ImportError(
            'matcher="fuzzy" needs rapidfuzz: pip install icml26[fuzzy] (or pip install rapidfuzz)'
        ) from err

    return fuzz.partial_ratio(e, t) >= fuzzy_threshold


def match_pairs(
    text: str,
    pairs: Sequence[tuple[str, str]],
    matcher: str = "substring",
    min_len: int = 0,
    fuzzy_threshold: float = 90.0,
    stopwords: bool = False,
    dedup: bool = False,
) -> list[tuple[str, str]]:
    """Step 3: keeps the probed pairs whose two entities both occur in ``text``.

    Official code ``scripts/vllm_infer_evidence_medical.py`` (``find_entity_pairs_in_input``); the
    ``word_boundary`` / ``fuzzy`` matchers and the pair filters are our inference (docs deviations).

    ``substring`` (official default) is a case-insensitive substring test, so "Cough" matches
    "Coughing"; ``word_boundary`` requires the entity as a whole word sequence; ``fuzzy`` uses
    ``rapidfuzz.fuzz.partial_ratio >= fuzzy_threshold``. The defaults reproduce the official
    ``find_entity_pairs_in_input``: every probed pair whose two (stripped) sides occur, in probe
    order, repeats included. This repository's earlier guard against spurious hits is
    ``min_len=3, stopwords=True, dedup=True``: entities shorter than ``min_len`` characters or that
    are stopwords never match, and duplicates (case-insensitive, either order) are kept once.

    Args:
        text: the input x.
        pairs: probed pairs from step 2.
        matcher: one of ``substring``, ``word_boundary``, ``fuzzy``.
        min_len: shortest entity allowed to match (0 = no limit, official).
        fuzzy_threshold: score in [0, 100] for ``fuzzy``.
        stopwords: reject entities that are English function words.
        dedup: keep each unordered pair once.

    Returns:
        Matched pairs in probe order.

    Raises:
        ValueError: on an unknown ``matcher``.
        TypeError: if ``text`` is not a string.
    """
    if matcher not in MATCHERS:
        raise ValueError(f"matcher must be one of {MATCHERS}, got {matcher!r}")
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    if isinstance(min_len, bool) or not isinstance(min_len, int) or min_len < 0:
        raise ValueError(f"min_len must be an int >= 0, got {min_len!r}")
    out: list[tuple[str, str]] = []
    seen: set[frozenset[str]] = set()
    for a, b in pairs:
        key = frozenset((a.strip().lower(), b.strip().lower()))
        if (dedup and key in seen) or not (
            _usable(a, min_len, stopwords) and _usable(b, min_len, stopwords)
        ):
            continue
        if _contains(text, a, matcher, fuzzy_threshold) and _contains(
            text, b, matcher, fuzzy_threshold
        ):
            seen.add(key)
            out.append((a.strip(), b.strip()))
    return out


def build_note(
    matched_pairs: Sequence[tuple[str, str]],
    prompts: PromptSet | None = None,
    dedup: bool = False,
) -> str:
    """Step 4: one pair reminder per matched pair, or the generic reminder if there is none.

    Paper abstract ("adaptive counter-inertial reminders ... injected into the prompt"); official
    code ``scripts/vllm_infer_evidence_medical.py`` (``build_entity_pair_prompt``).

    Official ``build_entity_pair_prompt`` joins one sentence per matched pair (repeats included);
    ``dedup=True`` writes each distinct sentence once.

    Args:
        matched_pairs: output of :func:`match_pairs`.
        prompts: the prompt set (default: ``MEDICAL``).
        dedup: drop repeated sentences.

    Returns:
        The note text injected into the answer prompt.
    """
    from .prompts import MEDICAL

    p = prompts or MEDICAL
    if not matched_pairs:
        return p.reminder_generic
    sentences: list[str] = []
    for a, b in matched_pairs:
        s = p.reminder_pair.format(a=a, b=b)
        if not dedup or s not in sentences:
            sentences.append(s)
    return " ".join(sentences)


@dataclass
class InertiaRecord:
    """One pipeline output (mirrors the repo's JSONL record, )."""

    prompt: str
    entities: list[str]
    pairs: list[tuple[str, str]]
    matched: list[tuple[str, str]]
    note: str
    augmented_input: str
    raw_answer: str
    predict: YesNo
    n_entities: int = 0
    truncated_pairs: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class LLMInertiaPipeline:
    """Training-free counter-inertial prompting.

    Args:
        llm: a ``ChatLLM`` used for all three steps (the repo uses one model).
        prompts: a :class:`PromptSet`.
        k: associations per entity in the probe.
        matcher: ``substring`` | ``word_boundary`` | ``fuzzy``.
        max_pairs: keep at most this many matched pairs (probe order) and warn; ``None`` = all.
        batch_size: inputs per step-synchronous batch (repo: 8).
        probe_llm: optional separate model for steps 1-2; defaults to ``llm`` (the official code
            uses one model).
        use_pair_notes: ``False`` gives the generic-note ablation (probing still runs).
        min_len, stopwords, dedup: pair filters of :func:`match_pairs` (``dedup`` also applies to
            :func:`parse_pairs` and :func:`build_note`); defaults = official (no filter).
        yes_no_rule: :func:`parse_yes_no` rule, ``"official"`` or ``"lenient"``.
        **gen_kw: passed to every ``chat_batch`` call.
    """

    def __init__(
        self,
        llm: ChatLLM,
        prompts: PromptSet | None = None,
        k: int = 3,
        matcher: str = "substring",
        max_pairs: int | None = None,
        batch_size: int = 8,
        probe_llm: ChatLLM | None = None,
        use_pair_notes: bool = True,
        min_len: int = 0,
        stopwords: bool = False,
        dedup: bool = False,
        yes_no_rule: str = "official",
        **gen_kw: Any,
    ) -> None:
        from .parse import YES_NO_RULES
        from .prompts import MEDICAL

        if matcher not in MATCHERS:
            raise ValueError(f"matcher must be one of {MATCHERS}, got {matcher!r}")
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        if max_pairs is not None and max_pairs < 1:
            raise ValueError(f"max_pairs must be None or >= 1, got {max_pairs!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
        if isinstance(min_len, bool) or not isinstance(min_len, int) or min_len < 0:
            raise ValueError(f"min_len must be an int >= 0, got {min_len!r}")
        if yes_no_rule not in YES_NO_RULES:
            raise ValueError(f"yes_no_rule must be one of {YES_NO_RULES}, got {yes_no_rule!r}")
        self.min_len = min_len
        self.stopwords = bool(stopwords)
        self.dedup = bool(dedup)
        self.yes_no_rule = yes_no_rule
        self.llm = llm
        self.probe_llm = probe_llm or llm
        self.prompts = prompts or MEDICAL
        self.k = k
        self.matcher = matcher
        self.max_pairs = max_pairs
        self.batch_size = batch_size
        self.use_pair_notes = use_pair_notes
        self.gen_kw = gen_kw

    def _run_batch(self, texts: list[str]) -> list[InertiaRecord]:
        ents = extract_entities(self.probe_llm, texts, self.prompts, **self.gen_kw)
        pairs = probe_associations(
            self.probe_llm, ents, self.k, self.prompts, dedup=self.dedup, **self.gen_kw
        )
        matched_all, notes, truncs = [], [], []
        for t, ps in zip(texts, pairs, strict=True):
            m = (
                match_pairs(
                    t, ps, self.matcher, self.min_len, stopwords=self.stopwords, dedup=self.dedup
                )
                if self.use_pair_notes
                else []
            )
            trunc = self.max_pairs is not None and len(m) > self.max_pairs
            if trunc:
                logger.warning(
                    "%d matched pairs > max_pairs=%d; truncating", len(m), self.max_pairs
                )
                m = m[: self.max_pairs]
            matched_all.append(m)
            truncs.append(trunc)
            notes.append(build_note(m, self.prompts, dedup=self.dedup))
        prompts = [
            self.prompts.answer.format(question=t, note=n)
            for t, n in zip(texts, notes, strict=True)
        ]
        answers = self.llm.chat_batch([_user(p) for p in prompts], **self.gen_kw)
        return [
            InertiaRecord(
                prompt=t,
                entities=e,
                pairs=ps,
                matched=m,
                note=n,
                augmented_input=p,
                raw_answer=a,
                predict=parse_yes_no(a, self.yes_no_rule),
                n_entities=len(e),
                truncated_pairs=tr,
            )
            for t, e, ps, m, n, p, a, tr in zip(
                texts, ents, pairs, matched_all, notes, prompts, answers, truncs, strict=True
            )
        ]

    def run(self, texts: Sequence[str]) -> list[InertiaRecord]:
        """Runs the pipeline on ``texts`` in step-synchronous batches of ``batch_size``.

        Official code ``scripts/vllm_infer_evidence_medical.py`` (``vllm_chain_multi_steps``: extract,
        probe, match + remind, answer, each step batched over the inputs).

        Raises:
            ValueError: if ``texts`` is empty or contains an empty string.
        """
        texts = _check_texts(texts)
        out: list[InertiaRecord] = []
        for s in range(0, len(texts), self.batch_size):
            out.extend(self._run_batch(texts[s : s + self.batch_size]))
        return out


def answer_plain(
    llm: ChatLLM,
    texts: Sequence[str],
    prompts: PromptSet | None = None,
    note: str | None = None,
    yes_no_rule: str = "official",
    **kw: Any,
) -> list[YesNo]:
    """Baselines: one batched answer call per input.

    Official code ``evaluation/batch_vllm_infer_origin.sh`` (plain: the bare input); the generic-note
    arm uses the same answer template as step 4 (official ``scripts/vllm_infer_evidence_*.py``).

    ``note=None`` is the official plain baseline: the bare input is the whole user message
    (``batch_vllm_infer_origin.sh`` on ``explicit_test_1000_input.jsonl``, whose instruction is
    empty). A string puts the input into the answer template with that note: ``""`` is this
    repository's earlier "plain" (template, empty note), ``prompts.reminder_generic`` the
    generic-reminder baseline.
    """
    from .prompts import MEDICAL

    texts = _check_texts(texts)
    if note is not None and not isinstance(note, str):
        raise TypeError(f"note must be None or str, got {type(note).__name__}")
    p = prompts or MEDICAL
    msgs = [t if note is None else p.answer.format(question=t, note=note) for t in texts]
    replies = llm.chat_batch([_user(m) for m in msgs], **kw)
    return [parse_yes_no(r, yes_no_rule) for r in replies]
