"""The EpiCache toy runs through the public EpiCacheSession (issue 30 point 2)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch

from methods.epicache import blockwise_prefill, build_patched_prompt, match_episode
from methods.epicache.config import EpiCacheRunConfig
from methods.epicache.toy import toy_session
from methods.epicache.toy_world import (
    answer_packed,
    fact_english,
    make_conversation,
    question_english,
    render_toy_context,
    toy_model,
    toy_tokenizer,
)

TOY = dict(
    w_embed=2,
    n_medoid=3,
    instruction=None,
    chat_frame=False,
    budget=48,
    block_size=32,
    window=8,
    level="uniform",
    alpha=0.0,
    max_new_tokens=1,
)


class _HashEmbedder:
    """Deterministic bag-of-words embedder (MiniLM stand-in); counts its calls."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def encode(self, texts):
        self.calls.append(list(texts))
        out = np.zeros((len(texts), 64))
        for i, t in enumerate(texts):
            for w in t.lower().replace("(", " ").replace(")", " ").replace("?", " ").split():
                out[i, sum(map(ord, w)) % 64] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


@pytest.fixture(scope="module")
def toy():
    tok = toy_tokenizer()
    model = toy_model(tok, hidden_size=32, seed=0)
    tc = make_conversation(np.random.default_rng(3), n_questions=6)
    emb = _HashEmbedder()
    sess = toy_session(model, tok, emb, EpiCacheRunConfig(**TOY))
    sess.build(tc.conversation)
    return model, tok, tc, emb, sess


def test_toy_context_renderer_gives_the_value_positions(toy):
    _, tok, tc, _, _ = toy
    text = render_toy_context(tc.conversation)
    ids = tok(text, add_special_tokens=False).input_ids
    words = text.split()
    assert len(ids) == len(words) and words.count("|") == 8
    inv = {i: w for w, i in tok.get_vocab().items()}
    for u, vp in zip(tc.conversation.utterances, tc.value_pos):
        assert inv[ids[vp]] == u.text.split()[1]  # the value token of each fact


def test_session_builds_the_toy_episode_caches(toy):
    """Each episode cache is the block prefill of the whole history scored by that episode's
    medoid segments alone (no instruction, no chat frame), as the toy documents."""
    model, tok, tc, _, sess = toy
    vocab = tok.get_vocab()
    ctx = torch.tensor([[vocab[w] for w in tc.context.split()]])
    assert len(sess.caches) == sess.episodes.n_episodes == 4
    for e, cache in enumerate(sess.caches):
        text = build_patched_prompt(sess.episodes, e, sess.segments, TOY["n_medoid"])
        prompt = torch.tensor([[vocab[w] for w in text.split()]])
        ref = blockwise_prefill(model, None, ctx, prompt, 48, 32, level="uniform")
        for layer in range(cache.num_layers):
            assert torch.equal(cache.kept_positions[layer], ref.kept_positions[layer])
        assert cache.seen_tokens == ctx.shape[1]
    assert sess.segments[0].embed_text.startswith(fact_english(tc.conversation.utterances[0]))


def test_route_embeds_the_english_question_once_and_matches_by_cosine(toy):
    _, _, tc, emb, sess = toy
    qs = [q.question for q in tc.conversation.qa]
    emb.calls.clear()
    routed = sess.route(qs)
    assert emb.calls == [[question_english(q) for q in qs]]  # one batch, embedder rendering
    q_emb = _HashEmbedder().encode([question_english(q) for q in qs])
    assert routed == [match_episode(v, sess.episodes) for v in q_emb]
    with pytest.raises(ValueError, match="questions"):
        sess.route(["  "])


def test_packed_toy_answers_equal_session_answer(toy):
    """The toy's packed decoding (all questions in one forward) gives ``EpiCacheSession.answer``'s tokens."""
    model, tok, tc, _, sess = toy
    vocab = tok.get_vocab()
    qs = [q.question for q in tc.conversation.qa]
    routed = [e for e, _ in sess.route(qs)]
    sizes = [c.nbytes() for c in sess.caches]
    for e in set(routed):
        idx = [i for i, r in enumerate(routed) if r == e]
        packed = answer_packed(
            model, sess.caches[e], [[vocab[w] for w in qs[i].split()] for i in idx]
        )
        for i, a in zip(idx, packed):
            rec = sess.answer(qs[i])
            assert rec.episode == e and rec.token_ids == [a]
    assert [c.nbytes() for c in sess.caches] == sizes  # caches untouched


def test_evaluate_toy_goes_through_the_session(monkeypatch):
    """``evaluate_toy`` builds one session per conversation and answers from its routed caches."""
    from methods.epicache import toy as toy_stage

    built, routed = [], []
    real_build, real_route = toy_stage.EpiCacheSession.build, toy_stage.EpiCacheSession.route

    def build(self, conv):
        built.append(conv)
        return real_build(self, conv)

    def route(self, qs):
        out = real_route(self, qs)
        routed.append(out)
        return out

    monkeypatch.setattr(toy_stage.EpiCacheSession, "build", build)
    monkeypatch.setattr(toy_stage.EpiCacheSession, "route", route)
    tok = toy_tokenizer()
    model = toy_model(tok, hidden_size=32, seed=0)
    cfg = EpiCacheRunConfig(**TOY, n_eval=1, n_questions=4)
    out = toy_stage.evaluate_toy(model, tok, cfg, seed=0, embedder=_HashEmbedder())
    assert len(built) == 1 and len(routed) == 1 and len(routed[0]) == 4
    assert out["epicache"]["peak_tokens_per_head"] <= 48 + 32 + 3 * 2 * 4  # M + block + p
    assert out["full_kv"]["evidence_retention"] == 1.0
