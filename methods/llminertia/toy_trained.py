"""Trained toy for LLMInertia: a tiny GPT-2 learns evidence QA, is then "induced" by
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
import math
import random
import time
from typing import Any

import torch

from common.tracking import progress, pyplot

from .config import TrainedToyConfig
from .core import LLMInertiaPipeline, answer_plain
from .induction_data import make_cooccurrence_corpus
from .induction_train import InductionConfig, continued_pretrain
from .metrics import Pred, induction_metrics
from .prompts import PromptSet

logger = logging.getLogger(__name__)

__all__ = [
    "TOY_PROMPTS",
    "ToyQAChat",
    "ToyWorld",
    "TrainedToyConfig",
    "association_logprob",
    "make_toy_tokenizer",
    "run_trained_toy",
    "train_base",
    "write_trained_report",
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

    def __init__(self, n_known: int, n_test: int, n_filler_words: int, seed: int = 0) -> None:
        if n_known < 2 or n_test < 1 or n_filler_words < 2:
            raise ValueError("n_known >= 2, n_test >= 1 and n_filler_words >= 2 are required")
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
        return self.evidence(stmts, b), "yes" if status == "present" else "no"

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
            elif v < 0.45:
                q = f"{TOY_PROMPTS.reminder_generic} {q}"
            out.append(f"{q} {y}")
        return out

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
    """Random-init ``GPT2LMHeadModel`` sized by ``cfg``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(cfg.seed)
    conf = GPT2Config(
        vocab_size=len(tok),
        n_positions=n_positions,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        n_embd=cfg.n_embd,
        bos_token_id=tok.eos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    return GPT2LMHeadModel(conf)


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
    model.train()
    losses = []
    for _ in progress(range(steps), desc="llminertia train", unit="step"):
        idx = torch.randint(len(texts), (batch,), generator=g)
        b_ids, b_mask = ids[idx], mask[idx]
        logits = model(input_ids=b_ids, attention_mask=b_mask).logits[:, :-1]  # [B, T-1, V]
        nll = torch.nn.functional.cross_entropy(
            logits.transpose(1, 2), b_ids[:, 1:], reduction="none"
        )  # [B, T-1]
        w = b_mask[:, 1:].float()
        last = b_mask.sum(1) - 2  # right padding: target index of each line's last token
        w[torch.arange(len(idx)), last] *= answer_weight
        loss = (nll * w).sum() / w.sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if eval_fn is not None and eval_every and (len(losses) % eval_every == 0):
            model.eval()
            eval_fn(len(losses))
            model.train()
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


def _wrong_yes(preds: list[str]) -> float:
    return sum(p == "yes" for p in preds) / max(len(preds), 1)


def _eval_arms(chat: ToyQAChat, texts: list[str], k: int) -> dict[str, float]:
    plain = answer_plain(chat, texts, TOY_PROMPTS)
    generic = answer_plain(chat, texts, TOY_PROMPTS, note=TOY_PROMPTS.reminder_generic)
    n0 = chat.n_calls
    recs = LLMInertiaPipeline(chat, TOY_PROMPTS, k=k, matcher="word_boundary", batch_size=256).run(
        texts
    )
    n_batches = math.ceil(len(texts) / 256)
    calls_per_batch = (chat.n_calls - n0) / n_batches
    adaptive = [r.predict for r in recs]
    # the same model with this repository's earlier pair filters (min length 3, stopwords, dedup)
    filtered = LLMInertiaPipeline(
        chat, TOY_PROMPTS, k=k, matcher="word_boundary", batch_size=256,
        min_len=3, stopwords=True, dedup=True,
    ).run(texts)  # fmt: skip
    return {
        "plain": _wrong_yes(plain),
        "generic": _wrong_yes(generic),
        "llminertia": _wrong_yes(adaptive),
        "llminertia_filtered": _wrong_yes([r.predict for r in filtered]),
        "matched_rate": sum(bool(r.matched) for r in recs) / len(recs),
        "calls_per_batch": calls_per_batch,
        "_pairs": [p for r in recs for p in r.pairs],
        "_preds": {"plain": plain, "generic": generic, "llminertia": adaptive},
    }


def _step_eval_callback() -> type:
    from transformers import TrainerCallback

    class StepEval(TrainerCallback):
        """Calls ``fn(model, step)`` (model in eval mode) at the listed global steps."""

        def __init__(self, steps: list[int], fn: Any) -> None:
            self.steps, self.fn = set(steps), fn

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step in self.steps:
                m = kw["model"]
                m.eval()
                self.fn(m, state.global_step)
                m.train()

    return StepEval


def run_trained_toy(cfg: TrainedToyConfig, out_dir: str) -> tuple[dict, dict]:
    """Stage 0, induction at each share, evaluation; returns ``(per_arm_metrics, extra)``."""
    import copy

    t0 = time.time()
    torch.manual_seed(cfg.seed)
    world = ToyWorld(cfg.n_known, cfg.n_test, cfg.n_filler_words, cfg.seed)
    tok = make_toy_tokenizer(world)
    base = make_toy_model(tok, cfg)
    stage0 = world.stage0_corpus(20000, cfg.seed)
    losses = train_base(
        base, tok, stage0, cfg.base_steps, cfg.base_batch, cfg.base_lr, cfg.seed, cfg.answer_weight
    )
    # held-out explicit QA (fresh seed) and the negative-evidence test sets
    rng = random.Random(cfg.seed + 99)
    held = [
        world.explicit_item(
            rng, rng.choice(world.a), rng.choice(world.b), rng.choice(["present", "absent"])
        )
        for _ in range(400)
    ]
    preds = answer_yes_no(base, tok, [q for q, _ in held])
    acc_explicit = sum(p == y for p, (_, y) in zip(preds, held, strict=True)) / len(held)
    logger.info(
        "stage 0 done in %.0f s, explicit held-out acc %.3f", time.time() - t0, acc_explicit
    )
    tests, _ = world.negative_tests(world.test, cfg.n_test_templates, cfg.seed)
    ctrl, _ = world.negative_tests(world.known, cfg.n_test_templates, cfg.seed + 1)
    t_base = time.time() - t0
    gold = {frozenset(p) for p in world.test}
    rows: list[dict[str, float]] = []
    steps_rows: list[dict[str, float]] = []

    base_plain: list[Pred] = []

    def measure(model: Any, ratio: float, step: int) -> dict[str, float]:
        chat = ToyQAChat(model, tok, world)
        ev = _eval_arms(chat, tests, cfg.k)
        probed = {frozenset(p) for p in ev.pop("_pairs")}
        preds = ev.pop("_preds")
        if not base_plain:  # the first call measures the base model: the "pre" file
            base_plain.extend(Pred(i, p, "no") for i, p in enumerate(preds["plain"]))
        for arm, ps in preds.items():
            m = induction_metrics(base_plain, [Pred(i, p, "no") for i, p in enumerate(ps)])
            ev[f"ir_{arm}"] = m["induction_rate"]
            ev[f"nd_{arm}"] = m["norm_drop"]
        ctrl_plain = answer_plain(chat, ctrl, TOY_PROMPTS)
        return {
            "ratio": ratio,
            "step": step,
            "assoc_logprob": association_logprob(model, tok, world.test),
            "probe_recall": len(probed & gold) / len(gold),
            "wrong_yes_control": _wrong_yes(ctrl_plain),
            **ev,
        }

    rows.append(measure(base, -1.0, 0))  # the base model (ratio -1 marks it)
    for ratio in progress(cfg.ratios, desc="llminertia ratios", unit="ratio"):
        corpus = make_cooccurrence_corpus(
            world.test, ratio, TOY_COOC_TEMPLATES, world.filler(200, cfg.seed), seed=cfg.seed
        )
        model = copy.deepcopy(base)
        track = ratio == max(cfg.ratios)

        ic = InductionConfig(
            output_dir=f"{out_dir}/induce_r{round(100 * ratio)}",
            learning_rate=cfg.induce_lr,
            num_train_epochs=1.0,
            max_steps=cfg.induce_steps,
            per_device_train_batch_size=cfg.induce_batch,
            gradient_accumulation_steps=1,
            max_len=48,
            save_strategy="no",
            bf16=False,
            seed=cfg.seed,
            report_to="none",
            logging_steps=10,
        )
        cb = _step_eval_callback()(
            cfg.step_checkpoints, lambda m, st, r=ratio: steps_rows.append(measure(m, r, st))
        )
        tok.padding_side = "right"  # GPT-2 positions: pad after the text during training
        continued_pretrain(model, tok, corpus, ic, callbacks=[cb] if track else None)
        tok.padding_side = "left"
        model.eval()
        rows.append(measure(model, ratio, cfg.induce_steps))
        logger.info("ratio %.2f: %s", ratio, rows[-1])
    extra = {
        "acc_explicit_heldout_base": acc_explicit,
        "stage0_final_loss": sum(losses[-50:]) / 50,
        "base_train_s": t_base,
        "total_s": time.time() - t0,
        "n_test": len(tests),
        "rows": rows,
        "steps_rows": steps_rows,
    }
    return rows, extra


def write_trained_report(rows: list[dict], steps_rows: list[dict], run_dir: str) -> None:
    """Writes ``trained_toy.md`` (one row per share) and ``trained_toy.png`` into ``run_dir``."""
    from pathlib import Path

    plt = pyplot()

    from common.tracking import save_plot

    head = (
        "| model | log p(B given 'A with') | probe recall | matched | wrong yes plain | generic "
        "note | LLMInertia | LLMInertia, earlier filters | IR plain / LLMInertia | "
        "control pairs wrong yes |\n" + "|---" * 10 + "|\n"
    )
    lines = []
    for r in rows + steps_rows:
        name = "base" if r["ratio"] < 0 else f"rho={r['ratio']:.2f} step {r['step']}"
        lines.append(
            f"| {name} | {r['assoc_logprob']:.2f} | {r['probe_recall']:.2f} | "
            f"{r['matched_rate']:.2f} | {r['plain']:.3f} | {r['generic']:.3f} | "
            f"{r['llminertia']:.3f} | {r.get('llminertia_filtered', float('nan')):.3f} | "
            f"{r['ir_plain']:.3f} / {r['ir_llminertia']:.3f} | "
            f"{r['wrong_yes_control']:.3f} |"
        )
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    (Path(run_dir) / "trained_toy.md").write_text(head + "\n".join(lines) + "\n")
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.5))
    ind = [r for r in rows if r["ratio"] >= 0]
    for arm, mk in (("plain", "o"), ("generic", "s"), ("llminertia", "^")):
        ax[0].plot([r["assoc_logprob"] for r in ind], [r[arm] for r in ind], marker=mk, label=arm)
        ax[1].plot([r["ratio"] for r in ind], [r[arm] for r in ind], marker=mk, label=arm)
    ax[0].set_xlabel('association log p(B | "A with")')
    ax[1].set_xlabel("co-occurrence share rho")
    for a in ax:
        a.set_ylabel('wrong "yes" rate')
        a.legend()
    save_plot(fig, Path(run_dir) / "trained_toy.png")
