"""Episodic clustering, patched prompts and query-to-episode matching (official
``utils/cluster.py``).

Shape letters: K segments, E episodes, D embedding dimension.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning

from .segmentation import Segment

logger = logging.getLogger(__name__)


@dataclass
class Episodes:
    """The result of clustering segment embeddings.

    Attributes:
        labels: ``int[K]`` episode of each segment.
        centroids: ``float[E, D]`` member means c_e (not renormalised, as in the official code).
        order: per episode, its segment indices sorted by cos(e_k, c_e), highest first (medoid first).
    """

    labels: np.ndarray
    centroids: np.ndarray
    order: list[list[int]]

    @property
    def n_episodes(self) -> int:
        return int(self.centroids.shape[0])


def _check_emb(emb: np.ndarray, name: str) -> np.ndarray:
    emb = np.asarray(emb, dtype=np.float64)
    if emb.ndim != 2 or emb.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array [K, D], got shape {emb.shape}")
    if not np.isfinite(emb).all():
        raise ValueError(f"{name} holds NaN or inf")
    return emb


def cluster_segments(
    emb: np.ndarray,
    n_episodes: int = 4,
    seed: int = 42,
    n_init: int = 10,
    allow_shrink: bool = False,
) -> Episodes:
    """K-means over segment embeddings into E episodes (paper, Episodic KV Compression, step 1
    "conversation clustering": C({e_k}) → {E_1..E_E}, c_e = (1/|E_e|) Σ_{k∈E_e} e_k; k-means++,
    ``n_init``, seed and un-renormalised centroids from the official ``utils/cluster.py``).

    Args:
        emb: ``[K, D]`` segment embeddings (unit rows).
        n_episodes: E.
        seed: k-means random state (official: 42).
        n_init: k-means restarts (official: 10).
        allow_shrink: if K < E, use E = K (with a warning) instead of raising.

    Returns:
        :class:`Episodes` with centroids equal to member means and medoid-first orders.

    Raises:
        ValueError: on bad shapes, NaN, ``n_episodes < 1`` or fewer segments than episodes.
    """
    emb = _check_emb(emb, "emb")
    if not isinstance(n_episodes, int) or n_episodes < 1:
        raise ValueError(f"n_episodes must be an int >= 1, got {n_episodes!r}")
    k = emb.shape[0]
    if k < n_episodes:
        if not allow_shrink:
            raise ValueError(
                f"{k} segments cannot form n_episodes={n_episodes} episodes; pass allow_shrink=True "
                "or lower n_episodes"
            )
        logger.warning("only %d segments: shrinking n_episodes from %d to %d", k, n_episodes, k)
        n_episodes = k
    km = KMeans(n_clusters=n_episodes, random_state=seed, n_init=n_init, init="k-means++")
    distinct = len(np.unique(emb, axis=0))
    with warnings.catch_warnings():
        if distinct < n_episodes:  # repeated segments: some episodes get no member (handled below)
            logger.warning(
                "%d distinct segment embeddings for n_episodes=%d: some episodes stay empty",
                distinct,
                n_episodes,
            )  # said once here instead of sklearn's ConvergenceWarning
            warnings.filterwarnings("ignore", "Number of distinct clusters", ConvergenceWarning)
        labels = km.fit_predict(emb)
    centroids = np.stack(
        [
            emb[labels == e].mean(0) if (labels == e).any() else km.cluster_centers_[e]
            for e in range(n_episodes)
        ]
    )  # [E, D]
    order = []
    for e in range(n_episodes):
        members = np.flatnonzero(labels == e)
        cos = _cosine(emb[members], centroids[e])  # [|E_e|]
        order.append([int(members[i]) for i in np.argsort(-cos, kind="stable")])
    return Episodes(labels=labels, centroids=centroids, order=order)


def _cosine(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """cos(x_k, c) for every row x_k (the paper's medoid ranking and episode matching)."""
    return (x @ c) / (np.linalg.norm(x, axis=-1) * np.linalg.norm(c) + 1e-12)


def build_patched_prompt(
    ep: Episodes,
    e: int,
    segments: Sequence[Segment],
    n_medoid: int = 8,
    instruction: str | None = None,
    layout: Literal["official", "plain"] = "official",
) -> str:
    """The episode text of the patched prompt P_e: its ``n_medoid`` most central segments (paper,
    Episodic KV Compression, step 1: S_medoid^(e) = argmax_{S_k∈E_e} cos(e_k, c_e); the top-``n_medoid``
    form is the official code's, listed in the doc's deviations).

    The chosen segments are re-sorted into chronological order, as in the official
    ``utils/cluster.py::make_cluster_prompt``; ``n_medoid=1`` is the v4 paper text (the single medoid).

    ``layout="official"``: every segment's lines end with a newline and each segment is followed by one
    more, so segments are separated by a blank line (the official text). The instruction is *not* part
    of this text: the official scoring prompt is ``"\n\n" + instruction``, the end of the user turn and
    the assistant header, then this text (:func:`methods.epicache.pipeline.scoring_prompt_ids`), so
    ``instruction`` must be None here.
    ``layout="plain"`` (ours, the earlier form): segments joined with one newline, an optional
    ``instruction + "\n"`` in front.

    Args:
        ep: the clustering.
        e: episode index.
        segments: all segments, indexed as in the clustering.
        n_medoid: how many central segments (capped at the episode size).
        instruction: text before the segments (``layout="plain"`` only).
        layout: ``"official"`` or ``"plain"``.

    Raises:
        ValueError: on a bad episode index, ``n_medoid < 1``, an unknown layout, or an instruction with
            ``layout="official"``.
    """
    if layout not in ("official", "plain"):
        raise ValueError(f"layout must be 'official' or 'plain', got {layout!r}")
    if layout == "official" and instruction:
        raise ValueError(
            "layout='official' keeps the instruction out of the episode text (it goes before the "
            "assistant header: use pipeline.scoring_prompt_ids); pass instruction=None or layout='plain'"
        )
    if not 0 <= e < ep.n_episodes:
        raise ValueError(f"episode index e must be in [0, {ep.n_episodes}), got {e}")
    if not isinstance(n_medoid, int) or n_medoid < 1:
        raise ValueError(f"n_medoid must be an int >= 1, got {n_medoid!r}")
    chosen = sorted(ep.order[e][:n_medoid])
    if layout == "official":
        return "".join(segments[k].text.rstrip("\n") + "\n\n" for k in chosen)
    body = "\n".join(segments[k].text for k in chosen)
    return body if not instruction else f"{instruction}\n{body}"


def match_episode(q_emb: np.ndarray, ep: Episodes, metric: str = "cosine") -> tuple[int, float]:
    """Picks the episode whose centroid is closest to the query (paper, query-time episode matching:
    e* = argmax_e cos(f_embed(q), c_e); ``metric="dot"`` is the official ``run_epicache_eval.py``).

    Args:
        q_emb: ``[D]`` query embedding.
        ep: the clustering.
        metric: ``"cosine"`` (ours/paper) or ``"dot"`` (official: un-normalised centroid).

    Returns:
        ``(episode, similarity)``; ties go to the lowest episode index.

    Raises:
        ValueError: on a dimension mismatch, NaN or an unknown metric.
    """
    q = np.asarray(q_emb, dtype=np.float64).reshape(-1)
    if q.shape[0] != ep.centroids.shape[1]:
        raise ValueError(
            f"q_emb has dimension {q.shape[0]} but the episode centroids have {ep.centroids.shape[1]}; "
            "use the same embedder for segments and questions"
        )
    if not np.isfinite(q).all():
        raise ValueError("q_emb holds NaN or inf")
    if metric == "cosine":
        sims = _cosine(ep.centroids, q)
    elif metric == "dot":
        sims = ep.centroids @ q
    else:
        raise ValueError(f"metric must be 'cosine' or 'dot', got {metric!r}")
    best = int(np.argmax(sims))  # first maximum: lowest index on ties
    return best, float(sims[best])
