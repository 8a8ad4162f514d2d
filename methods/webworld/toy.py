"""WebWorld's CPU toy "MiniWorld", the ``toy`` stage: ``icml26 experiment=webworld_toy``.

A tiny causal LM (``common.tiny`` Llama, 2 layers, hidden 64, random init; a WordLevel tokenizer of
the site grammar) is warmed up on a random-word lookup task (``common.tiny.induction_warmup``), then
trained with TRL ``SFTTrainer`` (Stage-1 recipe: loss on every assistant turn) as
a world model of generated A11y websites (:mod:`methods.webworld.toy_sites`), in the chat format of
paper App. N.1. On held-out sites:

1. **data scale**: models trained on a small vs a large crawl set (equal epochs); metric
   ``effect_acc`` = share of transitions whose predicted state shows the main effect of the action
   (the new title after a link / Search / ``go_back``; the changed line after fill / checkbox);
2. **history**: the large model with the full multi-turn context vs a single-step context
   (``WebWorldSimulator(history="single")``), on the ``go_back`` split and the other splits;
3. **lookahead**: "reach page X" episodes with a noisy agent (correct link with probability
   ``agent_p``, else a random action); greedy vs best-of-k through a copy model (predicts no change),
   the learned model, and the ground-truth browser (oracle). Value = 1 if the predicted title is the
   target.
"""

from __future__ import annotations

import logging
import random
import statistics
import tempfile
import time

from common.config import Run
from common.generation import HFGenerator
from common.threads import torch_threads
from common.tiny import induction_warmup, tiny_causal_lm
from common.tracking import write_results
from methods.webworld.config import WebWorldRunConfig
from methods.webworld.data import Trajectory
from methods.webworld.simulator import WebWorldSimulator
from methods.webworld.toy_lookahead import CopySim, OracleSim, lookahead  # noqa: F401 (re-export)
from methods.webworld.toy_sites import (
    BODY_WORDS,
    QUERY_WORDS,
    TITLE_WORDS,
    crawl,
    make_sites,
    page_title,
)
from methods.webworld.train import chat_dataset, site_tokenizer, stage1_config, train_world_model

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------ effect metric
def _lines(s: str) -> set[str]:
    return {ln.strip() for ln in s.strip().split("\n") if ln.strip()}


def effect_present(prev: str, pred: str, gt: str) -> bool:
    """The toy's programmatic Factuality: does ``pred`` show the main effect of ``prev -> gt``?

    If the title changes, the predicted title must equal the true one; otherwise every line that
    changed (present in ``gt``, absent in ``prev``) must appear in ``pred``.
    """
    t_prev, t_gt = page_title(prev), page_title(gt)
    if t_gt != t_prev:
        return page_title(pred) == t_gt
    changed = _lines(gt) - _lines(prev)
    return bool(changed) and changed <= _lines(pred) and page_title(pred) == t_gt


def line_f1(pred: str, gt: str) -> float:
    """F1 between the sets of stripped lines."""
    p, g = _lines(pred), _lines(gt)
    if not p or not g:
        return 0.0
    tp = len(p & g)
    return 0.0 if tp == 0 else 2 * tp / (len(p) + len(g))


def _kind(action: str, prev: str, gt: str) -> str:
    if action.startswith("go_back"):
        return "go_back"
    if action.startswith("fill"):
        return "fill"
    if page_title(prev) != page_title(gt):
        return "search" if (page_title(gt) or "").startswith("Results for") else "click"
    return "check"


def evaluate_effects(gen, trajs: list[Trajectory], history: str, tc: WebWorldRunConfig) -> dict:
    """Predicts every transition of ``trajs`` (true history in the context) and scores it.

    Transitions that change the title (click, Search, ``go_back``) are scored on the title alone, so
    their prediction stops after the first line (``tc.title_tokens`` new tokens, our toy design); fill and
    checkbox transitions get a full page (``tc.max_new_tokens``), which ``line_f1`` also scores.
    """
    items = []
    for tr in trajs:
        sim = WebWorldSimulator(
            gen,
            window=None,
            history=history,
            temperature=0.0,
            max_tokens=tc.max_new_tokens,
            prompts=tc.prompts or None,
        )
        sim.reset(tr.states[0])
        for t, a in enumerate(tr.actions):
            prev, gt = tr.states[t], tr.states[t + 1]
            items.append((sim.prompt(a), prev, a, gt, page_title(prev) != page_title(gt)))
            sim.commit(a, gt)
    preds: list[str] = [""] * len(items)
    for title_only, n_tok in ((True, tc.title_tokens), (False, tc.max_new_tokens)):
        idx = [i for i, it in enumerate(items) if it[4] == title_only]
        if not idx:
            continue
        outs = gen.generate([items[i][0] for i in idx], n=1, params=_greedy(n_tok))
        for i, o in zip(idx, outs, strict=True):
            text = o[0].text
            preds[i] = text.split("\n", 1)[0] if title_only else text
    for i in range(min(2, len(items))):
        logger.info("example (%s): %r -> %r", history, items[i][2], preds[i][:160])
    per: dict[str, list[float]] = {}
    f1s = []
    for (_, prev, a, gt, title_only), pred in zip(items, preds, strict=True):
        ok = float(effect_present(prev, pred, gt))
        per.setdefault(_kind(a, prev, gt), []).append(ok)
        per.setdefault("all", []).append(ok)
        if not title_only:
            f1s.append(line_f1(pred, gt))
    out = {f"{k}_acc": statistics.mean(v) for k, v in per.items()}
    out.update({f"n_{k}": float(len(v)) for k, v in per.items() if k != "all"})
    out["effect_acc"] = out.pop("all_acc")
    out["line_f1"] = statistics.mean(f1s) if f1s else float("nan")
    return out


def _greedy(n):
    from common.generation import SamplingParams

    return SamplingParams(max_new_tokens=n, temperature=0.0)


# ------------------------------------------------------------------------------------------- run
def _grammar_texts() -> list[str]:
    """Every word and bid of the site grammar in each position it can take (tokenizer corpus)."""
    words = [*TITLE_WORDS, *QUERY_WORDS, *BODY_WORDS, *map(str, range(100))]
    return [f"'{w}' [{w}] {w}" for w in words]


def _crawls(sites: list, n: int, rng: random.Random, tc) -> list:
    """``n`` random crawls with at least one transition (our toy: ``toy_sites.crawl`` stands in for
    the paper's trajectory collection)."""
    out = []
    while len(out) < n:
        t = crawl(rng.choice(sites), rng, tc.min_steps, tc.max_steps)
        if t.n_transitions:
            out.append(t)
    return out


def _train_arm(tc, tok, data, evals: list, seed: int, tmp: str) -> tuple[HFGenerator, dict]:
    """One world model: a tiny LM, the induction warm-up, TRL SFT on ``data`` (the paper's
    world-model SFT, §3.5, at toy scale), then the next-state effect metrics on ``evals``."""
    mk = dict(tc.model)
    arch = mk.pop("arch", "qwen2")
    model, _ = tiny_causal_lm(arch, seed=seed, tokenizer=tok, **mk)
    t1 = time.time()
    # Lookup warm-up on random words (common.tiny.induction_warmup): without it the model
    # never leaves the context-free-page plateau within this CPU budget (docs, "Toy").
    n_special = max([*tok.all_special_ids, tok.unk_token_id or 0]) + 1
    warm = induction_warmup(model, n_special, len(tok), tc.induction_steps, seed=seed)
    sft = stage1_config(
        "tiny",
        output_dir=tmp,
        learning_rate=tc.lr,
        lr_scheduler_type=tc.lr_scheduler,
        num_train_epochs=tc.epochs,
        per_device_train_batch_size=tc.batch_size,
        gradient_accumulation_steps=1,
        packing=False,
        seed=seed,
        disable_tqdm=True,
        logging_steps=tc.log_steps,
    )
    model, loss = train_world_model(model, tok, data, sft)
    gen = HFGenerator(model, tok, batch_size=32)
    m = evaluate_effects(gen, evals, "full", tc)
    m.update(train_loss=loss, train_s=time.time() - t1, n_traj=float(len(data)), **warm)
    return gen, m


def toy_stage(run: Run) -> dict[str, float]:
    """Trains the toy world models, runs the three experiments and writes results.{json,md}."""
    tc = run.method
    with torch_threads(tc.threads):
        t0 = time.time()
        seed = int(run.seed)
        rng = random.Random(seed)
        sites = make_sites(tc.n_sites, rng, n_pages=tc.n_pages)
        train_sites, test_sites = sites[: tc.n_train_sites], sites[tc.n_train_sites :]
        pool = _crawls(train_sites, tc.data_sizes[1], rng, tc)
        evals = _crawls(test_sites, tc.eval_trajectories, rng, tc)
        templates = {k: v for k, v in (tc.prompts or {}).items()}
        full = chat_dataset(pool, **templates)
        corpus = [m["content"] for r in full for m in r["messages"]] + _grammar_texts()
        tok = site_tokenizer(corpus, tc.vocab_size, kind=tc.tokenizer)
        metrics: dict[str, dict[str, float]] = {}
        gens = {}
        with tempfile.TemporaryDirectory() as tmp:
            for arm, n in (("data_small", tc.data_sizes[0]), ("data_large", tc.data_sizes[1])):
                gens[arm], metrics[arm] = _train_arm(
                    tc, tok, full.select(range(n)), evals, seed, tmp
                )
                logger.info("%s: %s", arm, metrics[arm])
        big = gens["data_large"]
        metrics["ctx_full"] = {
            k: v for k, v in metrics["data_large"].items() if k.endswith("_acc") or k == "line_f1"
        }
        metrics["ctx_single"] = evaluate_effects(big, evals, "single", tc)
        for arm, m in lookahead(tc, test_sites, big, seed).items():
            metrics[arm] = {k: v for k, v in m.items() if not k.startswith("_")}
        return write_results(
            run.run_dir,
            "webworld",
            metrics,
            cfg=run.cfg,
            wall_time_s=time.time() - t0,
            notes=(
                f"{tc.n_sites} generated sites ({tc.n_train_sites} train / "
                f"{tc.n_sites - tc.n_train_sites} held out), {tc.n_pages} pages each; tiny "
                f"{tc.model.get('arch', 'qwen2')} world model (hidden {tc.model['hidden_size']}) trained "
                f"with TRL SFT, {tc.epochs} epochs on {tc.data_sizes} crawls; {len(evals)} held-out "
                f"crawls for effect_acc; lookahead: {tc.episodes} episodes x seeds {tc.seeds}, agent_p "
                f"{tc.agent_p}, BoN({tc.k}); success_ci95 is over seeds."
            ),
        )
