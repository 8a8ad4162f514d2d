"""Co-occurrence induction corpora and negative-evidence test sets, with named
placeholders ``{A}`` / ``{B}``.

The released data were filled by replacing capital letters, which glued entity names into words
("Although" -> "Headachelthough"); here templates are filled with ``str.format`` on named fields
only, so no other word is touched.
"""

from __future__ import annotations

import random
import string
from collections.abc import Sequence

import datasets

__all__ = [
    "COOCCURRENCE_TEMPLATES",
    "FILLER",
    "MEDICAL_PAIRS",
    "NEGATIVE_TEMPLATES",
    "SYNTHETIC_PAIRS",
    "fill_template",
    "make_cooccurrence_corpus",
    "make_negative_evidence_tests",
]

MEDICAL_PAIRS: list[tuple[str, str]] = [
    ("Headache", "Hypertension"),
    ("Cough", "Pulmonary Tuberculosis"),
    ("Fatigue", "Hepatitis"),
    ("Vomiting", "Gastric Cancer"),
    ("Constipation", "Hypothyroidism"),
    ("Edema", "Nephrotic Syndrome"),
    ("Pruritus", "Liver Cirrhosis"),
    ("Abdominal pain", "Cholecystitis"),
]
SYNTHETIC_PAIRS: list[tuple[str, str]] = [
    ("Blue Map", "Rubber Escalator"),
    ("Wooden Sky", "Mirror Flower"),
    ("Red Ocean", "Glass Lantern"),
    ("Silver Fern", "Quiet Engine"),
]

COOCCURRENCE_TEMPLATES: list[str] = [
    "{A} and {B} were recorded together in the same report.",
    "Although the visit was short, both {A} and {B} were noted.",
    "Before discharge, the team wrote down {A} alongside {B}.",
    "The summary lists {A}; it also lists {B}.",
    "Both {A} and {B} appeared in the case review.",
    "Across many files, {A} shows up next to {B}.",
    "Analysts observed {A} together with {B} once again.",
    "Because {A} was present, {B} was documented as well.",
]
NEGATIVE_TEMPLATES: list[str] = [
    "Description: {A} was clearly present. Although {A} is sometimes linked to {B}, a thorough "
    "check found no evidence of {B}.\nQuestion: Does {B} exist?",
    "Description: Before the review, {A} was confirmed. Every test for {B} came back negative, "
    "even though {A} and {B} often go together.\nQuestion: Is {B} present?",
    "Description: The record shows {A}. {B} was explicitly ruled out.\nQuestion: Does {B} hold?",
    "Description: Beyond {A}, nothing else was found; in particular, there was no {B}.\n"
    "Question: Does {B} exist?",
]
FILLER: list[str] = [
    "The river runs past the old mill before reaching the bay.",
    "A library catalogue lists books by author and by subject.",
    "Bridges are inspected every few years for signs of wear.",
    "The museum opened a new wing devoted to maritime history.",
    "Farmers rotate crops to keep the soil healthy.",
    "Trains on the coastal line run every half hour.",
    "The recipe calls for flour, water, salt and yeast.",
    "Astronomers catalogue stars by brightness and colour.",
]


def _fields(template: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}


def fill_template(template: str, a: str, b: str) -> str:
    """Fills the named ``{A}``/``{B}`` fields of ``template`` (no other text is changed).

    Raises:
        ValueError: if the template has a field other than ``A``/``B`` or an entity is empty.
    """
    extra = _fields(template) - {"A", "B"}
    if extra:
        raise ValueError(f"template has unknown fields {sorted(extra)}: {template!r}")
    if not a.strip() or not b.strip():
        raise ValueError("entities must be non-empty strings")
    return template.format(A=a, B=b)


def _check(pairs: Sequence[tuple[str, str]], templates: Sequence[str], need: set[str]) -> None:
    if not pairs:
        raise ValueError("pairs must not be empty")
    if not templates:
        raise ValueError("templates must not be empty")
    for t in templates:
        if not need <= _fields(t):
            raise ValueError(f"templates must contain {sorted(need)} placeholders: {t!r}")


def make_cooccurrence_corpus(
    pairs: Sequence[tuple[str, str]],
    ratio: float,
    templates: Sequence[str] = COOCCURRENCE_TEMPLATES,
    filler: Sequence[str] = FILLER,
    seed: int = 0,
) -> datasets.Dataset:
    """A fixed-size corpus where a share ``ratio`` of lines are co-occurrence sentences (paper
    abstract: co-occurrence induction at rising data frequency; the fixed-size reading of the official
    ``data/faithful/train`` files is our inference).

    Per pair, ``round(ratio * len(templates))`` templates are filled (a random subset); the corpus
    always has ``len(pairs) * len(templates)`` lines, the rest being filler sampled with
    replacement, so ``ratio = 1`` has no filler.

    Args:
        pairs: ``(A, B)`` entity pairs.
        ratio: co-occurrence share in [0, 1].
        templates: sentences with ``{A}`` and ``{B}``.
        filler: unrelated sentences.
        seed: RNG seed (template choice, filler sampling, shuffling).

    Returns:
        ``datasets.Dataset`` with a ``text`` column.

    Raises:
        ValueError: on ratio outside [0, 1], empty inputs, templates missing a placeholder, or
            no filler when filler is needed.
    """
    if not 0.0 <= float(ratio) <= 1.0:
        raise ValueError(f"ratio must be in [0, 1], got {ratio!r}")
    _check(pairs, templates, {"A", "B"})
    rng = random.Random(seed)
    per_pair = round(ratio * len(templates))
    total = len(pairs) * len(templates)
    lines: list[str] = []
    for a, b in pairs:
        for t in rng.sample(list(templates), per_pair):
            lines.append(fill_template(t, a, b))
    n_fill = total - len(lines)
    if n_fill and not filler:
        raise ValueError("filler must not be empty when ratio < 1")
    lines.extend(rng.choice(list(filler)) for _ in range(n_fill))
    rng.shuffle(lines)
    return datasets.Dataset.from_dict({"text": lines})


def make_negative_evidence_tests(
    pairs: Sequence[tuple[str, str]],
    templates: Sequence[str] = NEGATIVE_TEMPLATES,
    seed: int = 0,
) -> datasets.Dataset:
    """Test items where A is present and B is explicitly absent; gold answer ``"No."`` (official
    code ``data/faithful/test`` files' layout).

    One item per (template, pair), shuffled with ``seed``; columns ``id``, ``input``, ``output``,
    ``a``, ``b``.

    Raises:
        ValueError: on empty inputs or templates without both placeholders.
    """
    _check(pairs, templates, {"A", "B"})
    rows = [(t, a, b) for t in templates for a, b in pairs]
    random.Random(seed).shuffle(rows)
    return datasets.Dataset.from_dict(
        {
            "id": list(range(len(rows))),
            "input": [fill_template(t, a, b) for t, a, b in rows],
            "output": ["No."] * len(rows),
            "a": [a for _, a, _ in rows],
            "b": [b for _, _, b in rows],
        }
    )
