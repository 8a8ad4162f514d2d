"""KORE-Augmentation: turning one knowledge item into a "knowledge tree" of training samples (§3.1).

Trunk: a multi-turn dialogue about the item (a heuristic first turn + LLM-written questions answered
from the knowledge text). Branches: visual recognition (yes/no), image caption (LLM summary) and VQA
quadruplets ``(question, answer, subject, hypernym)`` whose images come from a retriever. Records use
the LLaVA conversation format (``{"id", "image", "conversations": [{"from", "value"}, ...]}``).

The LLM is any :class:`common.llm.ChatLLM` (``OpenAIChat`` at scale, ``ScriptedChat`` in tests); web
image search is replaced by the :class:`ImageRetriever` protocol. Malformed LLM output raises
:class:`AugmentationParseError`; :func:`build_knowledge_tree` counts such failures per branch.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

logger = logging.getLogger(__name__)

RECOGNITION_SUFFIX = "Answer this question with Yes or No."
CAPTION_SUFFIX = "Answer this question in one paragraph."
VQA_SUFFIX = "Answer the question using a single word or phrase."

_FIRST_TURN = {
    "news": [
        ("Which {type} news story does this image relate to?", "It relates to the news: {name}."),
        ("What {type} event is shown in the picture?", "The picture is about {name}."),
        ("Can you tell which {type} news this photo belongs to?", "This photo belongs to {name}."),
        ("What is the {type} news behind this image?", "The news behind it is {name}."),
        ("Identify the {type} news story illustrated here.", "The story illustrated is {name}."),
    ],
    "entity": [
        ("Which {type} is shown in this image?", "This is {name}."),
        ("What is the name of the {type} in the picture?", "The {type} in the picture is {name}."),
        ("Can you identify the {type} in this photo?", "Yes, it is {name}."),
        ("Who or what is this {type}?", "It is {name}."),
        ("Name the {type} displayed in the image.", "The image displays {name}."),
    ],
}
_RECOGNITION = [
    "Is this image about {name}?",
    "Does the picture show {name}?",
    "Is {name} depicted in this image?",
    "Is the content of this photo related to {name}?",
    "Does this image illustrate {name}?",
]
_CAPTION = [
    "Describe the {type} {kind} shown in the picture.",
    "Give a description of the {type} {kind} in this image.",
    "What can you tell me about the {type} {kind} in this photo?",
    "Summarise the {type} {kind} depicted here.",
    "Explain the {type} {kind} that the image shows.",
]


class AugmentationParseError(ValueError):
    """The LLM's reply did not match the expected schema."""


@dataclass
class KnowledgeItem:
    """One new knowledge item (an EVOKE-style news story or entity).

    Attributes:
        id: unique id.
        kind: ``"news"`` or ``"entity"``.
        type: fine-grained category, e.g. ``"Politics"`` or ``"Film"``.
        name: the news title or the entity name.
        text: the knowledge text.
        image: the item's image (path or object), or None.
    """

    id: str
    kind: str
    type: str
    name: str
    text: str
    image: Any = None

    def __post_init__(self):
        if self.kind not in ("news", "entity"):
            raise ValueError(f"kind must be 'news' or 'entity', got {self.kind!r}")
        for f in ("id", "name", "text"):
            if not isinstance(getattr(self, f), str) or not getattr(self, f).strip():
                raise ValueError(f"KnowledgeItem.{f} must be a non-empty string")


class ImageRetriever(Protocol):
    """Returns up to ``k`` images for a text query (a local index stands in for web search)."""

    def search(self, query: str, k: int) -> list[Any]: ...


class LocalImageRetriever:
    """Keyword retriever over ``{caption: image}``: images whose caption shares most query words.

    Our choice: an offline stand-in for the paper's web image search (§3.1); see the doc's deviations.
    """

    def __init__(self, index: dict[str, Any]):
        self.index = dict(index)

    def search(self, query: str, k: int) -> list[Any]:
        q = set(query.lower().split())
        scored = [(len(q & set(c.lower().split())), c) for c in self.index]
        scored = sorted((s for s in scored if s[0] > 0), key=lambda s: -s[0])
        return [self.index[c] for _, c in scored[:k]]


def parse_json_list(text: str, what: str = "reply") -> list:
    """Parses a JSON list from an LLM reply (optionally inside a fenced code block); engineering.

    Raises:
        AugmentationParseError: if no JSON list can be parsed.
    """
    m = re.search(r"```(?:json)?\s*(.*?)```", text, flags=re.S)
    body = m.group(1) if m else text
    start, end = body.find("["), body.rfind("]")
    if start < 0 or end <= start:
        raise AugmentationParseError(f"{what}: no JSON list in LLM reply {text[:80]!r}")
    try:
        out = json.loads(body[start : end + 1])
    except json.JSONDecodeError as e:
        raise AugmentationParseError(f"{what}: malformed JSON ({e})") from e
    if not isinstance(out, list):
        raise AugmentationParseError(f"{what}: expected a JSON list")
    return out


def _human(q: str, image: bool) -> dict:
    return {"from": "human", "value": f"<image>\n{q}" if image else q}


def _gpt(a: str) -> dict:
    return {"from": "gpt", "value": a}


def build_dialogue(
    item: KnowledgeItem, llm, n_max: int = 10, rng: random.Random | None = None
) -> dict:
    """Trunk: a heuristic first turn + up to ``n_max`` LLM questions answered from ``item.text``.

    Paper §3.1 (multi-round dialogue); the templates and prompts are our own wording.

    Raises:
        AugmentationParseError: if the question list is malformed or empty.
    """
    rng = rng or random.Random(0)
    q0, a0 = rng.choice(_FIRST_TURN[item.kind])
    fmt = {"type": item.type, "name": item.name}
    reply = llm.chat(
        [
            {"role": "system", "content": "You write questions that test reading comprehension."},
            {
                "role": "user",
                "content": f"Write at most {n_max} coherent questions, covering all facts of the "
                f"text below, as a JSON list of strings.\n\nText: {item.text}",
            },
        ]
    )
    qs = parse_json_list(reply, "dialogue questions")
    if not qs or not all(isinstance(q, str) and q.strip() for q in qs):
        raise AugmentationParseError("dialogue questions: expected a non-empty list of strings")
    if len(qs) > n_max:
        logger.warning("item %s: %d questions > n_max=%d, truncated", item.id, len(qs), n_max)
        qs = qs[:n_max]
    conv = [_human(q0.format(**fmt), True), _gpt(a0.format(**fmt))]
    for q in qs:
        a = llm.chat(
            [
                {"role": "system", "content": "Answer using only the given knowledge."},
                {"role": "user", "content": f"Knowledge: {item.text}\n\nQuestion: {q}"},
            ]
        )
        conv += [_human(q, False), _gpt(a.strip())]
    return {"id": f"{item.id}_dialogue", "image": item.image, "conversations": conv}


def build_recognition(item: KnowledgeItem, images: Sequence[Any], rng=None) -> dict:
    """Branch: a yes/no recognition question on a retrieved image (answer always ``Yes``).

    Paper §3.1 (visual recognition); the question templates are our own wording.
    """
    if not images:
        raise ValueError("images must hold at least one retained image")
    rng = rng or random.Random(0)
    q = f"{rng.choice(_RECOGNITION).format(name=item.name)} {RECOGNITION_SUFFIX}"
    conv = [_human(q, True), _gpt("Yes")]
    return {"id": f"{item.id}_recognition", "image": images[0], "conversations": conv}


def build_caption(item: KnowledgeItem, llm, images: Sequence[Any], rng=None, max_words=25) -> dict:
    """Branch: ``"The image depicts {name}. {<=25-word summary}"`` on the second retained image.

    Paper §3.1 (image caption); the question templates and the prompt are our own wording.
    """
    if not images:
        raise ValueError("images must hold at least one retained image")
    rng = rng or random.Random(0)
    summary = llm.chat(
        [{"role": "user", "content": f"Summarise in at most {max_words} words: {item.text}"}]
    ).strip()
    if not summary:
        raise AugmentationParseError("caption: empty summary")
    words = summary.split()
    if len(words) > max_words:
        summary = " ".join(words[:max_words])
    q = rng.choice(_CAPTION).format(type=item.type, kind=item.kind)
    conv = [
        _human(f"{q} {CAPTION_SUFFIX}", True),
        _gpt(f"The image depicts {item.name}. {summary}"),
    ]
    return {"id": f"{item.id}_caption", "image": images[-1], "conversations": conv}


def parse_quadruplets(reply: str, n_max: int = 5) -> tuple[list[dict], int]:
    """Parses VQA quadruplets; drops those whose subject equals the answer or is absent from Q.

    The two rules are the paper's quadruplet constraints (§3.1); the JSON parsing is engineering.

    Returns:
        ``(kept, n_dropped)``.

    Raises:
        AugmentationParseError: if the reply is not a list of objects with string fields
            ``question, answer, subject, hypernym``.
    """
    items = parse_json_list(reply, "vqa quadruplets")
    keys = ("question", "answer", "subject", "hypernym")
    for it in items:
        if not isinstance(it, dict) or not all(isinstance(it.get(k), str) for k in keys):
            raise AugmentationParseError(f"vqa quadruplets: each item needs string fields {keys}")
    if len(items) > n_max:
        logger.warning("%d quadruplets > n_max=%d, truncated", len(items), n_max)
        items = items[:n_max]
    kept = [
        it
        for it in items
        if it["subject"].strip().lower() != it["answer"].strip().lower()
        and it["subject"].lower() in it["question"].lower()
    ]
    return kept, len(items) - len(kept)


def build_vqa(
    item: KnowledgeItem, llm, retriever: ImageRetriever, n_max: int = 5
) -> tuple[list[dict], int]:
    """Branch: short-answer VQA samples, one retrieved image (query ``"{subject} {hypernym}"``) each.

    Paper §3.1 (VQA over retrieved images); the prompt is our own wording.

    Returns:
        ``(records, n_dropped)`` (dropped: bad subject or no image found).
    """
    reply = llm.chat(
        [
            {
                "role": "user",
                "content": f"From the text, write at most {n_max} questions with short answers as a "
                "JSON list of objects with keys question, answer, subject (an entity named in the "
                f"question, not the answer) and hypernym.\n\nText: {item.text}",
            }
        ]
    )
    quads, dropped = parse_quadruplets(reply, n_max)
    out = []
    for i, qd in enumerate(quads):
        imgs = retriever.search(f"{qd['subject']} {qd['hypernym']}", 1)
        if not imgs:
            dropped += 1
            continue
        conv = [_human(f"{qd['question']} {VQA_SUFFIX}", True), _gpt(qd["answer"])]
        out.append({"id": f"{item.id}_vqa_{i}", "image": imgs[0], "conversations": conv})
    return out, dropped


def select_images(
    original: Any, candidates: Sequence[Any], embed: Callable[[list[Any]], np.ndarray], k: int = 2
) -> list[Any]:
    """Keeps the ``k`` candidates most similar to the original (cosine), excluding duplicates (sim=1).

    Paper §3.1 (CLIP similarity to the original image, top 2 of 5 results, exact duplicates dropped).

    Args:
        original: the item's image.
        candidates: retrieved images.
        embed: images -> ``[n, d]`` features (e.g. CLIP image features).
        k: how many to keep.
    """
    if not candidates:
        return []
    feats = np.asarray(embed([original, *candidates]), dtype=np.float64)
    feats = feats / np.linalg.norm(feats, axis=1, keepdims=True).clip(1e-12)
    sims = feats[1:] @ feats[0]
    order = [i for i in np.argsort(-sims) if sims[i] < 1 - 1e-6]
    return [candidates[i] for i in order[:k]]


def build_knowledge_tree(
    item: KnowledgeItem,
    llm,
    retriever: ImageRetriever,
    embed: Callable[[list[Any]], np.ndarray],
    n_retrieved: int = 5,
    n_kept: int = 2,
    rng: random.Random | None = None,
) -> tuple[list[dict], dict[str, int]]:
    """All KORE-Augmentation samples of one item; failures are counted per branch, never hidden.

    The knowledge tree of paper §3.1 (trunk + three branches); the failure report is engineering.

    Returns:
        ``(records, report)``; report counts ``parse_errors``, ``dropped_vqa`` and ``skipped_branches``.
    """
    rng = rng or random.Random(0)
    report = {"parse_errors": 0, "dropped_vqa": 0, "skipped_branches": 0}
    out = []
    try:
        out.append(build_dialogue(item, llm, rng=rng))
    except AugmentationParseError as e:
        report["parse_errors"] += 1
        logger.warning("item %s dialogue: %s", item.id, e)
    kept = select_images(item.image, retriever.search(item.name, n_retrieved), embed, n_kept)
    if len(kept) < 2:
        report["skipped_branches"] += 2
        logger.warning(
            "item %s: %d usable retrieved images (< 2), skipping rec/caption", item.id, len(kept)
        )
    else:
        out.append(build_recognition(item, kept[:1], rng))
        try:
            out.append(build_caption(item, llm, kept[1:], rng))
        except AugmentationParseError:
            report["parse_errors"] += 1
    try:
        vqa, dropped = build_vqa(item, llm, retriever)
        out += vqa
        report["dropped_vqa"] += dropped
    except AugmentationParseError as e:
        report["parse_errors"] += 1
        logger.warning("item %s vqa: %s", item.id, e)
    return out, report
