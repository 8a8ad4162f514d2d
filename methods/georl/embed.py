"""The semantic space phi of Geo-RL: frozen, unit-norm text embeddings.

The abstract names a semantic space; the encoder and the pooling are our choices.

Two embedders implement :class:`TextEmbedder`. :class:`MiniLMEmbedder` wraps the offline MiniLM
sentence-transformer (through ``common.embeddings.Embedder``) and embeds long captions sentence by
sentence, mean-pooling and re-normalising, so nothing is silently truncated at the encoder window.
:class:`BagOfFactsEmbedder` is the toy/CI space: an L2-normalised multi-hot over a fixed phrase
vocabulary. Empty or whitespace-only texts map to a fixed unit ``EMPTY`` vector (our inference).
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor

logger = logging.getLogger(__name__)

__all__ = ["BagOfFactsEmbedder", "MiniLMEmbedder", "TextEmbedder", "split_sentences"]

_SENTENCE_RE = re.compile(r"(?<=[.!?;])\s+|\n+")


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into non-empty sentences at ``. ! ?`` / ``;`` boundaries and newlines.

    For the sentence-chunked embedding and grounding (our inference, docs/methods/georl.md,
    Deviations: "Semantic space")."""
    return [s.strip() for s in _SENTENCE_RE.split(text) if s and s.strip()]


@runtime_checkable
class TextEmbedder(Protocol):
    """Maps texts to unit-norm embeddings ``[n, d]`` (float tensor)."""

    def encode(self, texts: Sequence[str]) -> Tensor:
        """Embed ``texts`` -> ``[n, d]`` unit-norm rows; the semantic space is our inference."""
        ...


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise TypeError("texts must be a sequence of str")
    return list(texts)


class MiniLMEmbedder:
    """Sentence-chunked MiniLM embeddings (our choice): ``phi(c) = normalise(mean_s phi(s))``.

    Args:
        model_name_or_path: Passed to ``common.embeddings.Embedder`` (``None``: the offline MiniLM
            package, 384 dims).
        device: Torch device of the encoder.
        batch_size: Encoder batch size.
        cache_size: How many distinct texts to memoise, least recently used first out (groups
            repeat captions within a step; RL completions are mostly new, so the cache is bounded
            instead of growing with every step). 0 turns it off.
    """

    def __init__(
        self,
        model_name_or_path: str | None = None,
        device: str = "cpu",
        batch_size: int = 64,
        cache_size: int = 4096,
    ) -> None:
        from common.embeddings import Embedder

        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise ValueError(f"cache_size must be an int >= 0 (0: no cache), got {cache_size!r}")
        self._embedder = Embedder(model_name_or_path, device=device, batch_size=batch_size)
        self.cache_size = cache_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._empty: np.ndarray | None = None

    def _empty_vector(self, dim: int) -> np.ndarray:
        if self._empty is None or self._empty.shape[0] != dim:
            vec = np.random.default_rng(12345).standard_normal(dim)  # fixed "EMPTY" direction
            self._empty = vec / np.linalg.norm(vec)
        return self._empty

    def _remember(self, new: dict[str, np.ndarray]) -> None:
        """Insert ``new`` into the LRU cache and evict the oldest entries beyond ``cache_size``."""
        if not self.cache_size:
            return
        self._cache.update(new)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def encode(self, texts: Sequence[str]) -> Tensor:
        """Embed ``texts`` -> ``[n, d]`` float32, unit norm.

        Source: our choice (offline MiniLM sentence encoder); the paper's embedding model is
        unknown.
        """
        texts = _check_texts(texts)
        known: dict[str, np.ndarray] = {}
        todo: list[str] = []
        for t in dict.fromkeys(texts):
            if t in self._cache:
                self._cache.move_to_end(t)
                known[t] = self._cache[t]
            else:
                todo.append(t)
        pieces = {t: split_sentences(t) for t in todo}
        flat = [s for t in todo for s in pieces[t]]
        sent_emb = self._embedder.encode(flat) if flat else np.zeros((0, 0))
        new: dict[str, np.ndarray] = {}
        pos = 0
        for t in todo:
            k = len(pieces[t])
            if k:
                v = np.asarray(sent_emb[pos : pos + k], dtype=np.float64).mean(0)
                new[t] = v / max(np.linalg.norm(v), 1e-12)
            pos += k
        self._remember(new)
        known.update(new)
        dim = next((v.shape[0] for v in known.values()), 384)
        rows = [known[t] if t in known else self._empty_vector(dim) for t in texts]
        return torch.as_tensor(np.stack(rows), dtype=torch.float32)  # [n, d]


class BagOfFactsEmbedder:
    """Toy/CI embedder: L2-normalised multi-hot over a phrase vocabulary (toy; our construction).

    ``encode`` counts which vocabulary phrases occur in each text (substring match, case
    insensitive); :meth:`encode_ids` takes the token ids directly. A text with none of the phrases
    gets the fixed ``EMPTY`` direction (an extra last dimension).

    Args:
        vocabulary: The phrases (facts, plus e.g. a generic-caption token).
    """

    def __init__(self, vocabulary: Sequence[str]) -> None:
        if not vocabulary:
            raise ValueError("vocabulary must be a non-empty list of phrases")
        self.vocabulary = [v.lower() for v in vocabulary]
        self.dim = len(self.vocabulary) + 1

    def encode_ids(self, ids: Tensor) -> Tensor:
        """``ids`` ``[..., S]`` token ids (slots) -> ``[..., V+1]`` unit multi-hot (float64).

        Source: our choice (toy semantic space), not in the paper.
        """
        hot = torch.zeros(*ids.shape[:-1], self.dim, dtype=torch.float64, device=ids.device)
        hot.scatter_(-1, ids.long(), 1.0)  # repeated ids count once
        empty = hot.sum(-1) == 0
        hot[..., -1] = empty.to(hot.dtype)
        return hot / hot.norm(dim=-1, keepdim=True)

    def encode(self, texts: Sequence[str]) -> Tensor:
        """Embed space-separated token strings as :meth:`encode_ids` does; toy semantic space of our
        choice (not in the paper).
        """
        texts = _check_texts(texts)
        hot = torch.zeros(len(texts), self.dim, dtype=torch.float64)
        for i, t in enumerate(texts):
            low = t.lower()
            for j, phrase in enumerate(self.vocabulary):
                if phrase in low:
                    hot[i, j] = 1.0
        hot[:, -1] = (hot.sum(-1) == 0).to(hot.dtype)
        return hot / hot.norm(dim=-1, keepdim=True)
