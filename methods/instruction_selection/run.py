"""Targeted instruction selection for the CLI: ``icml26 experiment=instruction_selection_toy``.

The toy (spec §6): represent a synthetic pool and addition queries with RDS+, EMBED and LESS; select
subsets with round-robin for every representation and with DG / UOT / KNN-Uniform on LESS; fine-tune
the tiny base model on each subset for a fixed number of steps and report the target loss, the
fraction of target-family examples chosen and the subset–query distances, against Random (3 seeds)
and the zero-shot base. The distance-quantile experiment fine-tunes on 10 RR-ordered chunks per
representation and reports Spearman(chunk index, target loss). The paper path
(``instruction_selection_paper``) computes representations on the hub pool and writes the selected
subset ids per selector and budget for ``scripts/reproduce/instruction_selection.sh`` to train on.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from common.tracking import save_plot, write_results

from .distance import candidate_side_distance, query_cover_distance, wasserstein1
from .experiments import distance_quantiles, spearman_table
from .paper import less_warmup_trainer, load_pool, load_queries
from .representations import LESSFeaturizer, RDSPlus, SentenceEmbed, less_warmup
from .selectors import doubly_greedy, knn_uniform, random_select, round_robin, uot
from .similarity import cosine_matrix

logger = logging.getLogger(__name__)

DEMO_OVERRIDES: list[str] = [
    "method.pool_size=200",
    "method.n_queries=4",
    "method.n_test=20",
    "method.budgets=[30]",
    "method.random_seeds=[0]",
    "method.pretrain_steps=0",
    "method.train_steps=5",
    "method.warmup_n=16",
    "method.warmup_epochs=1",
    "method.n_quantiles=0",
    "method.representations=[rds,less]",
    "method.selectors=[rr]",
]
HEADLINE: tuple[str, str] = ("less_rr/loss@30", "random/loss@30")


@dataclass
class InstructionSelectionConfig:
    """``cfg.method``: representation, selector, budget and training settings (paper defaults)."""

    name: str = "instruction_selection"
    task: str = "toy"  # toy | paper
    representations: list[str] = field(default_factory=lambda: ["rds", "embed", "less"])
    selectors: list[str] = field(default_factory=lambda: ["rr", "dg", "uot", "knn_uniform"])
    selector_representation: str = "less"  # the paper compares selectors on LESS (§3.3)
    budgets: list[int] = field(default_factory=lambda: [500, 1000, 2500, 5000, 10000])
    random_seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    tie_break: str = "official"  # DG / UOT exact ties: official (np.argsort) | stable
    uot_eps: float = 0.01
    uot_reg_m: list[float] = field(default_factory=lambda: [math.inf, 1e-4])
    knn_L: int = 5000
    knn_alpha: float = 0.01
    knn_C: float = 5.0
    embed_model: str | None = "sentence-transformers/gtr-t5-base"
    lora_r: int = 128
    lora_alpha: int = 512
    lora_dropout: float = 0.1
    lora_targets: list[str] = field(default_factory=lambda: ["all-linear"])
    warmup_n: int = 10000
    warmup_epochs: int = 4
    warmup_lr: float = 2e-5
    warmup_batch: int = 128  # toy loop batch; paper: per-device 1 x accumulation 128
    warmup_trainer: bool = True  # paper: HF Trainer warm-up (linear schedule, epoch checkpoints)
    warmup_per_device_batch: int = 1  # repo
    warmup_grad_accum: int = 128  # repo
    warmup_ratio: float = 0.03  # repo
    proj_dim: int = 8192
    proj_seed: int = 0
    less_grad_mode: str = "train"  # official collect_grads: train mode (LoRA dropout on) | eval
    less_add_special_tokens: bool = True  # official: the tokenizer's BOS starts each example
    less_feature_dtype: str | None = None  # None: the model dtype (official projector) | float32
    n_quantiles: int = 10
    per_quantile: int = 500
    max_length: int = 2048
    # toy only
    pool_size: int = 3000
    target_frac: float = 0.03
    n_queries: int = 16
    n_test: int = 200
    pretrain_steps: int = 300
    train_steps: int = 150
    train_batch: int = 16
    train_lr: float = 5e-4
    # paper only
    base_model: str = "meta-llama/Llama-2-7b-hf"
    pool: str = "Harvard-DCML/tulu-v2-197K-processed"
    warmup_data: str = "Harvard-DCML/tulu-v2-10K-warmup-processed"
    query_dataset: str = "Harvard-DCML/targeted-query-set-processed"
    query_config: str = "bbh"
    query_split: str = "dev"
    pool_limit: int | None = None  # first rows of the pool (None: all 197K)
    dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        if self.task not in ("toy", "paper"):
            raise ValueError(f"task must be 'toy' or 'paper', got {self.task!r}")
        bad = set(self.representations) - {"rds", "embed", "less"}
        if bad:
            raise ValueError(f"representations must be among rds, embed, less; got {sorted(bad)}")
        bad = set(self.selectors) - {"rr", "dg", "uot", "knn_uniform"}
        if bad:
            raise ValueError(f"selectors must be among rr, dg, uot, knn_uniform; got {sorted(bad)}")
        if self.tie_break not in ("official", "stable"):
            raise ValueError(f"tie_break must be 'official' or 'stable', got {self.tie_break!r}")
        if self.less_grad_mode not in ("train", "eval"):
            raise ValueError(
                f"less_grad_mode must be 'train' or 'eval', got {self.less_grad_mode!r}"
            )
        if not self.budgets or min(self.budgets) < 1:
            raise ValueError(f"budgets must be positive, got {self.budgets}")


def _selector_fns(cfg: InstructionSelectionConfig):
    reg_m = (float(cfg.uot_reg_m[0]), float(cfg.uot_reg_m[1]))
    return {
        "rr": round_robin,
        "dg": lambda S, B: doubly_greedy(S, B, tie_break=cfg.tie_break),
        "uot": lambda S, B: uot(S, B, eps=cfg.uot_eps, reg_m=reg_m, tie_break=cfg.tie_break),
        "knn_uniform": lambda S, B: knn_uniform(
            S, B, L=cfg.knn_L, alpha=cfg.knn_alpha, C=cfg.knn_C, fill="max_sim"
        ),
    }


def _attach_lora(model, cfg: InstructionSelectionConfig, seed: int):
    from peft import LoraConfig, get_peft_model

    targets = cfg.lora_targets[0] if cfg.lora_targets == ["all-linear"] else list(cfg.lora_targets)
    lcfg = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_peft_model(model, lcfg)


def _similarities(
    cfg, base, tok, pool, queries, seed, warm_rows=None, out_dir=None
) -> dict[str, np.ndarray]:
    """``{representation: S [M, N]}`` for every requested representation.

    LESS warms up on ``warm_rows`` (paper: the 10K warm-up set) or, when None, on ``warmup_n``
    random pool rows (toy); with ``cfg.warmup_trainer`` through HF ``Trainer`` in ``out_dir``.
    """
    out = {}
    for rep in cfg.representations:
        t0 = time.time()
        if rep == "rds":
            enc = RDSPlus(base, tok, batch_size=16, max_length=cfg.max_length)
            out[rep] = cosine_matrix(enc.encode_queries(queries), enc.encode_pool(pool))
        elif rep == "embed":
            enc = SentenceEmbed(cfg.embed_model)
            out[rep] = cosine_matrix(enc.encode_queries(queries), enc.encode_pool(pool))
        else:
            import copy

            model = _attach_lora(copy.deepcopy(base), cfg, seed)
            rng = np.random.default_rng(seed + 1)
            warm = [
                pool[i] for i in rng.choice(len(pool), min(cfg.warmup_n, len(pool)), replace=False)
            ]
            if warm_rows is not None:
                warm = list(warm_rows)
            if cfg.warmup_trainer:
                ckpts = less_warmup_trainer(
                    model,
                    tok,
                    warm,
                    str(Path(out_dir or tempfile.mkdtemp(prefix="less_warmup_")) / "warmup"),
                    epochs=cfg.warmup_epochs,
                    lr=cfg.warmup_lr,
                    per_device_batch=cfg.warmup_per_device_batch,
                    grad_accum=cfg.warmup_grad_accum,
                    warmup_ratio=cfg.warmup_ratio,
                    seed=seed,
                    max_length=cfg.max_length,
                    bf16=cfg.dtype == "bfloat16" and torch.cuda.is_available(),
                )
            else:
                ckpts = less_warmup(
                    model,
                    tok,
                    warm,
                    cfg.warmup_epochs,
                    cfg.warmup_lr,
                    cfg.warmup_batch,
                    seed,
                    cfg.max_length,
                )
            less = LESSFeaturizer(
                model,
                tok,
                ckpts,
                cfg.proj_dim,
                cfg.proj_seed,
                cfg.max_length,
                grad_mode=cfg.less_grad_mode,
                add_special_tokens=cfg.less_add_special_tokens,
                feature_dtype=cfg.less_feature_dtype,
            )
            out[rep] = less.similarity(less.encode_queries(queries), less.encode_pool(pool))
        logger.info("representation %s: S %s in %.1f s", rep, out[rep].shape, time.time() - t0)
    return out


def _run_toy(cfg: InstructionSelectionConfig, seed: int, run_dir: Path) -> tuple[dict, dict]:
    from . import toy

    torch.manual_seed(seed)
    tok = toy.char_tokenizer()
    pad = tok.pad_token_id
    pool = toy.make_pool(cfg.pool_size, cfg.target_frac, seed)
    queries = toy.make_target(cfg.n_queries, seed + 1)
    test = toy.make_target(cfg.n_test, seed + 2)
    is_target = np.array([r["dataset"] == toy.TARGET for r in pool])
    pool_items = toy._encode_pool(pool, tok)
    test_items = toy._encode_queries(test, tok)
    t0 = time.time()
    base = toy.pretrain_base(tok, cfg.pretrain_steps, seed)
    logger.info("pre-trained the toy base in %.1f s", time.time() - t0)
    sims = _similarities(cfg, base, tok, pool, queries, seed)

    def evaluate(subset: list[int], s: int) -> float:
        model = toy.finetune_copy(
            base,
            [pool_items[j] for j in subset],
            cfg.train_steps,
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
    fns = _selector_fns(cfg)
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
    rnd: dict[str, list[float]] = {}
    for s in cfg.random_seeds:
        for B in cfg.budgets:
            sub = random_select(len(pool), B, seed=s)
            rnd.setdefault(f"loss@{B}", []).append(evaluate(sub, seed))
            rnd.setdefault(f"target_frac@{B}", []).append(float(is_target[sub].mean()))
            for rep, S in sims.items():
                rnd.setdefault(f"w1_{rep}@{B}", []).append(wasserstein1(S, sub))
    metrics["random"] = {k: float(np.mean(v)) for k, v in rnd.items()}
    if len(cfg.random_seeds) > 1:
        for B in cfg.budgets:
            metrics["random"][f"loss_std@{B}"] = float(np.std(rnd[f"loss@{B}"]))

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
                "spearman_w1_loss": _spearman(dists, losses),
                "spearman_chunk_w1": rho["w1"],
                "loss_q0": losses[0],
                f"loss_q{cfg.n_quantiles - 1}": losses[-1],
            }
            quant_rows[rep] = {"loss": losses, "target_frac": fracs, "w1": dists}
        _write_quantile_table(quant_rows, metrics, run_dir / "quantile_spearman.md")
    _plot(metrics, curves, cfg.budgets, run_dir)
    return metrics, {"n_pool_target": int(is_target.sum()), "quantile_losses": curves}


def _spearman(x: list[float], y: list[float]) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic)


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


def _run_paper(cfg: InstructionSelectionConfig, seed: int, run_dir: Path) -> tuple[dict, dict]:
    """Representation + selection on the hub pool; writes ``subsets/<arm>_B<B>.json`` (pool ids)."""
    from common.models import load_model, load_tokenizer

    pool = load_pool(cfg.pool, limit=cfg.pool_limit)
    queries = load_queries(cfg.query_dataset, cfg.query_config, cfg.query_split)
    warm = load_pool(cfg.warmup_data, limit=cfg.warmup_n) if "less" in cfg.representations else None
    model = load_model(cfg.base_model, dtype=cfg.dtype)
    tok = load_tokenizer(cfg.base_model, padding_side="right")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    sims = _similarities(cfg, model, tok, pool, queries, seed, warm_rows=warm, out_dir=run_dir)
    fns = _selector_fns(cfg)
    out_dir = run_dir / "subsets"
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics: dict[str, dict[str, float]] = {}
    arms = [(f"{rep}_rr", rep, "rr") for rep in sims]
    arms += [
        (f"{cfg.selector_representation}_{s}", cfg.selector_representation, s)
        for s in cfg.selectors
        if s != "rr" and cfg.selector_representation in sims
    ]
    for arm, rep, sel in arms:
        order = fns[sel](sims[rep], max(cfg.budgets))
        for B in cfg.budgets:
            ids = [pool[j]["id"] for j in order[:B]]
            (out_dir / f"{arm}_B{B}.json").write_text(json.dumps(ids))
            metrics.setdefault(arm, {})[f"w1@{B}"] = wasserstein1(sims[rep], order[:B], reg=0.05)
    return metrics, {"subsets": str(out_dir)}


def run(cfg: DictConfig) -> dict[str, float]:
    """Runs the toy or the paper-scale selection and writes results.json / results.md."""
    mcfg = OmegaConf.to_object(
        OmegaConf.merge(OmegaConf.structured(InstructionSelectionConfig), cfg.method)
    )
    seed = int(cfg.get("seed", 0) or 0)
    run_dir = Path(cfg.run_dir or "outputs/instruction_selection")
    run_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if mcfg.task == "toy":
        metrics, extra = _run_toy(mcfg, seed, run_dir)
    else:
        metrics, extra = _run_paper(mcfg, seed, run_dir)
    return write_results(
        run_dir,
        "instruction_selection",
        metrics,
        cfg=cfg,
        extra=extra,
        wall_time_s=time.time() - t0,
    )
