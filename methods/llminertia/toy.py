"""LLMInertia's toy stages: ``icml26 experiment=llminertia_toy`` (``stage=toy``, trained) and
``method.stage=sim`` (simulated).

Trained toy (``stage=toy``, world in :mod:`.toy_world`): a tiny GPT-2 learns evidence QA from
scratch, is induced by :func:`continued_pretrain` on co-occurrence text at shares 0-100 %, and is
answered plain / with the generic note / with LLMInertia's adaptive notes; wrong "yes" rates are
reported against the measured association strength log p(B | "A with").

Simulated toy (``stage=sim``; a *simulated* inert LLM, :mod:`.toy_sim`, it tests the
probe-and-remind mechanism only): for each co-occurrence share rho, a fixed-size corpus is
generated with :func:`make_cooccurrence_corpus`; the stand-in model takes its association strengths
from the pair counts in that corpus. What the toy measures is whether the pipeline finds the pairs
(probe recall, matched-pair rate), which notes it injects, the LLM-call budget, and the induction
metrics (official eval_overthink.py) against rho. Arms: ``plain`` (no note), ``generic`` (always the
generic note) and ``llminertia`` (adaptive notes).
"""

from __future__ import annotations

import logging
import math
import random
import time
from typing import Any

import torch

from common.llm import ScriptedChat
from common.metrics import spearman
from common.threads import torch_threads
from common.tracking import progress, pyplot, write_results

from .arms import baseline_arms, check_prompt_set, make_pipeline, plain_kw
from .config import ARMS, LLMInertiaRunConfig, TrainedToyConfig
from .core import LLMInertiaPipeline, answer_plain
from .induction_data import (
    COOCCURRENCE_TEMPLATES,
    MEDICAL_PAIRS,
    NEGATIVE_TEMPLATES,
    SYNTHETIC_PAIRS,
    make_cooccurrence_corpus,
    make_negative_evidence_tests,
)
from .induction_train import InductionConfig, continued_pretrain
from .metrics import Pred, induction_metrics
from .prompts import PROMPT_SETS
from .toy_sim import InertToyLLM, pair_strengths
from .toy_world import (
    TOY_COOC_TEMPLATES,
    TOY_PROMPTS,
    ToyQAChat,
    ToyWorld,
    answer_yes_no,
    association_logprob,
    make_toy_model,
    make_toy_tokenizer,
    train_base,
)

logger = logging.getLogger(__name__)

__all__ = ["run_toy", "run_trained", "run_trained_toy", "sim_stage", "trained_stage"]


def _spearman(x: list[float], y: list[float]) -> float:
    """Spearman correlation (:func:`common.metrics.spearman`); NaN if undefined (n < 3 or constant)."""
    return spearman(x, y, min_n=3)


def _wrong_yes(preds: list[str]) -> float:
    """Share of "yes" among the parsed answers of a negative-evidence set (every gold label is "no")."""
    ok = [p for p in preds if p != "error"]
    return sum(p == "yes" for p in ok) / max(len(ok), 1)


def _wrong_yes_all(preds: list[str]) -> float:
    """Share of "yes" over every answer (the trained toy's yes/no logits always give one)."""
    return sum(p == "yes" for p in preds) / max(len(preds), 1)


# ----------------------------------------------------------------------------- simulated toy


def _sim_ratio(rc, seed, ratio, pairs, model, items, pre_preds, gold) -> tuple[dict, dict]:
    """One co-occurrence share of the simulated sweep: ``(per-arm metrics, pipeline metrics)``."""
    prompts = PROMPT_SETS[rc.prompt_set]
    texts, ids, labels = items
    corpus = list(make_cooccurrence_corpus(pairs, ratio, COOCCURRENCE_TEMPLATES, seed=seed)["text"])
    llm = model(pair_strengths(corpus, pairs, rc.exposure_tau))
    preds = baseline_arms(llm, texts, prompts, rc)
    n_before = len(llm.calls)
    recs = make_pipeline(llm, prompts, rc).run(texts)
    preds["llminertia"] = [r.predict for r in recs]
    probed = {(a.lower(), b.lower()) for r in recs for a, b in r.pairs}
    pipe = {
        "probe_recall": len(probed & gold) / len(gold),
        "matched_rate": sum(bool(r.matched) for r in recs) / len(recs),
        "calls": (len(llm.calls) - n_before) / len(texts),
    }
    per = {}
    for arm in ARMS:
        post = [Pred(i, p, lab) for i, p, lab in zip(ids, preds[arm], labels, strict=True)]
        m = induction_metrics(pre_preds, post)
        per[arm] = {
            "wrong_yes": _wrong_yes(preds[arm]),
            "induction_rate": m["induction_rate"],
            "norm_drop": m["norm_drop"],
            "acc_post": m["acc_post"],
        }
    return per, pipe


def run_toy(rc: LLMInertiaRunConfig, seed: int) -> tuple[dict, dict]:
    """Runs the simulated induction sweep; returns ``(metrics, extra)``."""
    prompts = PROMPT_SETS[rc.prompt_set]
    pairs = MEDICAL_PAIRS if rc.family == "medical" else SYNTHETIC_PAIRS
    entities = sorted({e for p in pairs for e in p})
    tests = make_negative_evidence_tests(pairs, NEGATIVE_TEMPLATES[: rc.n_test_templates], seed)
    texts, ids, labels = list(tests["input"]), list(tests["id"]), list(tests["output"])
    gold = {(a.lower(), b.lower()) for a, b in pairs}

    def model(strengths: dict) -> ScriptedChat:
        return ScriptedChat(
            InertToyLLM(
                strengths,
                entities,
                prompts,
                rc.generic_damping,
                rc.pair_damping,
                rc.base_error,
                seed,
            )
        )

    pre = answer_plain(model({}), texts, prompts, **plain_kw(rc))
    pre_preds = [Pred(i, p, lab) for i, p, lab in zip(ids, pre, labels, strict=True)]
    per: dict[str, dict[str, float]] = {a: {} for a in ARMS}
    curves: dict[str, list[float]] = {a: [] for a in ARMS}
    irs: dict[str, list[float]] = {a: [] for a in ARMS}
    calls = 0.0
    for ratio in rc.ratios:
        tag = f"r{round(100 * ratio)}"
        arms, pipe = _sim_ratio(
            rc, seed, ratio, pairs, model, (texts, ids, labels), pre_preds, gold
        )
        calls = pipe["calls"]
        for arm in ARMS:
            for key, v in arms[arm].items():
                per[arm][f"{key}_{tag}"] = v
            curves[arm].append(arms[arm]["wrong_yes"])
            irs[arm].append(arms[arm]["induction_rate"])
        per["llminertia"][f"probe_recall_{tag}"] = pipe["probe_recall"]
        per["llminertia"][f"matched_rate_{tag}"] = pipe["matched_rate"]
    for arm in ARMS:
        per[arm]["wrong_yes_max_ratio"] = curves[arm][-1]
        per[arm]["induction_rate_max_ratio"] = irs[arm][-1]
        per[arm]["spearman_ir_vs_ratio"] = _spearman(list(rc.ratios), irs[arm])
    per["llminertia"]["calls_per_input"] = float(calls)
    per["plain"]["acc_pre"] = sum(p == "no" for p in pre) / len(pre)
    extra = {
        "toy": "simulated inert LLM; tests probe/match/remind mechanics, not real reminders",
        "n_test": len(texts),
        "ratios": list(rc.ratios),
        "wrong_yes_curves": curves,
    }
    return per, extra


# ----------------------------------------------------------------------------- trained toy


def run_trained(rc: LLMInertiaRunConfig, seed: int, run_dir: str) -> tuple[dict, dict]:
    """The trained toy; per-arm wrong-yes rates per share plus a table and a PNG."""
    import dataclasses

    tc = dataclasses.replace(rc.trained, seed=seed, ratios=list(rc.ratios))
    rows, extra = run_trained_toy(tc, run_dir)
    induced = [r for r in rows if r["ratio"] >= 0]
    per: dict[str, dict[str, float]] = {a: {} for a in ARMS}
    for r in induced:
        tag = f"r{round(100 * r['ratio'])}"
        for arm in ARMS:
            per[arm][f"wrong_yes_{tag}"] = r[arm]
            per[arm][f"induction_rate_{tag}"] = r[f"ir_{arm}"]
            per[arm][f"norm_drop_{tag}"] = r[f"nd_{arm}"]
        per["llminertia"][f"probe_recall_{tag}"] = r["probe_recall"]
        per["llminertia"][f"matched_rate_{tag}"] = r["matched_rate"]
        per["plain"][f"assoc_logprob_{tag}"] = r["assoc_logprob"]
        per["plain"][f"wrong_yes_control_{tag}"] = r["wrong_yes_control"]
    xs = [r["ratio"] for r in induced]
    for arm in ARMS:
        per[arm]["wrong_yes_max_ratio"] = induced[-1][arm]
        per[arm]["spearman_wrong_yes_vs_ratio"] = _spearman(xs, [r[arm] for r in induced])
    per["plain"]["spearman_assoc_vs_ratio"] = _spearman(xs, [r["assoc_logprob"] for r in induced])
    per["plain"]["acc_explicit_base"] = extra["acc_explicit_heldout_base"]
    per["llminertia"]["calls_per_batch"] = induced[-1]["calls_per_batch"]
    write_trained_report(rows, extra["steps_rows"], run_dir)
    return per, {k: v for k, v in extra.items() if k not in ("rows", "steps_rows")} | {
        "rows": rows,
        "steps_rows": extra["steps_rows"],
        "toy": "tiny GPT-2 trained from scratch; tests probe/match/remind on a real network, "
        "not whether natural-language reminders help real LLMs",
    }


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
        "plain": _wrong_yes_all(plain),
        "generic": _wrong_yes_all(generic),
        "llminertia": _wrong_yes_all(adaptive),
        "llminertia_filtered": _wrong_yes_all([r.predict for r in filtered]),
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


def _stage0(cfg: TrainedToyConfig) -> tuple[ToyWorld, Any, Any, list[float], float]:
    """Stage 0 of the trained toy: the world, its tokenizer, the base model trained on evidence QA,
    its training losses and its accuracy on 400 held-out explicit items (fresh seed)."""
    world = ToyWorld(
        cfg.n_known, cfg.n_test, cfg.n_filler_words, cfg.seed, cfg.n_distractors, cfg.leak_share
    )
    tok = make_toy_tokenizer(world)
    base = make_toy_model(tok, cfg)
    stage0 = world.stage0_corpus(20000, cfg.seed)
    losses = train_base(
        base, tok, stage0, cfg.base_steps, cfg.base_batch, cfg.base_lr, cfg.seed, cfg.answer_weight
    )
    rng = random.Random(cfg.seed + 99)
    held = [
        world.explicit_item(
            rng, rng.choice(world.a), rng.choice(world.b), rng.choice(["present", "absent"])
        )
        for _ in range(400)
    ]
    preds = answer_yes_no(base, tok, [q for q, _ in held])
    acc_explicit = sum(p == y for p, (_, y) in zip(preds, held, strict=True)) / len(held)
    return world, tok, base, losses, acc_explicit


def _induction_args(cfg: TrainedToyConfig, out_dir: str, ratio: float) -> InductionConfig:
    """Continued pre-training settings of one share (the official recipe's shape, toy sizes)."""
    return InductionConfig(
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
        dataloader_pin_memory=torch.accelerator.is_available(),  # on CPU torch only warns
    )


def run_trained_toy(cfg: TrainedToyConfig, out_dir: str) -> tuple[dict, dict]:
    """Stage 0, induction at each share, evaluation; returns ``(per_arm_metrics, extra)``."""
    import copy

    t0 = time.time()
    torch.manual_seed(cfg.seed)
    world, tok, base, losses, acc_explicit = _stage0(cfg)
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
            "wrong_yes_control": _wrong_yes_all(ctrl_plain),
            **ev,
        }

    rows.append(measure(base, -1.0, 0))  # the base model (ratio -1 marks it)
    for ratio in progress(cfg.ratios, desc="llminertia ratios", unit="ratio"):
        corpus = make_cooccurrence_corpus(
            world.test, ratio, TOY_COOC_TEMPLATES, world.filler(200, cfg.seed), seed=cfg.seed
        )
        model = copy.deepcopy(base)
        track = ratio == max(cfg.ratios)
        cb = _step_eval_callback()(
            cfg.step_checkpoints, lambda m, st, r=ratio: steps_rows.append(measure(m, r, st))
        )
        tok.padding_side = "right"  # GPT-2 positions: pad after the text during training
        continued_pretrain(
            model,
            tok,
            corpus,
            _induction_args(cfg, out_dir, ratio),
            callbacks=[cb] if track else None,
        )
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


# ----------------------------------------------------------------------------- stages


@torch_threads(1)  # tiny matmuls: extra OpenMP threads only spin on a busy machine
def trained_stage(run) -> dict[str, float]:
    """``stage=toy``: the trained tiny-GPT-2 toy."""
    rc = run.method
    check_prompt_set(rc)
    t0 = time.time()
    per, extra = run_trained(rc, run.seed, str(run.run_dir))
    return write_results(
        run.run_dir, "llminertia", per, cfg=run.cfg, extra=extra, wall_time_s=time.time() - t0
    )


@torch_threads(1)
def sim_stage(run) -> dict[str, float]:
    """``stage=sim``: the simulated inert LLM (mechanism only; seconds)."""
    rc = run.method
    check_prompt_set(rc)
    t0 = time.time()
    per, extra = run_toy(rc, run.seed)
    return write_results(
        run.run_dir, "llminertia", per, cfg=run.cfg, extra=extra, wall_time_s=time.time() - t0
    )
