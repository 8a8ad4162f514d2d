"""KMKC toy for the CLI: ``icml26 experiment=kmkc_toy`` (spec §6)."""

from __future__ import annotations

import logging
import statistics
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from common.tracking import save_plot, write_results

from .toy import ToyConfig, run_seed

logger = logging.getLogger(__name__)

DEMO_OVERRIDES = [
    "method.n_per_tier=12",
    "method.reps_seen=6",
    "method.pretrain_steps=40",
    "method.batch_size=16",
    "method.k=4",
    "method.n_bins=4",
    "method.sft_steps=4",
    "method.seeds=[0]",
    "method.arms=[vanilla_sft,cgke]",  # the GRPO/CDKC arms are tested in tests/methods/test_kmkc.py
]
HEADLINE = ("cgke/acc", "vanilla_sft/acc")
ARMS = ("vanilla_sft", "cgke", "grpo", "cdkc")


def _plot(diags: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for seed, d in diags.items():
        x, y = np.array(d["bins"]["x"]), np.array(d["bins"]["y"])
        ax.scatter(x, y, s=14, label=f"bins, seed {seed}")
        f = d["fit"]
        if f["a"] == f["a"]:  # not NaN
            xs = np.linspace(x.min(), x.max(), 100)
            ax.plot(xs, f["a"] * np.exp(-f["b"] * xs) + f["c"], lw=1)
    ax.set_xlabel("mean sequence NLL Ū (nats)")
    ax.set_ylabel("accuracy over K samples")
    ax.set_title("KMKC toy: structural decay law")
    ax.legend(fontsize=7)
    save_plot(fig, path)


def _run_paper(cfg: DictConfig, paper: dict) -> dict[str, float]:
    """``method.paper`` set: the paper-scale pipeline (methods/kmkc/pipeline.py)."""
    from .pipeline import PaperConfig, run_paper

    pc = PaperConfig(**{"seed": int(cfg.seed), **paper})  # unknown keys raise TypeError
    t0 = time.time()
    results = run_paper(pc)
    return write_results(
        cfg.run_dir,
        "kmkc",
        results,
        cfg=cfg,
        wall_time_s=time.time() - t0,
        notes=f"paper pipeline: {pc.model}, {pc.rounds} round(s), engine {pc.engine}",
    )


def run(cfg: DictConfig) -> dict[str, float]:
    """Fact-world toy: decay law, regions vs tiers, CGKE vs uniform SFT at equal budget."""
    fields = OmegaConf.to_container(cfg.method, resolve=True)
    fields.pop("name", None)
    arms = list(fields.pop("arms", ARMS))
    paper = fields.pop("paper", None)
    if paper:
        return _run_paper(cfg, paper)
    unknown = set(arms) - set(ARMS)
    if unknown:
        raise ValueError(f"method.arms: unknown {sorted(unknown)}; valid: {list(ARMS)}")
    tc = ToyConfig(**fields)  # unknown keys raise TypeError
    torch.set_num_threads(1)  # tiny GPT-2: one thread is as fast, and safe on a shared machine
    t0 = time.time()
    seeds = [int(cfg.seed) + s for s in tc.seeds]
    per_seed, diags = [], {}
    for seed in seeds:
        m, d = run_seed(tc, seed, arms)
        d["fit"] = {k: m["profile"][f"decay_{k}"] for k in ("a", "b", "c")}
        per_seed.append(m)
        diags[str(seed)] = d
    metrics: dict[str, dict[str, float]] = {}
    for arm in per_seed[0]:
        rows = [m[arm] for m in per_seed]
        metrics[arm] = {k: statistics.mean(r[k] for r in rows) for k in rows[0]}
        if len(rows) > 1 and "acc" in rows[0]:
            metrics[arm]["acc_std"] = statistics.stdev(r["acc"] for r in rows)
            metrics[arm]["ece_std"] = statistics.stdev(r["ece"] for r in rows)
    _plot(diags, Path(cfg.run_dir) / "decay_law.png")
    return write_results(
        cfg.run_dir,
        "kmkc",
        metrics,
        cfg=cfg,
        extra={"diagnostics": diags},
        wall_time_s=time.time() - t0,
        notes=(
            f"Fact world: 3 tiers x {tc.n_per_tier} facts (A seen {tc.reps_seen}x, B "
            f"{tc.reps_conflict_right}:{tc.reps_conflict_wrong} right:distractor, C unseen); GPT-2 "
            f"{tc.layers}x{tc.hidden} from scratch, {tc.pretrain_steps} steps; K={tc.k} samples at "
            f"T={tc.temperature}; SFT arms: same #items, {tc.sft_steps} steps, lr {tc.sft_lr}, batch "
            f"{tc.batch_size}; seeds {seeds}. profile: decay-law fit a*exp(-b*U)+c on {tc.n_bins} "
            "equal-count bins and rule-region agreement with the designed tiers; acc: greedy "
            "accuracy (acc_A/B/C per tier); ece: 10 equal-mass bins, c = exp(-U). Calibration "
            f"stage: {tc.withhold_c:.0%} of tier C withheld from a second CGKE SFT, then GRPO vs "
            f"CDKC ({tc.cdkc_mode} mode, {tc.cdkc_signal}, λ×{tc.cdkc_scale}), {tc.grpo_steps} "
            f"steps, G={tc.grpo_generations}."
        ),
    )
