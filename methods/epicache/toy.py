"""The EpiCache CPU toy stage (``icml26 experiment=epicache_toy``): every arm on the same conversations.

A tiny word-level Llama is trained from scratch on the four-topic key→value chat
(:mod:`methods.epicache.toy_world`); then, on fresh conversations and the same inputs for every arm, the
history is compressed to a per-head budget M with block-wise prefill and the model answers 24
questions per conversation. Arms: EpiCache (4 episode caches, MiniLM clustering), the official
SnapKV / KVzip / KeyDiff block-prefill scorers, our SnapKV last-window variant, StreamingLLM,
query-aware eviction tuned to question 1 only, and full KV. If full-KV accuracy is below the gate
(0.8) the run is flagged *inconclusive*.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np
import torch

from common.config import Run
from common.threads import torch_threads
from common.tracking import progress, pyplot, save_plot, write_results

from .config import EpiCacheConfig, EpiCacheRunConfig
from .pipeline import EpiCacheSession
from .prefill import blockwise_prefill, peak_tokens_per_head
from .toy_world import (
    ToyConversation,
    answer_packed,
    fact_english,
    fact_text,
    make_conversation,
    question_english,
    render_toy_context,
    toy_model,
    toy_tokenizer,
    train_toy_model,
)

logger = logging.getLogger(__name__)

ARMS = (
    "epicache",
    "snapkv_block",
    "snapkv_lastwindow",
    "kvzip_block",
    "keydiff_block",
    "streaming",
    "q1_only",
    "full_kv",
)

TOY_RECIPE_VERSION = 3  # bump when the training recipe changes: cached models are keyed by it


def _toy_model(cfg: EpiCacheRunConfig, seed: int, run_dir: str | Path | None = None):
    """Trains the toy model once per run (all arms share it), or loads it from the local cache.

    The trained weights are saved as ``<run_dir>/toy_model.pt`` and, with ``cache_model``, under
    ``$ICML26_CACHE`` (default ``~/.cache/icml26``) keyed by the training settings.
    """
    train_kwargs = dict(
        steps=cfg.train_steps,
        batch=cfg.train_batch,
        lr=cfg.train_lr,
        hidden_size=cfg.hidden_size,
        seed=seed,
        n_q=cfg.train_questions,
        curriculum=tuple(cfg.train_curriculum),
        induction_steps=cfg.train_induction_steps,
    )
    key = json.dumps([TOY_RECIPE_VERSION, train_kwargs], sort_keys=True)
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    path = (
        Path(os.environ.get("ICML26_CACHE", Path.home() / ".cache" / "icml26"))
        / f"epicache_toy_{digest}.pt"
    )
    if cfg.cache_model and path.exists():
        blob = torch.load(path, weights_only=False)
        tok = toy_tokenizer()
        model = toy_model(tok, cfg.hidden_size, seed)
        model.load_state_dict(blob["state"])
        logger.info("loaded the trained toy model from %s", path)
        return model.eval(), tok, blob["stats"]
    model, tok, stats = train_toy_model(**train_kwargs, time_limit_s=cfg.train_time_limit_s)
    blob = {"state": model.state_dict(), "stats": stats, "key": key}
    if run_dir is not None:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        torch.save(blob, Path(run_dir) / "toy_model.pt")
    if cfg.cache_model:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(blob, path)
    return model, tok, stats


BASELINE_ARMS = (  # (arm, scorer): the block-prefill baselines, one cache for every question
    ("snapkv_block", "snapkv"),  # official: last window re-fed after the cache
    ("snapkv_lastwindow", "snapkv_lastwindow"),  # ours (the toy's earlier SnapKV arm)
    ("kvzip_block", "kvzip"),  # official minus the instruction the toy cannot read
    ("keydiff_block", "keydiff"),  # official normalised-key anchor
    ("streaming", "streaming"),
)


def toy_session(model, tok, embedder, cfg: EpiCacheConfig) -> EpiCacheSession:
    """The public :class:`EpiCacheSession` with the toy's renderers (ours).

    The model reads ``<topic> <key> <value> ;`` facts and ``? <key>`` questions; MiniLM reads their
    English renderings (:func:`fact_english`, :func:`question_english`). The toy model reads no
    instruction and has no chat turns (``instruction: null``, ``chat_frame: false``), so the scoring
    prompt is the episode's segments alone (their blank-line separators vanish in the word-level
    vocabulary); long-turn splitting is off (the toy has no assistant turns).
    """
    lib = {f.name: getattr(cfg, f.name) for f in fields(EpiCacheConfig)}
    return EpiCacheSession(
        model,
        tok,
        embedder,
        EpiCacheConfig(**{**lib, "split_long_assistant_chars": None}),
        render_context=render_toy_context,
        render_utterance=fact_text,
        embed_utterance=fact_english,
        render_question=lambda q: q,
        embed_question=question_english,
    )


class _ArmStats:
    """Per-arm accumulators of the toy's metrics over conversations."""

    def __init__(self, model) -> None:
        self.model = model
        self.n_layers = model.config.num_hidden_layers
        self.acc: dict[str, list[tuple[bool, bool]]] = {
            a: [] for a in ARMS
        }  # (correct, same topic)
        self.keep: dict[str, list[float]] = {a: [] for a in ARMS}
        self.peak: dict[str, list[float]] = {a: [] for a in ARMS}
        self.match_ok: list[float] = []

    def record(
        self, arm: str, caches_for_q: list, caches: list, tc: ToyConversation, vocab
    ) -> None:
        """Answers every question from its cache (packed per cache) and records the metrics."""
        conv = tc.conversation
        q_ids = [[vocab[w] for w in q.question.split()] for q in conv.qa]
        gold = [vocab[q.answer] for q in conv.qa]
        same = [t == tc.topics_of_q[0] for t in tc.topics_of_q]
        answers = [None] * len(q_ids)
        for cache in {id(c): c for c in caches_for_q}.values():
            idx = [i for i, c in enumerate(caches_for_q) if c is cache]
            for i, a in zip(idx, answer_packed(self.model, cache, [q_ids[i] for i in idx])):
                answers[i] = a
        self.acc[arm] += [(a == g, s) for a, g, s in zip(answers, gold, same)]
        for i, c in enumerate(caches_for_q):  # evidence retention of the cache that answered
            vp = tc.value_pos[tc.q_utt[i]]
            slots = torch.stack(
                [(c.kept_positions[layer][0] == vp).any(-1) for layer in range(self.n_layers)]
            )
            self.keep[arm].append(float(slots.float().mean() >= 0.5))
        self.peak[arm].append(max(peak_tokens_per_head(c) for c in caches))

    def summary(self, bytes_per_slot: int) -> dict[str, dict[str, float]]:
        out = {}
        for arm in ARMS:
            r = np.array(self.acc[arm], dtype=float)  # [n, 2]
            same = r[:, 1] > 0
            out[arm] = {
                "accuracy": float(r[:, 0].mean()),
                "acc_same_topic_as_q1": float(r[same, 0].mean()) if same.any() else float("nan"),
                "acc_other_topics": float(r[~same, 0].mean()) if (~same).any() else float("nan"),
                "evidence_retention": float(np.mean(self.keep[arm])),
                "peak_tokens_per_head": float(np.max(self.peak[arm])),
                "peak_kv_bytes": float(np.max(self.peak[arm]) * bytes_per_slot * self.n_layers),
            }
        out["epicache"]["episode_match_acc"] = float(np.mean(self.match_ok))
        return out


def _epicache_arm(sess: EpiCacheSession, tc: ToyConversation, stats: _ArmStats, vocab) -> None:
    """EpiCache through the public session: build (segment, embed, cluster, one prefill per episode),
    route every question, answer from the routed episode's cache."""
    conv = tc.conversation
    sess.build(conv)
    routed = [e for e, _ in sess.route([q.question for q in conv.qa])]
    seg_of_utt = {u: s.index for s in sess.segments for u in range(*s.utterance_span)}
    stats.match_ok += [
        float(sess.episodes.labels[seg_of_utt[tc.q_utt[i]]] == e) for i, e in enumerate(routed)
    ]
    stats.record("epicache", [sess.caches[e] for e in routed], sess.caches, tc, vocab)


def _baseline_arms(model, cfg, tc: ToyConversation, stats: _ArmStats, vocab) -> None:
    """The block-prefill baselines, Q1-only post-prefill eviction and full KV on the same history."""
    ctx = torch.tensor([[vocab[w] for w in tc.context.split()]])
    n_ctx, n_q = ctx.shape[1], len(tc.conversation.qa)

    def prefill(prompt, scorer, budget=cfg.budget, block=cfg.block_size):
        p = None if prompt is None else torch.tensor([[vocab[w] for w in prompt.split()]])
        return blockwise_prefill(
            model, None, ctx, p, budget, block, level=cfg.level, scorer=scorer,
            window=cfg.window, n_sink=cfg.n_sink,
        )  # fmt: skip

    for arm, scorer in BASELINE_ARMS:
        c = prefill(None, scorer)
        stats.record(arm, [c] * n_q, [c], tc, vocab)
    c = prefill(tc.conversation.qa[0].question, "patched", block=n_ctx)  # post-prefill, tuned to Q1
    stats.record("q1_only", [c] * n_q, [c], tc, vocab)
    c = prefill(None, "streaming", budget=n_ctx, block=n_ctx)  # nothing evicted
    stats.record("full_kv", [c] * n_q, [c], tc, vocab)


def evaluate_toy(
    model, tok, cfg: EpiCacheRunConfig, seed: int, embedder=None
) -> dict[str, dict[str, float]]:
    """Runs every arm on ``cfg.n_eval`` fresh conversations; returns ``{arm: {metric: value}}``."""
    if embedder is None:
        from common.embeddings import Embedder

        embedder = Embedder(cfg.embedder)
    vocab = tok.get_vocab()
    rng = np.random.default_rng(seed + 7)
    hk = model.config.num_key_value_heads
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    stats = _ArmStats(model)
    sess = toy_session(model, tok, embedder, cfg)
    for _ in progress(range(cfg.n_eval), desc="epicache toy eval", unit="conv"):
        tc = make_conversation(rng, n_questions=cfg.n_questions)
        _epicache_arm(sess, tc, stats, vocab)
        _baseline_arms(model, cfg, tc, stats, vocab)
    return stats.summary(bytes_per_slot=2 * hk * head_dim * 4)  # K and V, fp32, per layer


def plot_accuracy_vs_memory(
    metrics: dict[str, dict[str, float]], path: str | Path, conclusive: bool = True
) -> Path:
    """One point per toy arm: peak KV bytes during prefill (x) against answer accuracy (y)."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for arm in ARMS:
        m = metrics[arm]
        ax.scatter(m["peak_kv_bytes"] / 1024, m["accuracy"], s=40)
        ax.annotate(
            arm,
            (m["peak_kv_bytes"] / 1024, m["accuracy"]),
            fontsize=8,
            xytext=(4, 3),
            textcoords="offset points",
        )
    ax.set_xlabel("peak KV during prefill (KiB)")
    ax.set_ylabel("answer accuracy")
    ax.set_ylim(0, 1.05)
    ax.set_title("EpiCache toy" + ("" if conclusive else " (INCONCLUSIVE: gate not met)"))
    ax.grid(alpha=0.3)
    return save_plot(fig, path)


def run_toy(run: Run) -> dict[str, float]:
    """``stage=toy``: trains (or loads) the toy model, evaluates every arm, writes the results."""
    t0 = time.perf_counter()
    mcfg: EpiCacheRunConfig = run.method
    seed, run_dir = run.seed, run.run_dir
    with torch_threads(1):  # tiny matmuls: extra threads only add contention on a shared CPU
        model, tok, stats = _toy_model(mcfg, seed, run_dir)
        metrics = evaluate_toy(model, tok, mcfg, seed)
    conclusive = metrics["full_kv"]["accuracy"] >= mcfg.gate
    notes = ""
    if not conclusive:
        notes = (
            f"INCONCLUSIVE: model did not learn lookup (full-KV accuracy "
            f"{metrics['full_kv']['accuracy']:.3f} < gate {mcfg.gate}); the accuracy columns are noise, "
            "only the memory columns are meaningful."
        )
        logger.warning(notes)
    for arm in metrics:
        metrics[arm]["conclusive"] = float(conclusive)
    plot_accuracy_vs_memory(metrics, Path(run_dir) / "toy_accuracy_vs_memory.png", conclusive)
    metrics["train"] = {k: float(v) for k, v in stats.items()}
    return write_results(
        run_dir,
        "epicache",
        metrics,
        cfg=run.cfg,
        wall_time_s=time.perf_counter() - t0,
        notes=notes,
        extra={"config": asdict(mcfg)},
    )
