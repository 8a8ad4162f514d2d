"""Verification functions δ(a, â) ∈ {0, 1} (official model2data.py / run.py E1).

* :class:`LLMJudgeVerifier` — δ_LLM: an LLM answers YES/NO to "do these two descriptions agree?"
  (the paper's default, reported more accurate than similarity).
* :class:`EmbeddingVerifier` — δ_sim: ``cos(E(a), E(â)) >= tau`` with the offline all-MiniLM-L6-v2,
  ``tau = 0.75`` (repo default). The threshold is inclusive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from common.llm import ChatLLM
from methods.sacopt import prompts
from methods.sacopt.parsing import parse_code_block, parse_delimited_block

__all__ = ["JUDGE_MATCHES", "EmbeddingVerifier", "LLMJudgeVerifier", "Verifier"]

JUDGE_MATCHES = ("exact", "lenient")


@runtime_checkable
class Verifier(Protocol):
    """``verifier(a, a_hat) -> bool``; ``uses_llm`` says whether a call costs one LLM request."""

    uses_llm: bool

    def __call__(self, anchor: str, reconstruction: str, kind: str = "constraint") -> bool: ...


class LLMJudgeVerifier:
    """δ_LLM(a, â) = 1 iff the judge's answer block says YES.

    ``match="exact"`` (default) follows the official ``model2data.py``: the answer block (``=====``,
    else a ```` ```python ```` fence) must be exactly ``YES`` (``Yes``, ``YES.`` fail).
    ``match="lenient"`` accepts any case and a trailing full stop, and reads the last line when there
    is no block. An answer that is neither YES nor NO counts as a mismatch (0) and is tallied in
    ``n_unparsed``.
    """

    uses_llm = True

    def __init__(self, llm: ChatLLM, match: str = "exact") -> None:
        if match not in JUDGE_MATCHES:
            raise ValueError(f"match must be one of {JUDGE_MATCHES}, got {match!r}")
        self.llm = llm
        self.match = match
        self.n_unparsed = 0

    def __call__(self, anchor: str, reconstruction: str, kind: str = "constraint") -> bool:
        reply = self.llm.chat(prompts.messages(prompts.judge_prompt(kind, anchor, reconstruction)))
        if self.match == "exact":
            word = (parse_code_block(reply) or "").strip()
            if word == "YES":
                return True
            if word != "NO":
                self.n_unparsed += 1
            return False
        block = parse_delimited_block(reply) or reply.strip().splitlines()[-1:] or [""]
        word = (block if isinstance(block, str) else block[0]).strip().strip(".").upper()
        if word.startswith("YES"):
            return True
        if not word.startswith("NO"):
            self.n_unparsed += 1
        return False


class EmbeddingVerifier:
    """δ_sim(a, â) = 1[cos(E(a), E(â)) >= tau] (inclusive), E = sentence embedder.

    The similarity variant of the official ``model2data.py`` (all-MiniLM-L6-v2, ``tau = 0.75``).

    Args:
        tau: Threshold in (0, 1]; repo default 0.75.
        embedder: Anything with ``encode(texts) -> [n, d]`` L2-normalised rows; default the offline
            MiniLM (:class:`common.embeddings.Embedder`).
    """

    uses_llm = False

    def __init__(self, tau: float = 0.75, embedder=None) -> None:
        if not 0 < tau <= 1:
            raise ValueError(f"tau must be in (0, 1], got {tau!r}")
        if embedder is None:
            from common.embeddings import Embedder

            embedder = Embedder()
        self.tau = tau
        self.embedder = embedder
        self._cache: dict[str, np.ndarray] = {}

    def _embed(self, texts: list[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            vecs = np.asarray(self.embedder.encode(missing), dtype=np.float64)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            self._cache.update(zip(missing, vecs))
        return np.stack([self._cache[t] for t in texts])

    def similarity(self, anchors: Sequence[str], recons: Sequence[str]) -> np.ndarray:
        """Cosine similarity of each pair, ``(n,)`` (official code model2data.py, MiniLM embeddings)."""
        if len(anchors) != len(recons):
            raise ValueError("anchors and recons must have the same length")
        if not anchors:
            return np.zeros(0)
        e = self._embed(list(anchors) + list(recons))  # (2n, d), unit rows
        a, b = e[: len(anchors)], e[len(anchors) :]
        return (a * b).sum(axis=1)

    def batch(self, anchors: Sequence[str], recons: Sequence[str]) -> list[bool]:
        """Vectorised δ_sim over pairs (official code model2data.py: ``cos >= tau``)."""
        return [bool(s >= self.tau - 1e-9) for s in self.similarity(anchors, recons)]

    def __call__(self, anchor: str, reconstruction: str, kind: str = "constraint") -> bool:
        if anchor == reconstruction:
            return True
        return self.batch([anchor], [reconstruction])[0]
