"""The "four-topic memory chat" toy (ours, not in the paper): a word-level key→value lookup task.

A conversation has 8 sessions, each on one of 4 topics (every topic twice), each with 5 facts
``<topic> <key> <value> ;``. Questions are ``? <key>`` with the answer ``<value>``. A tiny Llama is
trained from scratch to answer from the full context; the methods then answer from compressed caches.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from common.tiny import induction_batch, tiny_causal_lm
from common.train_loop import train_steps

from .cache import epicache_forward
from .data import QA, Conversation
from .segmentation import Utterance

logger = logging.getLogger(__name__)

TOPICS = {
    "pets": "dog cat parrot hamster rabbit goldfish turtle pony ferret lizard",
    "travel": "paris rome tokyo flight hotel beach passport train museum island",
    "cooking": "pasta soup bread curry salad cake rice pizza sauce omelette",
    "work": "meeting deadline boss report project email salary office client laptop",
}
VALUES = (
    "red blue green yellow black white purple orange pink brown gray gold silver big small old new "
    "fast slow warm cold happy sad quiet loud early late cheap costly bright dark soft hard sweet sour "
    "fresh long short tall round"
).split()
SPECIALS = ["<pad>", "<eos>", "|", ";", "?"]


def toy_tokenizer() -> PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer over the toy vocabulary (~100 tokens)."""
    words = SPECIALS + list(TOPICS) + [k for ks in TOPICS.values() for k in ks.split()] + VALUES
    vocab = {w: i for i, w in enumerate(dict.fromkeys(words))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")


def toy_model(
    tokenizer: PreTrainedTokenizerFast, hidden_size: int = 64, seed: int = 0
) -> LlamaForCausalLM:
    """Our toy's tiny Llama (2 layers, 4 query heads, 2 KV heads), random init, eval mode; the
    global RNG continues from the seeded init."""
    model, _ = tiny_causal_lm(
        "llama",
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        max_position_embeddings=512,
        seed=seed,
        tokenizer=tokenizer,
        fork_rng=False,
        record=False,
        bos_token_id=1,  # LlamaConfig's default, as the toy's config always had (no bos token)
        tie_word_embeddings=False,
    )
    return model


@dataclass
class ToyConversation:
    conversation: Conversation
    context: str  # model-token rendering
    topics_of_q: list[str]
    value_pos: list[int]  # per utterance, the context position of its value token
    q_utt: list[int]  # per question, the utterance it asks about


def fact_text(u: Utterance) -> str:
    """Model rendering of one fact: ``<topic> <key> <value> ;``."""
    return f"{u.speaker} {u.text} ;"


def fact_english(u: Utterance) -> str:
    """Embedder rendering of one fact (MiniLM reads English)."""
    key, value = u.text.split()
    return f"the {key} is {value} ({u.speaker})"


def question_english(q: str) -> str:
    """Embedder rendering of a question ``? <key>``."""
    return f"what about the {q.split()[-1]}?"


def render_toy_context(conv: Conversation) -> str:
    """Model rendering of the history: ``|`` opens each session, then its facts (:func:`fact_text`)."""
    parts, last = [], object()
    for u in conv.utterances:
        if u.session_id != last:
            last = u.session_id
            parts.append("|")
        parts.append(fact_text(u))
    return " ".join(parts)


def make_conversation(
    rng: np.random.Generator, n_sessions: int = 8, facts_per_session: int = 5, n_questions: int = 24
) -> ToyConversation:
    """Samples one toy conversation (each topic in n_sessions/4 sessions, keys unique)."""
    topics = list(TOPICS)
    if n_sessions % len(topics) == 0:
        order = [t for t in topics for _ in range(n_sessions // len(topics))]
        rng.shuffle(order)
    else:  # curriculum: fewer sessions, each topic at most twice (its 10 keys suffice)
        if not 1 <= n_sessions <= 2 * len(topics):
            raise ValueError(f"n_sessions must be in [1, {2 * len(topics)}], got {n_sessions}")
        pool = [t for t in topics for _ in range(2)]
        order = [pool[i] for i in rng.permutation(len(pool))[:n_sessions]]
    keys = {t: list(rng.permutation(TOPICS[t].split())) for t in topics}
    utts, value_pos, n_tok = [], [], 0
    for s, t in enumerate(order):
        n_tok += 1  # the session marker "|"
        for _ in range(facts_per_session):
            k = keys[t].pop()
            v = VALUES[int(rng.integers(len(VALUES)))]
            utts.append(Utterance(t, f"{k} {v}", session_id=str(s)))
            value_pos.append(n_tok + 2)  # <topic> <key> <value> ;
            n_tok += 4
    picks = rng.choice(len(utts), size=min(n_questions, len(utts)), replace=False)
    qa = [
        QA(f"? {utts[i].text.split()[0]}", utts[i].text.split()[1], utts[i].speaker) for i in picks
    ]
    conv = Conversation(utts, qa, conv_id="")
    return ToyConversation(
        conv, render_toy_context(conv), [q.category for q in qa], value_pos, [int(i) for i in picks]
    )


@torch.no_grad()
def answer_packed(model: torch.nn.Module, cache, question_ids: list[list[int]]) -> list[int]:
    """Answers many one-token questions over one cache in a single forward.

    Each question sees the whole cache and its own tokens only, at positions seen, seen+1, ... (the
    same as answering them one at a time with ``greedy_decode``); the cache is left unchanged.
    """
    lens = [len(q) for q in question_ids]
    flat = [t for q in question_ids for t in q]
    q_tot = len(flat)
    past = cache.physical_len(0)
    seen = cache.seen_tokens
    pos, blocks, start = [], torch.zeros(q_tot, q_tot, dtype=torch.bool), 0
    for n in lens:
        pos += list(range(seen, seen + n))
        blocks[start : start + n, start : start + n] = torch.tril(
            torch.ones(n, n, dtype=torch.bool)
        )
        start += n
    # The mask's past part must match every layer's length: layers may differ, so build per forward
    # from the first layer and rely on equal lengths (uniform budgets in the toy).
    if any(cache.physical_len(layer) != past for layer in range(cache.num_layers)):
        raise ValueError("answer_packed needs equal per-layer cache lengths")
    extra = torch.cat([torch.ones(q_tot, past, dtype=torch.bool), blocks], dim=1)  # [Q, past + Q]
    ids = torch.tensor([flat])
    try:
        with epicache_forward(model, cache, extra_mask=extra):
            logits = model(
                input_ids=ids, position_ids=torch.tensor([pos]), cache=cache, use_cache=True
            ).logits
    finally:
        cache.drop_uncommitted_()
    ends = np.cumsum(lens) - 1
    return [int(logits[0, e].argmax()) for e in ends]


def _train_batch(
    tok, rng, batch: int, n_q: int, n_sessions: int = 8
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Context + n_q questions; each question sees the context and itself only, at positions N, N+1."""
    rows, labels = [], []
    vocab = tok.get_vocab()
    for _ in range(batch):
        tc = make_conversation(rng, n_sessions=n_sessions, n_questions=n_q)
        ctx = [vocab[w] for w in tc.context.split()]
        ids, lab = list(ctx), [-100] * len(ctx)
        for q in tc.conversation.qa:
            qi = [vocab[w] for w in f"{q.question} {q.answer}".split()]  # ? key value
            ids += qi
            lab += [-100, -100, qi[2]]  # the key position predicts the value
        rows.append(ids)
        labels.append(lab)
    n_ctx = len(rows[0]) - 3 * n_q
    s = len(rows[0])
    mask = torch.tril(torch.ones(s, s, dtype=torch.bool))
    mask[n_ctx:, n_ctx:] = False
    for j in range(n_q):
        a = n_ctx + 3 * j
        mask[a : a + 3, a : a + 3] = torch.tril(torch.ones(3, 3, dtype=torch.bool))
    pos = list(range(n_ctx)) + [n_ctx + (i % 3) for i in range(3 * n_q)]
    return torch.tensor(rows), torch.tensor(labels), mask, torch.tensor([pos] * batch)


def _lr_factor(total: int, warmup: int):
    """Our toy schedule: linear warm-up over ``warmup`` steps, constant, then a cosine decay from 1.0
    to 0.1 over the last quarter of ``total`` steps (ours, docs/methods/epicache.md "toy training")."""
    decay_from = int(0.75 * total)

    def lr_factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if step < decay_from:
            return 1.0
        frac = (step - decay_from) / max(1, total - decay_from)
        return 0.1 + 0.45 * (1 + np.cos(np.pi * frac))

    return lr_factor


def _induction_logits(model, tok, rng, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 1 (ours): ``4 * batch`` rows of 40 random words, then queries; (logits, targets) of the queries."""
    ids, targets = induction_batch(rng, 4 * batch, 40, len(SPECIALS), len(tok))
    logits = model(input_ids=ids, use_cache=False).logits
    return logits[:, 40:].reshape(-1, logits.shape[-1]), targets.reshape(-1)


def _chat_logits(model, tok, rng, batch: int, n_q: int, n_sess: int):
    """Stage 2 (ours): toy chats of ``n_sess`` sessions; (logits, targets) at the supervised key positions."""
    ids, lab, mask, pos = _train_batch(
        tok, rng, max(1, batch * 8 // n_sess), min(n_q, 5 * n_sess), n_sess
    )
    with epicache_forward(model, None, extra_mask=mask):
        logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits
    sel = lab != -100
    return logits[:, :-1][sel[:, 1:]], lab[:, 1:][sel[:, 1:]]


def train_toy_model(
    steps: int = 2000,
    batch: int = 8,
    lr: float = 3e-3,
    hidden_size: int = 64,
    seed: int = 0,
    n_q: int = 40,
    time_limit_s: float | None = None,
    curriculum: tuple[int, ...] = (1, 2, 4, 8),
    warmup: int = 30,
    induction_steps: int = 500,
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast, dict[str, float]]:
    """Trains the toy model on freshly sampled conversations (cross-entropy on answer tokens; ours).

    Two stages share one AdamW optimiser (``lr`` after a linear warm-up, cosine decay over the last
    quarter of all steps, :func:`_lr_factor`):

    1. ``induction_steps`` of generic lookup on random words (:func:`_induction_logits`). Trained on the
       toy chats alone, the model sits on a "copy any value in the context" plateau (loss ≈ ln(#facts))
       for thousands of steps, even with 1-session chats, 3-4 layers, wider heads, attention biases or
       a larger init: the fixed fact grammar gives it a class-level shortcut. On structure-free random
       words the same model forms the induction circuit in a few hundred steps, which it then reuses for
       ``? <key>`` (this stage is our addition, docs/methods/epicache.md).
    2. ``steps`` on toy chats (:func:`_chat_logits`), split evenly over ``curriculum``, the number of
       sessions per training conversation; the last stage matches the evaluation length (8 sessions).
       Each conversation asks ``min(n_q, facts)`` questions; a batch holds ``batch * 8 / sessions``
       conversations so every stage sees about the same number of tokens per step.
    """
    if steps < 1 or not curriculum or any(n < 1 for n in curriculum):
        raise ValueError(f"steps must be >= 1 and curriculum non-empty, got {steps}, {curriculum}")
    if induction_steps < 0:
        raise ValueError(f"induction_steps must be >= 0, got {induction_steps}")
    tok = toy_tokenizer()
    model = toy_model(tok, hidden_size, seed)
    model.train()
    rng = np.random.default_rng(seed + 1000)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.98))
    total = induction_steps + steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_factor(total, warmup))
    t0, loss_ema, acc_ema, done = time.perf_counter(), None, 0.0, 0
    stage1: dict[str, float] = {}
    cur: dict = {}  # the step's session count and (logits, targets), for the accuracy

    def loss_fn(step: int) -> torch.Tensor:  # cross-entropy on the answer tokens of the batch
        if step < induction_steps:
            cur["n_sess"] = 0
            cur["pred"], cur["gold"] = _induction_logits(model, tok, rng, batch)
        else:
            k = step - induction_steps
            cur["n_sess"] = curriculum[min(len(curriculum) - 1, k * len(curriculum) // steps)]
            cur["pred"], cur["gold"] = _chat_logits(model, tok, rng, batch, n_q, cur["n_sess"])
        return torch.nn.functional.cross_entropy(cur["pred"], cur["gold"])

    def track(step: int, loss: float) -> bool:  # running stats and log; True: time limit hit
        nonlocal loss_ema, acc_ema, done, stage1
        acc = float((cur["pred"].argmax(-1) == cur["gold"]).float().mean())
        loss_ema = loss if loss_ema is None else 0.95 * loss_ema + 0.05 * loss
        acc_ema = 0.95 * acc_ema + 0.05 * acc
        done = step + 1
        if step == induction_steps - 1:
            stage1 = {"induction_acc": acc_ema, "induction_loss": float(loss_ema)}
        if step % 50 == 0:
            stage = f"{cur['n_sess']} sessions" if cur["n_sess"] else "induction warm-up"
            logger.info("toy train step %d (%s) loss %.3f acc %.3f", step, stage, loss_ema, acc_ema)
        if time_limit_s is not None and time.perf_counter() - t0 > time_limit_s:
            logger.warning("toy training stopped at step %d by the time limit", step)
            return True
        return False

    kw = {"optimizer": opt, "scheduler": sched, "grad_clip": 1.0, "callback": track}
    train_steps(model, loss_fn, total, desc="epicache toy train", **kw)
    model.eval()
    stats = {"train_loss": float(loss_ema), "train_acc": acc_ema, "train_steps": float(done)}
    return model, tok, {**stats, "train_s": time.perf_counter() - t0, **stage1}
