"""The toy stage of ``icml26 experiment=mcce_toy`` (our CPU toy; the paper stage is in paper.py).

Toy arms on the same seeds, initial population and warm-up model: the frozen SELFIES explorer alone
(``explorer_only``), the warmed-up tiny GPT alone (``local_only``), the two alternating without
training (``coevolve_frozen``) and MCCE, alternating with similarity-pair DPO rounds
(``coevolve_dpo``); ``coevolve_sft`` and ``coevolve_rl`` are optional. Writes results.json/.md and
the hypervolume-vs-evaluations curve.

"""

from __future__ import annotations

import copy
import logging
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from common.config import Run
from common.threads import torch_threads
from common.tracking import write_results

from .config import ARM_MODES, MCCERunConfig
from .optimizer import MCCEOptimizer, MCCEResult
from .problems import load_nci_smiles, load_seed_smiles, toy_problem
from .toy_world import (
    SelfiesExplorer,
    TinyLMChat,
    build_selfies_tokenizer,
    pretrain_tiny_lm,
    selfies_vocab,
    tiny_gpt,
    warmup_pairs,
)
from .train import trainer_args_for

logger = logging.getLogger(__name__)

REPORTED = (
    "hypervolume",
    "top1_f",
    "top10_f",
    "top10_auc",
    "validity",
    "uniqueness",
    "diversity",
    "local_mean_f",
    "api_mean_f",
    "n_unique",
)


def _seed_all(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_toy_models(rc: MCCERunConfig) -> tuple[Any, Any]:
    """Tokenizer and warmed-up tiny GPT on NCI molecules (shared by every arm and seed)."""
    import selfies as sf

    problem = toy_problem()
    smiles = load_nci_smiles(rc.warmup_molecules) + load_seed_smiles()
    enc = []
    for s in smiles:
        try:
            enc.append(sf.encoder(s))
        except Exception:  # selfies cannot encode some NCI valences
            continue
    tok = build_selfies_tokenizer(selfies_vocab(enc))
    _seed_all(0)
    model = tiny_gpt(
        len(tok), tok.pad_token_id, tok.eos_token_id, n_positions=rc.n_positions, seed=0
    )
    pairs = warmup_pairs(
        smiles,
        rc.warmup_pairs,
        SelfiesExplorer(seed=12345, max_edits=rc.explorer_max_edits),
        random.Random(0),
        max_tokens=rc.max_parent_tokens,
    )
    losses = pretrain_tiny_lm(
        model,
        tok,
        pairs,
        steps=rc.warmup_steps,
        batch_size=rc.warmup_batch,
        lr=rc.warmup_lr,
        seed=0,
    )
    logger.info(
        "warm-up: loss %.3f -> %.3f",
        losses[0] if losses else float("nan"),
        losses[-1] if losses else float("nan"),
    )
    del problem
    return tok, model


def _short_seeds(rc: MCCERunConfig) -> list[str]:
    """Initial population: the toy seeds whose SELFIES fit the prompt budget (and F < init_max_f)."""
    import selfies as sf

    from .core import Archive

    prob = toy_problem()
    out = []
    for s in load_seed_smiles():
        c = prob.canonicalize(s, "smiles")
        if c and len(list(sf.split_selfies(sf.encoder(c)))) <= rc.max_parent_tokens:
            out.append(s)
    if (
        rc.init_max_f is not None
    ):  # drop the strong seeds (celecoxib fragments) so search can improve
        arc = Archive(prob)
        f = {c.value: c.total for c in arc.add(out, representation="smiles")}
        out = [s for s in out if f.get(prob.canonicalize(s, "smiles"), 0.0) < rc.init_max_f]
    return out


def _toy_search(
    rc: MCCERunConfig, arm: str, seed: int, tok: Any, warm: Any, init: list[str], ckpt: Path
) -> MCCEResult:
    """One arm x seed of the toy (our CPU toy): explorer and tiny GPT seeded from ``seed``,
    checkpointed in ``ckpt/<arm>_seed<seed>`` (a rerun resumes or returns the finished result)."""
    from common.llm import ScriptedChat

    _seed_all(seed)
    cfg = copy.deepcopy(rc.search)
    cfg.mode, cfg.seed = ARM_MODES[arm], seed
    api = ScriptedChat(SelfiesExplorer(seed=1000 + seed, max_edits=rc.explorer_max_edits))
    local = TinyLMChat(
        copy.deepcopy(warm),
        tok,
        max_new_tokens=rc.local_max_new_tokens,
        temperature=rc.local_temperature,
        top_p=rc.local_top_p,
        seed=seed,
    )
    ref = copy.deepcopy(warm).eval() if cfg.mode in ("coevolve_dpo", "coevolve_rl") else None
    # the rounds' trainer folder (TRL's scratch; nothing is saved) is removed with the arm
    with tempfile.TemporaryDirectory(prefix="mcce_round_") as scratch:
        return MCCEOptimizer(
            toy_problem(),
            api,
            local,
            cfg,
            init,
            ref_model=ref,
            checkpoint_dir=str(ckpt / f"{arm}_seed{seed}"),
            trainer_args=trainer_args_for(rc, cfg.mode, scratch),
        ).run()


def _dpo_accuracies(logs_per_seed: list[list[dict[str, float]]]) -> dict[str, float]:
    """Mean DPO reward accuracy of the first and last round over seeds, and the rounds per run."""
    key = "dpo/accuracies_mean"
    if not any(key in lg for logs in logs_per_seed for lg in logs):
        return {}
    return {
        "dpo_acc_first_round": float(
            np.mean([logs[0][key] for logs in logs_per_seed if logs and key in logs[0]])
        ),
        "dpo_acc_last_round": float(
            np.mean([logs[-1][key] for logs in logs_per_seed if logs and key in logs[-1]])
        ),
        "dpo_rounds": float(np.mean([len(logs) for logs in logs_per_seed])),
    }


def _toy_row(results: list[MCCEResult], walls: list[float]) -> dict[str, float]:
    """One arm's table row: means over seeds (± std of HV and Top10F), late local offspring F."""
    runs = [dict(r.metrics, wall_s=w) for r, w in zip(results, walls)]
    row: dict[str, float] = {}
    for k in REPORTED + ("wall_s",):
        vals = [r[k] for r in runs if k in r]
        if vals:
            row[k] = float(np.mean(vals))
            if k in ("hypervolume", "top10_f") and len(vals) > 1:
                row[f"{k}_std"] = float(np.std(vals))
    late = [
        f
        for r in results
        for f in [h["new_mean_f"] for h in r.history if h["model"] == "local" and h["new"] > 0][-3:]
    ]
    if late:
        row["local_late_new_mean_f"] = float(np.mean(late))
    row.update(_dpo_accuracies([r.train_log for r in results]))
    return row


def _run_toy(
    rc: MCCERunConfig, run_dir: Path
) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """Every arm x seed on the same warmed-up model and initial population (our CPU toy)."""
    t0 = time.time()
    tok, warm = build_toy_models(rc)
    warm_s = time.time() - t0
    init = _short_seeds(rc)
    ckpt = Path(rc.checkpoint_dir or Path(run_dir) / "ckpt")
    results: dict[str, list[MCCEResult]] = {a: [] for a in rc.arms}
    walls: dict[str, list[float]] = {a: [] for a in rc.arms}
    for seed in rc.seeds:
        for arm in rc.arms:
            t = time.time()
            res = _toy_search(rc, arm, seed, tok, warm, init, ckpt)
            walls[arm].append(time.time() - t)
            results[arm].append(res)
            logger.info(
                "seed %d arm %s: HV %.4f top10 %.3f (%.1fs)",
                seed,
                arm,
                res.metrics["hypervolume"],
                res.metrics["top10_f"],
                walls[arm][-1],
            )
    table = {arm: _toy_row(results[arm], walls[arm]) for arm in rc.arms}
    curves = {
        arm: [[(h["n_unique"], h["hypervolume"]) for h in r.history] for r in rs]
        for arm, rs in results.items()
    }
    _plot(curves, run_dir / "hv_curve.png", rc)
    train_logs = {arm: [r.train_log for r in rs] for arm, rs in results.items()}
    extra = {"warmup_s": warm_s, "train_logs": train_logs, "n_initial": len(init)}
    return table, extra


def _plot(
    curves: dict[str, list[list[tuple[float, float]]]], path: Path, rc: MCCERunConfig
) -> None:
    from common.tracking import pyplot, save_plot

    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
    for arm, runs in curves.items():
        for i, c in enumerate(runs):
            xs, ys = zip(*c)
            ax.step(
                xs,
                ys,
                where="post",
                label=arm if i == 0 else None,
                color=f"C{list(curves).index(arm)}",
                alpha=0.8,
            )
    ax.set_xlabel("unique valid molecules evaluated")
    ax.set_ylabel("hypervolume of top-100 (ref 1.1)")
    ax.set_title(f"MCCE toy: QED/SA/celecoxib-sim, seeds {rc.seeds}")
    ax.legend()
    save_plot(fig, path)


HV_NOTE = "HV: top-100 by F, t(x) minimisation form, ref 1.1 (max 1.1^m)."


@torch_threads(1)  # tiny matmuls: extra OpenMP threads only spin on a busy machine
def run_toy(run: Run) -> dict[str, float]:
    """``stage=toy``: every arm × seed on the CPU toy."""
    rc: MCCERunConfig = copy.deepcopy(run.method)
    rc.seeds = [run.seed + s for s in rc.seeds]
    t0 = time.time()
    table, extra = _run_toy(rc, run.run_dir)
    return write_results(
        run.run_dir,
        "mcce",
        table,
        cfg=run.cfg,
        extra=extra,
        wall_time_s=time.time() - t0,
        notes=HV_NOTE,
    )
