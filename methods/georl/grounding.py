"""Grounding quality q(c, v) in (0, 1] for the DPP kernel.

The abstract says grounding is preserved; how it is scored is our inference.

Quality enters the L-ensemble as ``diag(q^gamma)`` so that a description cannot buy volume with
content that is not in the image. :class:`FactPrecision` is the toy/CPU score (precision of the
mentioned facts); :class:`ClipSentenceGrounding` is the real-image score: a calibrated sigmoid of the
sentence-level CLIP image-text cosine, loaded through ``transformers`` (not open_clip, which needs
torchvision). :func:`repetition_rate` is our reward-hacking guard (not in the abstract).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from methods.georl.embed import split_sentences

logger = logging.getLogger(__name__)

__all__ = ["ClipSentenceGrounding", "FactPrecision", "KeywordGrounding", "repetition_rate"]


def repetition_rate(text: str, n: int = 3) -> float:
    """Share of word n-grams in ``text`` that repeat an earlier n-gram (0 for short texts).

    Source: our inference (repetitive captions must not buy volume); not in the paper.

    The repetition guard of ours (docs/methods/georl.md, Deviations: "Empty text, repetitive text")."""
    words = text.lower().split()
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


class FactPrecision:
    """Toy grounding: ``q = |mentioned ∩ true| / |mentioned|`` over fact ids (toy; our construction).

    Args:
        n_facts: Fact ids are ``0..n_facts-1``; any other id (e.g. the GENERIC token) is not a fact.
        generic_quality: Quality of a caption that mentions no fact at all (our default 0.2).
    """

    def __init__(self, n_facts: int, generic_quality: float = 0.2) -> None:
        if not 0 < generic_quality <= 1:
            raise ValueError(f"generic_quality must lie in (0, 1], got {generic_quality}")
        self.n_facts = n_facts
        self.generic_quality = generic_quality

    def mentions(self, ids: Tensor) -> Tensor:
        """``ids`` ``[..., S]`` -> multi-hot of mentioned facts ``[..., n_facts]`` (bool).

        Source: our choice (toy grounding by facts), not in the paper.
        """
        hot = torch.zeros(*ids.shape[:-1], self.n_facts + 1, dtype=torch.bool, device=ids.device)
        hot.scatter_(-1, ids.long().clamp(max=self.n_facts), True)
        return hot[..., : self.n_facts]

    def __call__(self, ids: Tensor, true_facts: Tensor) -> Tensor:
        """Precision ``[...]`` of captions ``ids [..., S]`` against ``true_facts [..., n_facts]``."""
        ment = self.mentions(ids)  # [..., F]
        n_ment = ment.sum(-1)
        n_true = (ment & true_facts.bool()).sum(-1)
        prec = n_true.double() / n_ment.clamp(min=1).double()
        return torch.where(n_ment == 0, torch.full_like(prec, self.generic_quality), prec)


class ClipSentenceGrounding:
    """Real-image grounding (our inference): ``q = mean_s sigmoid((cos(v, s) - tau) / T_q)``.

    Sentences respect CLIP's 77-token window. ``tau`` should be calibrated once as the median CLIP
    cosine of true captions (e.g. COCO) for the chosen model.

    Args:
        model: A ``transformers`` ``CLIPModel`` (or any model with ``get_image_features`` /
            ``get_text_features``).
        processor: Its ``CLIPProcessor`` (tokenizer + image processor).
        tau: Calibration threshold on the cosine.
        temperature: ``T_q``.
        q_min: Floor for the returned quality.
    """

    def __init__(
        self,
        model: Any,
        processor: Any,
        tau: float = 0.25,
        temperature: float = 0.02,
        q_min: float = 0.05,
    ) -> None:
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.model, self.processor = model, processor
        self.tau, self.temperature, self.q_min = tau, temperature, q_min

    @staticmethod
    def _features(out: Any) -> Tensor:
        # transformers 5 may return a ModelOutput with pooler_output instead of a tensor.
        return out if isinstance(out, Tensor) else out.pooler_output

    @torch.no_grad()
    def __call__(self, texts: Sequence[str], image: Any) -> Tensor:
        """Quality ``[n]`` of ``texts`` for one PIL ``image`` (empty texts get ``q_min``)."""
        if image is None:
            raise ValueError("image must be a PIL image, got None (missing or unreadable file)")
        img_in = self.processor(images=image, return_tensors="pt")
        img = self._features(self.model.get_image_features(pixel_values=img_in["pixel_values"]))
        img = torch.nn.functional.normalize(img.float(), dim=-1)  # [1, D]
        out = torch.full((len(texts),), self.q_min, dtype=torch.float64)
        for i, text in enumerate(texts):
            sents = split_sentences(text)
            if not sents:
                continue
            tok = self.processor(text=sents, return_tensors="pt", padding=True, truncation=True)
            txt = self._features(
                self.model.get_text_features(
                    input_ids=tok["input_ids"], attention_mask=tok["attention_mask"]
                )
            )
            cos = torch.nn.functional.normalize(txt.float(), dim=-1) @ img[0]  # [S]
            q = torch.sigmoid((cos - self.tau) / self.temperature).mean().item()
            out[i] = max(q, self.q_min)
        return out


class KeywordGrounding:
    """Text-only grounding stand-in for the tiny-LM trainer run (not in the paper).

    ``q`` = share of a completion's words (3+ letters) that occur in the row's ``facts`` texts,
    floored at ``q_min``; a TRL reward function ``(prompts, completions, facts, **kw) -> list``.

    Args:
        q_min: Floor (and the value for a completion with no words).
    """

    __name__ = "georl_keyword_grounding"

    def __init__(self, q_min: float = 0.05) -> None:
        self.q_min = q_min

    def __call__(self, prompts: list, completions: list, facts: list, **kwargs: Any) -> list[float]:
        from methods.georl.trainer import completion_text

        out = []
        for comp, row_facts in zip(completions, facts):
            vocab = {w for f in row_facts for w in f.lower().split() if len(w) >= 3}
            words = [w.strip(".,;:!?") for w in completion_text(comp).lower().split()]
            words = [w for w in words if len(w) >= 3]
            prec = sum(w in vocab for w in words) / len(words) if words else 0.0
            out.append(max(prec, self.q_min))
        return out
