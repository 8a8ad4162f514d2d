"""The CPU toy of our toy: "find the addition examples" in a synthetic Tulu-style pool.

A seeded pool of short instruction–response conversations from six task families (two-digit
addition is the rare target family, 3 %), queries and a held-out test set of additions phrased
differently from the pool, a character-level tokenizer, a 2-layer GPT-2 pre-trained briefly on a
mixture without addition, fine-tuning on a chosen subset, and the target loss after fine-tuning.
"""

from __future__ import annotations

import copy
import logging
import string
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from common.metrics import spearman
from common.threads import torch_threads
from common.train_loop import train_steps as _train_loop

from .less import _supervised_ids
from .representations import _query_parts, _segments
from .toy_graded import finetune_steps, is_near, near_example, near_family

logger = logging.getLogger(__name__)

TARGET = "add"
FAMILIES = ("add", "sub", "reverse", "upper", "count", "echo")
_WORDS = (
    "apple river stone cloud green paper light music table chair window garden bread "
    "silver orange winter summer forest ocean candle pencil rocket planet"
).split()
_SPECIALS = ["<pad>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]


def char_tokenizer():
    """A character-level tokenizer over printable ASCII with the Tulu role tags as single tokens."""
    from common.tiny import word_tokenizer

    chars = [c for c in string.printable if c not in _SPECIALS]
    return word_tokenizer(
        {t: i for i, t in enumerate(_SPECIALS + chars)},
        "<unk>",
        split_regex=r"[\s\S]",
        whitespace_split=False,
        fuse_decoder=True,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        additional_special_tokens=_SPECIALS[3:],
        padding_side="left",
    )


def _example(family: str, rng: np.random.Generator, target_phrasing: bool = False):
    a, b = int(rng.integers(10, 100)), int(rng.integers(10, 100))
    w = str(rng.choice(_WORDS))
    if family == "add":
        if target_phrasing:
            q = [f"Add {a} and {b}.", f"Sum {a} with {b}."][int(rng.integers(2))]
        else:
            q = [f"What is {a} plus {b}?", f"Compute {a} + {b}."][int(rng.integers(2))]
        return q, str(a + b)
    if family == "sub":
        a, b = max(a, b), min(a, b)
        q = [f"What is {a} minus {b}?", f"Compute {a} - {b}."][int(rng.integers(2))]
        return q, str(a - b)
    if family == "reverse":
        return [f"Reverse the word {w}.", f"Write {w} backwards."][int(rng.integers(2))], w[::-1]
    if family == "upper":
        return [f"Upper-case {w}.", f"Write {w} in capitals."][int(rng.integers(2))], w.upper()
    if family == "count":
        return [f"How many letters in {w}?", f"Count the letters of {w}."][
            int(rng.integers(2))
        ], str(len(w))
    return [f"Repeat: {w}", f"Say {w} again."][int(rng.integers(2))], w


def make_pool(
    n: int = 3000,
    target_frac: float = 0.03,
    seed: int = 0,
    near_grades: Sequence[float] = (),
    near_frac: float = 0.05,
) -> list[dict]:
    """The synthetic pool: ``target_frac`` addition, 10 % subtraction, ``near_frac`` per graded
    family ``add~q`` of ``near_grades`` (:mod:`.toy_graded`; none by default), the rest split evenly.

    Returns:
        Rows ``{"id", "dataset", "messages"}`` (``dataset`` is the family, used only for diagnostics).
    """
    if n < 10 or not 0 < target_frac < 0.5:
        raise ValueError(f"need n >= 10 and 0 < target_frac < 0.5, got n={n}, {target_frac=}")
    rng = np.random.default_rng(seed)
    n_add, n_sub = max(1, round(target_frac * n)), round(0.1 * n)
    near = {near_family(q): round(near_frac * n) for q in near_grades}
    rest = n - n_add - n_sub - sum(near.values())
    if rest < 4:
        raise ValueError(f"the graded families leave {rest} rows for the other four families")
    counts = {"add": n_add, "sub": n_sub, **near}
    for k, fam in enumerate(FAMILIES[2:]):
        counts[fam] = rest // 4 + (1 if k < rest % 4 else 0)
    fams = [f for f, c in counts.items() for _ in range(c)]
    rng.shuffle(fams)
    rows = []
    for i, fam in enumerate(fams):
        q, a = near_example(fam, rng) if is_near(fam) else _example(fam, rng)
        msgs = [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        rows.append({"id": f"pool-{i}", "dataset": fam, "messages": msgs})
    return rows


def make_target(n: int, seed: int) -> list[dict]:
    """Target-task examples (addition, phrased unlike the pool) as query rows ``{prompts, labels}``."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        q, a = _example(TARGET, rng, target_phrasing=True)
        rows.append({"prompts": f"<|user|>\n{q}\n<|assistant|>\n", "labels": a})
    return rows


def tiny_gpt(tokenizer, n_layer: int = 2, n_embd: int = 64, seed: int = 0) -> nn.Module:
    """A random-init GPT-2 (2 layers, 4 heads) sized for the character vocabulary (eval mode; the
    global RNG is left as it was)."""
    from common.tiny import tiny_causal_lm

    model, _ = tiny_causal_lm(
        "gpt2",
        hidden_size=n_embd,
        num_hidden_layers=n_layer,
        num_attention_heads=4,
        max_position_embeddings=128,
        seed=seed,
        tokenizer=tokenizer,
        record=False,
        bos_token_id=tokenizer.eos_token_id,
    )
    return model


def _encode_pool(rows: Sequence[dict], tokenizer) -> list[tuple[list[int], list[int]]]:
    eos = tokenizer.eos_token
    return [_supervised_ids(_segments(r["messages"], eos), tokenizer, 128) for r in rows]


def _encode_queries(rows: Sequence[dict], tokenizer) -> list[tuple[list[int], list[int]]]:
    eos = tokenizer.eos_token
    out = []
    for r in rows:
        p, lab = _query_parts(r)
        out.append(_supervised_ids([(p, False), (lab + eos, True)], tokenizer, 128))
    return out


def _batch(items: Sequence[tuple[list[int], list[int]]], pad: int):
    T = max(len(i) for i, _ in items)
    ids = torch.tensor([i + [pad] * (T - len(i)) for i, _ in items])  # [b, T] right-padded
    lab = torch.tensor([y + [-100] * (T - len(y)) for _, y in items])  # [b, T]
    att = torch.tensor([[1] * len(i) + [0] * (T - len(i)) for i, _ in items])  # [b, T]
    return ids, att, lab


def train_steps(
    model: nn.Module,
    items: Sequence[tuple[list[int], list[int]]],
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    pad: int,
) -> nn.Module:
    """``steps`` AdamW steps on batches drawn with replacement from ``items`` (assistant-only loss)."""
    rng = np.random.default_rng(seed)

    def loss_fn(_step: int) -> torch.Tensor:
        idx = rng.integers(0, len(items), size=batch_size)
        ids, att, lab = _batch([items[i] for i in idx], pad)
        return model(input_ids=ids, attention_mask=att, labels=lab).loss

    # AdamW's default weight decay (0.01), as the hand-written loop had.
    _train_loop(model, loss_fn, steps, lr=lr, weight_decay=0.01, desc="instruction_selection sft")
    return model.eval()


@torch.no_grad()
def target_loss(model: nn.Module, items: Sequence[tuple[list[int], list[int]]], pad: int) -> float:
    """Mean token cross-entropy on the label tokens of target examples (the query/test loss)."""
    total, count = 0.0, 0
    for s in range(0, len(items), 64):
        ids, att, lab = _batch(items[s : s + 64], pad)
        logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]  # [b, T-1, V]
        tgt = lab[:, 1:]  # [b, T-1]
        ce = nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            tgt.reshape(-1),
            ignore_index=-100,
            reduction="sum",
        )
        total += float(ce)
        count += int((tgt != -100).sum())
    return total / count


def pretrain_base(tokenizer, steps: int, seed: int = 0, n_layer: int = 2, n_embd: int = 64):
    """The toy base model: a tiny GPT-2 trained on a generic mixture **without** addition."""
    model = tiny_gpt(tokenizer, n_layer=n_layer, n_embd=n_embd, seed=seed)
    if steps > 0:
        rng = np.random.default_rng(seed + 10_000)
        rows = []
        for i in range(min(2000, 32 * steps)):
            fam = FAMILIES[1 + i % (len(FAMILIES) - 1)]
            q, a = _example(fam, rng)
            rows.append(
                {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
            )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            train_steps(
                model, _encode_pool(rows, tokenizer), steps, 32, 3e-3, seed, tokenizer.pad_token_id
            )
    return model


def finetune_copy(
    base: nn.Module, items, steps: int, batch_size: int, lr: float, seed: int, pad: int
):
    """Fine-tunes a deep copy of ``base`` (the base stays untouched)."""
    model = copy.deepcopy(base)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return train_steps(model, items, steps, batch_size, lr, seed, pad)


# ---------------------------------------------------------------- the toy stage
def _arm_metrics(cfg, sims, evaluate, is_target, seed: int) -> dict[str, dict[str, float]]:
    """Every representation with RR, and the selector representation with every selector (the paper's
    representation × selector design, official ``selection/*.py``): loss, target fraction and the three subset–query distances at each budget."""
    from .distance import candidate_side_distance, query_cover_distance, wasserstein1
    from .pipeline import selector_fns

    metrics: dict[str, dict[str, float]] = {}
    fns = selector_fns(cfg)
    arms = [(f"{rep}_rr", rep, "rr") for rep in cfg.representations]
    if cfg.selector_representation in sims:
        rep = cfg.selector_representation
        arms += [(f"{rep}_{s}", rep, s) for s in cfg.selectors if s != "rr"]
    B_max = max(cfg.budgets)
    for arm, rep, sel in arms:
        order = fns[sel](sims[rep], B_max)
        row = metrics.setdefault(arm, {})
        for B in cfg.budgets:
            sub = order[:B]
            row[f"loss@{B}"] = evaluate(sub, seed)
            row[f"target_frac@{B}"] = float(is_target[sub].mean())
            row[f"w1@{B}"] = wasserstein1(sims[rep], sub)
            row[f"cover@{B}"] = query_cover_distance(sims[rep], sub)
            row[f"cand@{B}"] = candidate_side_distance(sims[rep], sub)
        logger.info("arm %s: %s", arm, {k: round(v, 3) for k, v in row.items() if "loss" in k})
    return metrics


def _random_metrics(cfg, sims, evaluate, is_target, n_pool: int, seed: int) -> dict[str, float]:
    """Random subsets (the paper's random baseline), averaged over ``cfg.random_seeds``."""
    from .distance import wasserstein1
    from .selectors import random_select

    rnd: dict[str, list[float]] = {}
    for s in cfg.random_seeds:
        for B in cfg.budgets:
            sub = random_select(n_pool, B, seed=s)
            rnd.setdefault(f"loss@{B}", []).append(evaluate(sub, seed))
            rnd.setdefault(f"target_frac@{B}", []).append(float(is_target[sub].mean()))
            for rep, S in sims.items():
                rnd.setdefault(f"w1_{rep}@{B}", []).append(wasserstein1(S, sub))
    out = {k: float(np.mean(v)) for k, v in rnd.items()}
    if len(cfg.random_seeds) > 1:
        for B in cfg.budgets:
            out[f"loss_std@{B}"] = float(np.std(rnd[f"loss@{B}"]))
    return out


def _quantile_metrics(cfg, sims, evaluate, is_target, seed, metrics, run_dir) -> dict:
    """The distance-quantile experiment (paper Figs. 2–3;
    official ``quantile/convert_to_dist_quant.py``): the pool ranked by RR, cut into
    ``n_quantiles`` chunks; Spearman ρ of chunk rank against loss, target fraction and W1. Adds
    ``<rep>_quantiles`` to ``metrics``, writes the table; returns the per-chunk loss curves."""
    from .distance import wasserstein1
    from .experiments import distance_quantiles, spearman_table
    from .selectors import round_robin

    curves: dict[str, list[float]] = {}
    quant_rows: dict[str, dict[str, list[float]]] = {}
    if cfg.n_quantiles > 0:
        for rep, S in sims.items():
            chunks = distance_quantiles(
                round_robin(S, S.shape[1]), cfg.n_quantiles, cfg.per_quantile
            )
            losses = [evaluate(c, seed) for c in chunks]
            fracs = [float(is_target[c].mean()) for c in chunks]
            dists = [wasserstein1(S, c) for c in chunks]  # the chunk's W1 to the queries
            curves[rep] = losses
            rho = spearman_table({"loss": losses, "target_frac": fracs, "w1": dists})
            metrics[f"{rep}_quantiles"] = {
                "spearman_loss": rho["loss"],
                "spearman_target_frac": rho["target_frac"],
                "spearman_w1_loss": spearman(dists, losses),
                "spearman_chunk_w1": rho["w1"],
                "loss_q0": losses[0],
                f"loss_q{cfg.n_quantiles - 1}": losses[-1],
            }
            quant_rows[rep] = {"loss": losses, "target_frac": fracs, "w1": dists}
        _write_quantile_table(quant_rows, metrics, run_dir / "quantile_spearman.md")
    return curves


@torch_threads(1)  # tiny matmuls: extra OpenMP threads only spin on a busy machine
def run_toy(run: Any) -> dict[str, float]:
    """``stage=toy``: every representation x selector and Random on one synthetic pool; writes the
    results, the quantile table and the plot."""
    from common.tracking import write_results

    from .pipeline import similarities

    toy = sys.modules[__name__]
    cfg, seed, run_dir = run.method, int(run.seed), Path(run.run_dir)
    t_start = time.time()

    torch.manual_seed(seed)
    tok = toy.char_tokenizer()
    pad = tok.pad_token_id
    pool = toy.make_pool(cfg.pool_size, cfg.target_frac, seed, cfg.near_grades, cfg.near_frac)
    queries = toy.make_target(cfg.n_queries, seed + 1)
    test = toy.make_target(cfg.n_test, seed + 2)
    is_target = np.array([r["dataset"] == toy.TARGET for r in pool])
    pool_items = toy._encode_pool(pool, tok)
    test_items = toy._encode_queries(test, tok)
    t0 = time.time()
    base = toy.pretrain_base(tok, cfg.pretrain_steps, seed)
    logger.info("pre-trained the toy base in %.1f s", time.time() - t0)
    sims = similarities(cfg, base, tok, pool, queries, seed)

    def evaluate(subset: list[int], s: int) -> float:
        model = toy.finetune_copy(
            base,
            [pool_items[j] for j in subset],
            finetune_steps(cfg, len(subset)),
            cfg.train_batch,
            cfg.train_lr,
            s,
            pad,
        )
        return toy.target_loss(model, test_items, pad)

    metrics: dict[str, dict[str, float]] = {"zero_shot": {}}
    zs = toy.target_loss(base, test_items, pad)
    for B in cfg.budgets:
        metrics["zero_shot"][f"loss@{B}"] = zs
    metrics.update(_arm_metrics(cfg, sims, evaluate, is_target, seed))
    metrics["random"] = _random_metrics(cfg, sims, evaluate, is_target, len(pool), seed)
    curves = _quantile_metrics(cfg, sims, evaluate, is_target, seed, metrics, run_dir)
    _plot(metrics, curves, cfg.budgets, run_dir)
    extra = {"n_pool_target": int(is_target.sum()), "quantile_losses": curves}
    return write_results(
        run_dir,
        "instruction_selection",
        metrics,
        cfg=run.cfg,
        extra=extra,
        wall_time_s=time.time() - t_start,
    )


def _write_quantile_table(rows: dict, metrics: dict, path: Path) -> None:
    """The distance-vs-loss table: per representation, Spearman ρ and the per-chunk values."""
    lines = [
        "| representation | ρ(chunk, loss) | ρ(W1, loss) | ρ(chunk, W1) | ρ(chunk, target frac) |",
        "|---|---|---|---|---|",
    ]
    for rep in rows:
        m = metrics[f"{rep}_quantiles"]
        lines.append(
            f"| {rep} | {m['spearman_loss']:.2f} | {m['spearman_w1_loss']:.2f} | "
            f"{m['spearman_chunk_w1']:.2f} | {m['spearman_target_frac']:.2f} |"
        )
    n = len(next(iter(rows.values()))["loss"])
    lines += ["", "| representation | metric | " + " | ".join(f"q{i}" for i in range(n)) + " |"]
    lines.append("|---|---|" + "---|" * n)
    for rep, r in rows.items():
        for k in ("loss", "w1", "target_frac"):
            lines.append(f"| {rep} | {k} | " + " | ".join(f"{v:.3f}" for v in r[k]) + " |")
    path.write_text("\n".join(lines) + "\n")


def _plot(metrics, curves, budgets, run_dir: Path) -> None:
    from common.tracking import pyplot, save_plot

    plt = pyplot()

    fig, axes = plt.subplots(1, 2 if curves else 1, figsize=(11 if curves else 6, 4), squeeze=False)
    ax = axes[0, 0]
    for arm, row in metrics.items():
        if arm.endswith("_quantiles"):
            continue
        ax.plot(budgets, [row[f"loss@{B}"] for B in budgets], marker="o", label=arm)
    ax.set(
        xscale="log",
        xlabel="budget B",
        ylabel="target loss after fine-tuning",
        title="budget sweep",
    )
    ax.legend(fontsize=7)
    if curves:
        ax = axes[0, 1]
        for rep, losses in curves.items():
            ax.plot(range(len(losses)), losses, marker="o", label=rep)
        ax.set(xlabel="RR distance quantile (0 = closest)", ylabel="target loss", title="quantiles")
        ax.legend(fontsize=7)
    fig.tight_layout()

    save_plot(fig, run_dir / "instruction_selection.png")
    plt.close(fig)
