"""Importance Φ and pairwise distance D from a text similarity (both formulas as on the paper's
project page; official ``prepare_scores.py``).

* Importance (official ``prepare_scores.py``): ``r_t = F1(candidate = obs_history_t, reference = goal)``, then min–max
  normalised per trajectory (the official code's default), or raw, or the positive increment
  ``φ_t = max(0, r_t − r_{t−1})`` sum-normalised.
* Distance (official ``prepare_scores.py``): ``sim(x, y) = ½[F1(x→y) + F1(y→x)]``, ``δ = 1 − sim``, and
  ``D(i, j) = max(δ(s_i, s_j), δ(y_i, y_j))`` over states ``s`` and responses ``y``; ``D(i, i) = 0``.

The similarity is a plug-in (:class:`TextSimilarity`). :class:`TokenMatchSimilarity` is a
BERTScore-style scorer: each text is encoded by a transformer encoder (default: the offline MiniLM,
layer 4), special tokens are dropped, token vectors are L2-normalised, and each token is greedily
matched to its most similar token in the other text (precision = mean over candidate tokens, recall =
mean over reference tokens, F1 their harmonic mean; no idf, no baseline rescaling).

Deviation: the official code uses ``bert_score.BERTScorer``; that package is not installed here, so the
same greedy matching is written out in :meth:`TokenMatchSimilarity._f1` (see docs/methods/weasel.md).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "JaccardSimilarity",
    "TextSimilarity",
    "TokenMatchSimilarity",
    "distance_matrix",
    "importance",
]

logger = logging.getLogger(__name__)


@runtime_checkable
class TextSimilarity(Protocol):
    """A text similarity with BERTScore's interface (F1 in [-1, 1], usually (0, 1])."""

    def score(self, cands: list[str], refs: list[str]) -> np.ndarray:
        """F1 of each ``(cands[i], refs[i])`` pair, shape ``[N]``."""
        ...

    def pairwise(self, texts: list[str]) -> np.ndarray:
        """Symmetrised similarity ``½[F1(x→y) + F1(y→x)]``, shape ``[n, n]``, diagonal 1."""
        ...


class JaccardSimilarity:
    """Deterministic token-set Jaccard similarity, a fast stand-in for tests and smoke runs.

    Source: engineering (test stand-in for BERTScore), not in the paper.
    """

    def _tok(self, text: str) -> set[str]:
        return set(re.findall(r"\w+", text.lower()))

    def _one(self, a: str, b: str) -> float:
        ta, tb = self._tok(a), self._tok(b)
        if not ta and not tb:
            return 0.0
        return len(ta & tb) / len(ta | tb)

    def score(self, cands: list[str], refs: list[str]) -> np.ndarray:
        _check_pairs(cands, refs)
        return np.array([self._one(c, r) for c, r in zip(cands, refs)])  # [N]

    def pairwise(self, texts: list[str]) -> np.ndarray:
        n = len(texts)
        out = np.eye(n)
        for i in range(n):
            for j in range(i + 1, n):
                out[i, j] = out[j, i] = self._one(texts[i], texts[j])
        return out  # [n, n]


def _check_pairs(cands: Sequence[str], refs: Sequence[str]) -> None:
    if isinstance(cands, str) or isinstance(refs, str):
        raise TypeError("cands and refs must be lists of strings, not a single string")
    if len(cands) != len(refs):
        raise ValueError(f"cands and refs must have equal length, got {len(cands)} and {len(refs)}")


class TokenMatchSimilarity:
    """BERTScore-style greedy token matching on a local encoder's hidden states.

    Source: the paper's BERTScore (project page), re-implemented after the ``bert-score`` library
    (F1, no idf, no rescale; that library is not installed here, see the deviations table).

    Args:
        model_name_or_path: encoder id or local path; None for the offline MiniLM.
        num_layers: which hidden layer to use (1-based, as bert-score's ``num_layers``). Required:
            a local path has no default layer, as in bert-score.
        max_length: tokens kept per text (incl. specials); longer texts are truncated, with one
            warning per call giving the count.
        batch_size: encoding batch size.
        device: torch device string.

    Raises:
        ValueError: if ``num_layers`` is None or < 1, or ``max_length`` < 3.
    """

    def __init__(
        self,
        model_name_or_path: str | None = None,
        num_layers: int | None = 4,
        max_length: int = 64,
        batch_size: int = 64,
        device: str = "cpu",
    ) -> None:
        if num_layers is None:
            raise ValueError("num_layers must be given explicitly for a local encoder path")
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        if max_length < 3:
            raise ValueError(f"max_length must be >= 3, got {max_length}")
        if model_name_or_path is None:
            from common.embeddings import default_model_path

            model_name_or_path = default_model_path()
        self.model_name_or_path = model_name_or_path
        self.num_layers = num_layers
        self.max_length = max_length
        self.batch_size = batch_size
        self.device = device
        self._model = None
        self._tok = None
        self._cache: dict[str, np.ndarray] = {}

    def _load(self) -> None:
        if self._model is None:
            from transformers import AutoModel, AutoTokenizer

            from common.models import weights_hint

            with weights_hint(self.model_name_or_path):
                self._tok = AutoTokenizer.from_pretrained(self.model_name_or_path)
                self._model = AutoModel.from_pretrained(self.model_name_or_path)
            self._model = self._model.to(self.device).eval()
            n_layers = self._model.config.num_hidden_layers
            if self.num_layers > n_layers:
                raise ValueError(f"num_layers={self.num_layers} exceeds the encoder's {n_layers}")

    def embed_tokens(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Unit-norm token vectors ``[L_i, d]`` per text (specials dropped), cached per text."""
        import torch

        self._load()
        todo = [t for t in dict.fromkeys(texts) if t not in self._cache]
        n_trunc = 0
        for s in range(0, len(todo), self.batch_size):
            chunk = todo[s : s + self.batch_size]
            full = self._tok(chunk, add_special_tokens=True)["input_ids"]
            n_trunc += sum(len(ids) > self.max_length for ids in full)
            enc = self._tok(
                chunk,
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
                return_special_tokens_mask=True,
            )
            special = enc.pop("special_tokens_mask")  # [b, L]
            with torch.no_grad():
                out = self._model(**enc.to(self.device), output_hidden_states=True)
            hid = out.hidden_states[self.num_layers]  # [b, L, d]
            hid = torch.nn.functional.normalize(hid, dim=-1)
            keep = enc["attention_mask"].bool() & ~special.bool()  # [b, L]
            for k, text in enumerate(chunk):
                self._cache[text] = hid[k][keep[k]].cpu().numpy().astype(np.float32)  # [L_k, d]
        if n_trunc:
            logger.warning("%d text(s) truncated to %d tokens", n_trunc, self.max_length)
        return [self._cache[t] for t in texts]

    @staticmethod
    def _f1(cand: np.ndarray, ref: np.ndarray) -> float:
        """Greedy matching F1: P = mean_c max_r c·r, R = mean_r max_c c·r, F1 = 2PR/(P+R).

        BERTScore's F1 (Zhang et al., ICLR 2020, §3), the scorer the paper uses; written out
        because ``bert-score`` is not installed (docs/methods/weasel.md, Deviations)."""
        if cand.shape[0] == 0 or ref.shape[0] == 0:
            return 0.0  # undefined for an empty text; treated as 0 (docs/methods/weasel.md), warned by callers
        sim = cand @ ref.T  # [Lc, Lr]
        p = float(sim.max(axis=1).mean())
        r = float(sim.max(axis=0).mean())
        return 0.0 if p + r == 0 else 2 * p * r / (p + r)

    def score(self, cands: list[str], refs: list[str]) -> np.ndarray:
        _check_pairs(cands, refs)
        n_empty = sum(not c.strip() or not r.strip() for c, r in zip(cands, refs))
        if n_empty:
            logger.warning("%d pair(s) with an empty text scored as 0", n_empty)
        emb = self.embed_tokens(list(cands) + list(refs))
        n = len(cands)
        return np.array([self._f1(emb[i], emb[n + i]) for i in range(n)])  # [N]

    def pairwise(self, texts: list[str]) -> np.ndarray:
        emb = self.embed_tokens(list(texts))
        n = len(texts)
        out = np.eye(n)
        for i in range(n):
            for j in range(i + 1, n):
                s = 0.5 * (self._f1(emb[i], emb[j]) + self._f1(emb[j], emb[i]))
                out[i, j] = out[j, i] = s
        return out  # [n, n]


def importance(
    goal: str,
    texts: Sequence[str],
    sim: TextSimilarity,
    normalize: Literal["minmax", "raw", "increment"] = "minmax",
) -> np.ndarray:
    """Unary importance Φ of each step of one trajectory.

    Paper: ``Φ(t) = BERTScore(g, s_t)`` (project page); the text field, the direction and the
    min–max default are official code ``prepare_scores.py`` (``compute_relevance_scores``,
    ``minmax_normalize``, ``phi_from_relevance``; docs/methods/weasel.md, Deviations).

    ``r_t = sim.score(texts_t, goal)``; ``minmax``: ``(r − min r)/(max r − min r)`` (zeros if r is
    constant; official-code default); ``raw``: ``r``; ``increment``: ``max(0, r_t − r_{t−1})`` with
    ``r_{−1} = 0``, divided by its sum (zeros if the sum is 0).

    Returns:
        ``[n]`` float array.

    Raises:
        ValueError: on an unknown ``normalize``.
    """
    if normalize not in ("minmax", "raw", "increment"):
        raise ValueError(f"normalize must be 'minmax', 'raw' or 'increment', got {normalize!r}")
    texts = list(texts)
    if not texts:
        return np.zeros(0)
    r = np.asarray(sim.score(texts, [goal] * len(texts)), dtype=np.float64)  # [n]
    if normalize == "raw":
        return r
    if normalize == "minmax":
        span = r.max() - r.min()
        return np.zeros_like(r) if span <= 0 else (r - r.min()) / span
    inc = np.maximum(0.0, np.diff(r, prepend=0.0))  # [n]
    total = inc.sum()
    return np.zeros_like(r) if total <= 0 else inc / total


def distance_matrix(
    states: Sequence[str],
    responses: Sequence[str] | None,
    sim: TextSimilarity,
    combine: Literal["max", "mean", "state", "response"] = "max",
) -> np.ndarray:
    """Pairwise distance ``D = max(1 − sim(s_i, s_j), 1 − sim(y_i, y_j))``.

    Paper: the maximum of state and response dissimilarities (project page); the clipping and the
    zero diagonal are official code ``prepare_scores.py::distance_matrix``.

    Each component is clipped to [0, 1]; the diagonal is 0. ``responses=None`` uses states only
    (the official ``--skip-response-distance``).

    Returns:
        ``[n, n]`` symmetric float array.

    Raises:
        ValueError: on an unknown ``combine`` or mismatched lengths.
    """
    if combine not in ("max", "mean", "state", "response"):
        raise ValueError(f"combine must be max|mean|state|response, got {combine!r}")
    states = list(states)
    n = len(states)
    if responses is not None and len(responses) != n:
        raise ValueError(f"responses has {len(responses)} items, states has {n}")
    if responses is None and combine == "response":
        raise ValueError("combine='response' needs responses")

    def _dist(texts: list[str]) -> np.ndarray:
        d = np.clip(1.0 - np.asarray(sim.pairwise(texts), dtype=np.float64), 0.0, 1.0)
        d = 0.5 * (d + d.T)  # guard against an asymmetric plug-in
        np.fill_diagonal(d, 0.0)
        return d  # [n, n]

    if n == 0:
        return np.zeros((0, 0))
    d_s = _dist(states) if combine != "response" else None
    if responses is None or combine == "state":
        return d_s
    d_y = _dist(list(responses))
    if combine == "response":
        return d_y
    return np.maximum(d_s, d_y) if combine == "max" else 0.5 * (d_s + d_y)
