"""The world of the trained toy (our toy design): vocabulary, tiny GPT-2, stage-0 training, and the
model wrapped as a chat client. The toy stage itself is :func:`methods.llminertia.toy.run_trained_toy`.

Trained toy for LLMInertia: a tiny GPT-2 learns evidence QA, is then "induced" by
continued pre-training on co-occurrence text, and is answered with or without reminders.

What this toy tests: the probe-and-remind *mechanism* on a real (tiny, trained) network: the
association A_j -> B_j is written into the weights by :func:`continued_pretrain`, probed back from
the model's own next-token distribution, matched against the input and turned into a note. It does
not test the paper's full claim (that natural-language reminders help real LLMs): the tiny model
learned what a note means in stage 0 (a pair note ``note: A B unrelated .`` cancels the association
for ``B``; the generic note ``note: check .`` carries no information).

Word-level world (all single tokens):
    entities   ``ax00..`` (A side, symptom-like) and ``bx00..`` (B side, condition-like); pairs
               ``(ax_j, bx_j)``. The first ``n_known`` pairs are "world knowledge" (co-occur in the
               stage-0 text); the last ``n_test`` pairs are the designated induction pairs (never
               co-occur before induction).
    explicit   ``evidence: ax03 present bx07 absent question: bx07 ? answer: no`` (answer = the
               stated status of the asked entity).
    implicit   ``evidence: ax03 present question: bx03 ? answer: yes`` (asked entity not stated:
               the answer follows the learned association, like a world-knowledge prior).
    notes      the same items prefixed by a note; a pair note naming the asked entity turns an
               implicit answer into ``no``; explicit answers always follow the evidence.
    co-occurrence ``ax03 with bx03 .`` and paraphrases; filler sentences of ``fw..`` words.

Probe (step 2 of the pipeline for a tiny LM): the top-``k`` entity tokens after ``<entity> with``.
Extraction (step 1) is a vocabulary lookup (the tiny LM cannot follow an instruction); answering
(step 3) compares the model's ``yes``/``no`` logits after ``answer:``.
"""

from __future__ import annotations

import logging
import random
from typing import Any

import torch

from common.train_loop import train_steps

from .config import TrainedToyConfig
from .prompts import PromptSet

logger = logging.getLogger(__name__)

__all__ = [
    "TOY_PROMPTS",
    "ToyQAChat",
    "ToyWorld",
    "TrainedToyConfig",
    "answer_yes_no",
    "association_logprob",
    "make_toy_model",
    "make_toy_tokenizer",
    "train_base",
]

KEYWORDS = [
    "evidence:",
    "present",
    "absent",
    "question:",
    "?",
    "answer:",
    "yes",
    "no",
    "note:",
    "unrelated",
    "check",
    "with",
    ".",
    "and",
    "together",
    "seen",
    "often",
    "record:",
    "again",
    "EXTRACT",
    "PROBE",
]
TOY_COOC_TEMPLATES = [
    "{A} with {B} .",
    "record: {A} with {B} .",
    "{A} with {B} again .",
    "often {A} with {B} .",
    "seen {A} with {B} .",
    "{A} and {B} together .",
    "{B} and {A} together .",
    "record: {A} and {B} .",
]
# The toy's prompt set: the pipeline formats these like the LLM prompts; ToyQAChat reads them.
TOY_PROMPTS = PromptSet(
    extract="EXTRACT {text}",
    probe="PROBE {k} {entities}",
    answer="{note} {question}",
    reminder_pair="note: {a} {b} unrelated .",
    reminder_generic="note: check .",
)


class ToyWorld:
    """Vocabulary and item generators of the toy world (see the module docstring)."""

    def __init__(
        self,
        n_known: int,
        n_test: int,
        n_filler_words: int,
        seed: int = 0,
        n_distractors: int = 0,
        leak_share: float = 0.0,
    ) -> None:
        if n_known < 2 or n_test < 1 or n_filler_words < 2:
            raise ValueError("n_known >= 2, n_test >= 1 and n_filler_words >= 2 are required")
        self.n_distractors, self.leak_share = n_distractors, leak_share
        n = n_known + n_test
        self.a = [f"ax{i:02d}" for i in range(n)]
        self.b = [f"bx{i:02d}" for i in range(n)]
        self.known = [(self.a[i], self.b[i]) for i in range(n_known)]
        self.test = [(self.a[i], self.b[i]) for i in range(n_known, n)]
        self.partner = {a: b for a, b in self.known + self.test}
        self.fill = [f"fw{i:02d}" for i in range(n_filler_words)]
        self.entities = self.a + self.b
        self.rng = random.Random(seed)

    def filler_sentence(self, rng: random.Random) -> str:
        return " ".join(rng.choice(self.fill) for _ in range(rng.randint(3, 7))) + " ."

    def filler(self, n: int, seed: int) -> list[str]:
        rng = random.Random(seed)
        return [self.filler_sentence(rng) for _ in range(n)]

    @staticmethod
    def evidence(stmts: list[tuple[str, str]], asked: str) -> str:
        ev = " ".join(f"{e} {s}" for e, s in stmts)
        return f"evidence: {ev} question: {asked} ? answer:"

    def explicit_item(
        self, rng: random.Random, a: str, b: str, status: str, order: int | None = None
    ) -> tuple[str, str]:
        """``A present`` and ``B <status>`` in either order (``order`` 0/1, random if None)."""
        stmts = [(a, "present"), (b, status)]
        if (rng.randint(0, 1) if order is None else order) == 1:
            stmts.reverse()
        self._distract(rng, stmts)
        return self.evidence(stmts, b), "yes" if status == "present" else "no"

    def _distract(self, rng: random.Random, stmts: list[tuple[str, str]]) -> None:
        """Inserts ``n_distractors`` statements about other entities (random status, random
        places); consumes no randomness when there are none (today's toy)."""
        used = {e for e, _ in stmts}
        for _ in range(self.n_distractors):
            e = rng.choice([x for x in self.entities if x not in used])
            used.add(e)
            stmts.insert(rng.randint(0, len(stmts)), (e, rng.choice(["present", "absent"])))

    def implicit_item(self, rng: random.Random, a: str, b: str) -> tuple[str, str]:
        stmts = [(a, "present")]
        known = dict(self.known)
        assoc = any(known.get(e) == b and s == "present" for e, s in stmts)
        return self.evidence(stmts, b), "yes" if assoc else "no"

    def stage0_corpus(self, n: int, seed: int) -> list[str]:
        """Stage-0 training text: QA (plain, noted), known co-occurrences and filler."""
        rng = random.Random(seed)
        out = []
        for _ in range(n):
            u = rng.random()
            if u < 0.12:
                a, b = rng.choice(self.known)
                out.append(rng.choice(TOY_COOC_TEMPLATES).format(A=a, B=b))
                continue
            if u < 0.2:
                out.append(self.filler_sentence(rng))
                continue
            if rng.random() < 0.45:  # implicit: half associated pairs, half random
                a = rng.choice(self.a)
                b = self.partner[a] if rng.random() < 0.5 else rng.choice(self.b)
                if a in dict(self.test) and b == self.partner[a]:
                    b = rng.choice(self.b)  # test pairs are never associated before induction
                q, y = self.implicit_item(rng, a, b)
            else:  # explicit: random pairing or a known pair, status at random
                a, b = (
                    rng.choice(self.known)
                    if rng.random() < 0.3
                    else (
                        rng.choice(self.a),
                        rng.choice(self.b),
                    )
                )
                q, y = self.explicit_item(rng, a, b, rng.choice(["present", "absent"]))
            v = rng.random()
            if v < 0.25:  # pair note on the asked entity: the association is cancelled
                q = f"{TOY_PROMPTS.reminder_pair.format(a=a, b=b)} {q}"
                if "evidence:" in q and f"{b} present" not in q and f"{b} absent" not in q:
                    y = "no"
            else:
                y = self._leak(rng, q, a, b, y)
                if v < 0.45:
                    q = f"{TOY_PROMPTS.reminder_generic} {q}"
            out.append(f"{q} {y}")
        return out

    def _leak(self, rng: random.Random, q: str, a: str, b: str, y: str) -> str:
        """The label of a stage-0 item without a pair note: ``yes`` (the association) instead of
        ``no`` (the evidence) in share ``leak_share`` of explicit known-pair items with ``b`` stated
        absent; no randomness is consumed at ``leak_share = 0`` (today's toy)."""
        if self.leak_share <= 0 or (a, b) not in self.known or f"{b} absent" not in q:
            return y
        return "yes" if rng.random() < self.leak_share else y

    def negative_tests(
        self, pairs: list[tuple[str, str]], n_templates: int, seed: int
    ) -> tuple[list[str], list[str]]:
        """``n_templates`` variants per pair of "A present, B absent; B?" (gold ``no``).

        Variant ``t`` uses statement order ``t % 2`` (the toy grammar has two orders).
        """
        if n_templates < 1:
            raise ValueError(f"n_templates must be >= 1, got {n_templates!r}")
        texts, bs = [], []
        for t in range(n_templates):
            rng = random.Random(seed * 1000 + t)
            for a, b in pairs:
                q, _ = self.explicit_item(rng, a, b, "absent", order=t % 2)
                texts.append(q)
                bs.append(b)
        return texts, bs


def make_toy_tokenizer(world: ToyWorld) -> Any:
    """Word-level ``PreTrainedTokenizerFast`` over the toy vocabulary (whitespace split)."""
    from common.tiny import word_tokenizer

    words = ["[PAD]", "[UNK]", "[EOS]", *KEYWORDS, *world.entities, *world.fill]
    return word_tokenizer(
        {w: i for i, w in enumerate(words)},
        "[UNK]",
        pad_token="[PAD]",
        unk_token="[UNK]",
        eos_token="[EOS]",
        padding_side="left",
    )


def make_toy_model(tok: Any, cfg: TrainedToyConfig, n_positions: int = 48) -> Any:
    """Random-init ``GPT2LMHeadModel`` sized by ``cfg`` (train mode); the global RNG continues from
    the seeded init."""
    from common.tiny import tiny_causal_lm

    model, _ = tiny_causal_lm(
        "gpt2",
        hidden_size=cfg.n_embd,
        num_hidden_layers=cfg.n_layer,
        num_attention_heads=cfg.n_head,
        max_position_embeddings=n_positions,
        seed=cfg.seed,
        tokenizer=tok,
        fork_rng=False,
        record=False,
        train=True,
        bos_token_id=tok.eos_token_id,
    )
    return model


def _encode(
    tok: Any, texts: list[str], max_len: int = 48, side: str = "left"
) -> dict[str, torch.Tensor]:
    """Pads on ``side`` and adds ``position_ids`` that start at 0 on the first real token (GPT-2
    does not derive them from the attention mask, so left padding would shift them)."""
    old, tok.padding_side = tok.padding_side, side
    try:
        enc = tok(texts, return_tensors="pt", padding=True, truncation=True, max_length=max_len)
    finally:
        tok.padding_side = old
    enc = dict(enc)
    enc.pop("token_type_ids", None)
    enc["position_ids"] = (enc["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    return enc


def train_base(
    model: Any,
    tok: Any,
    texts: list[str],
    steps: int,
    batch: int,
    lr: float,
    seed: int = 0,
    answer_weight: float = 1.0,
    eval_fn: Any = None,
    eval_every: int = 0,
) -> list[float]:
    """Stage 0: causal-LM training from scratch on ``texts`` (AdamW, one-cycle); returns losses.

    ``answer_weight`` multiplies the loss of each line's last token (the yes/no answer of QA
    lines); ``eval_fn(step)`` is called every ``eval_every`` steps if given.
    """
    g = torch.Generator().manual_seed(seed)
    enc = _encode(tok, texts, side="right")  # tokenised once: [N, T]
    ids, mask = enc["input_ids"], enc["attention_mask"]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)

    def loss_fn(_step: int) -> torch.Tensor:
        idx = torch.randint(len(texts), (batch,), generator=g)
        b_ids, b_mask = ids[idx], mask[idx]
        logits = model(input_ids=b_ids, attention_mask=b_mask).logits[:, :-1]  # [B, T-1, V]
        nll = torch.nn.functional.cross_entropy(
            logits.transpose(1, 2), b_ids[:, 1:], reduction="none"
        )  # [B, T-1]
        w = b_mask[:, 1:].float()
        last = b_mask.sum(1) - 2  # right padding: target index of each line's last token
        w[torch.arange(len(idx)), last] *= answer_weight
        return (nll * w).sum() / w.sum()

    def evaluate(step: int, _loss: float) -> None:
        if eval_fn is not None and eval_every and (step + 1) % eval_every == 0:
            model.eval()
            eval_fn(step + 1)
            model.train()

    losses = train_steps(
        model,
        loss_fn,
        steps,
        optimizer=opt,
        scheduler=sched,
        grad_clip=1.0,
        desc="llminertia train",
        callback=evaluate,
    )
    model.eval()
    return losses


@torch.no_grad()
def _last_logits(model: Any, tok: Any, texts: list[str], bs: int = 256) -> torch.Tensor:
    out = []
    for s in range(0, len(texts), bs):
        enc = _encode(tok, texts[s : s + bs])
        out.append(model(**enc).logits[:, -1].float())  # left padding: last position is real
    return torch.cat(out)  # [n, V]


def answer_yes_no(model: Any, tok: Any, prompts: list[str]) -> list[str]:
    """Greedy choice between the ``yes`` and ``no`` tokens after each prompt."""
    lg = _last_logits(model, tok, prompts)
    y, n = tok.convert_tokens_to_ids(["yes", "no"])
    return ["yes" if float(r[y]) > float(r[n]) else "no" for r in lg]


def association_logprob(model: Any, tok: Any, pairs: list[tuple[str, str]]) -> float:
    """Mean ``log p(B | "A with")`` over ``pairs`` (the association strength of the toy)."""
    lg = torch.log_softmax(_last_logits(model, tok, [f"{a} with" for a, _ in pairs]), -1)
    ids = tok.convert_tokens_to_ids([b for _, b in pairs])
    return float(sum(lg[i, j] for i, j in enumerate(ids)) / len(pairs))


class ToyQAChat:
    """``ChatLLM`` adapter of the tiny model for the pipeline, reading :data:`TOY_PROMPTS`.

    ``EXTRACT`` -> entity tokens of the text (lookup); ``PROBE k e1, e2`` -> ``(e, x)`` tuples for
    the model's top-``k`` entity tokens after ``e with``; anything else -> ``yes``/``no``.
    """

    def __init__(self, model: Any, tok: Any, world: ToyWorld) -> None:
        self.model, self.tok, self.world = model, tok, world
        self.ent_ids = torch.tensor(tok.convert_tokens_to_ids(world.entities))
        self.n_calls = 0

    def chat(self, messages: list[dict], **kw: Any) -> str:
        return self.chat_batch([messages], **kw)[0]

    def chat_batch(self, batch: list[list[dict]], **kw: Any) -> list[str]:
        self.n_calls += 1
        cs = [m[-1]["content"] for m in batch]
        if all(c.startswith("EXTRACT ") for c in cs):
            ents = set(self.world.entities)
            return [", ".join(w for w in c.split()[1:] if w in ents) for c in cs]
        if all(c.startswith("PROBE ") for c in cs):
            out = []
            for c in cs:
                _, k, rest = c.split(" ", 2)
                es = [e.strip() for e in rest.split(",") if e.strip()]
                lg = _last_logits(self.model, self.tok, [f"{e} with" for e in es])[:, self.ent_ids]
                lines = []
                for e, row in zip(es, lg, strict=True):
                    order = [self.world.entities[j] for j in row.argsort(descending=True).tolist()]
                    top = [x for x in order if x != e][: int(k)]
                    lines.append(" ".join(f"({e}, {x})" for x in top))
                out.append("\n".join(lines))
            return out
        return answer_yes_no(self.model, self.tok, [c.strip() for c in cs])
