"""Issue-43 diagnosis of the toy: does Red-Black MCTS beat random chains once the landscape is not additive?

``python -m methods.agentxray.diagnose`` runs the arms ``red_black``, ``no_coloring`` and
``direct_random`` (random chains with red_black's number of primitive executions, same seed) and
``red_black_zero_black`` (red_black whose score-0 nodes stay black, ``MCTSConfig.zero_score_black``) on
today's SFE landscape (reference) and on the ``chain`` landscapes Sim_α, α ∈ {0, 0.5, 1}
(``landscape.py``: only the similarity changes), at N ∈ {20, 60}, clean black box, seeds 0–9. Per
cell it reports the paired differences red_black − direct_random and red_black − no_coloring of test
similarity (mean over seeds and the Student-t 95% interval) and, per landscape, its additivity: the
R² of a linear fit of the reward on which agents a chain contains. Writes ``results.json``,
``results.md`` and ``agentxray_diagnose.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

from common.metrics import paired_difference as paired
from common.threads import torch_threads
from common.tracking import pyplot, save_plot

from .config import AgentXRayRunConfig, MCTSConfig
from .costs import CostMeter
from .landscape import presence_r2
from .primitives import Primitive
from .toy import _toy_row, _toy_search, toy_data, toy_executor, toy_similarity
from .xraybench import TOY_AGENTS

ARMS = ("red_black", "no_coloring", "direct_random", "red_black_zero_black")
COMPARISONS = (
    ("red_black", "direct_random"),
    ("red_black", "no_coloring"),
    ("red_black_zero_black", "direct_random"),
    ("red_black_zero_black", "no_coloring"),
)


def landscapes(alphas: list[float]) -> dict[str, dict]:
    """Name → config overrides: today's SFE (reference) and one ``chain`` landscape per α."""
    out: dict[str, dict] = {"sfe (today)": {"landscape": "output"}}
    for a in alphas:
        out[f"chain α={a:g}"] = {"landscape": "chain", "landscape_alpha": a}
    return out


def additivity(cfg: AgentXRayRunConfig, train: list, n: int) -> dict[str, float]:
    """``presence_r2`` of the toy reward (mean over the first two training pairs) on ``n`` random
    agent-only chains of length 1–L_max."""
    ex = toy_executor(cfg, CostMeter())
    sim = toy_similarity(cfg)

    def score(names: list[str]) -> float:
        wf = [Primitive("agent", a) for a in names]
        outs = [(ex.final_output(ex.run(wf, t)), o) for t, o in train[:2]]
        return statistics.mean(sim(p, o) if p else 0.0 for p, o in outs)

    return presence_r2(score, list(TOY_AGENTS), n, cfg.search.max_depth, seed=0)


def _arm(cfg: AgentXRayRunConfig, arm: str) -> tuple[str, AgentXRayRunConfig]:
    """``red_black_zero_black``: red_black with ``search.zero_score_black`` (our variant)."""
    if arm != "red_black_zero_black":
        return arm, cfg
    search = MCTSConfig(**{**cfg.search.__dict__, "zero_score_black": True})
    return "red_black", dataclasses.replace(cfg, search=search)


def run_landscape(cfg: AgentXRayRunConfig, r2_chains: int) -> dict:
    """Every N × arm × seed on one landscape: per-seed test scores, paired Δ and additivity."""
    train, test = toy_data(cfg, 0.0)
    out: dict = {"additivity": additivity(cfg, train, r2_chains), "cells": {}}
    for iters in cfg.iterations:
        scores: dict[str, list[float]] = {a: [] for a in ARMS}
        for seed in cfg.seeds:
            budget = None
            for arm in ARMS:  # red_black first: direct_random gets its executions
                wf, st = _toy_search(*_arm(cfg, arm), iters, seed, train, budget)
                budget = int(st["executions"]) if arm == "red_black" else budget
                scores[arm].append(_toy_row(cfg, wf, st, test)["test_sfe"])
        cell = {"scores": scores, "means": {a: statistics.mean(v) for a, v in scores.items()}}
        for m, b in COMPARISONS:
            cell[f"{m}-{b}"] = paired(scores[m], scores[b])
        out["cells"][str(iters)] = cell
    return out


def markdown(res: dict) -> str:
    """The results table: one row per landscape × N."""
    lines = [
        "| landscape | presence R² (held-out) | N | red_black | no_coloring | direct_random "
        "| rb zero-black | Δ rb − random [95% CI] (wins) | Δ rb − no_coloring | "
        "Δ rb zero-black − random | Δ rb zero-black − no_coloring |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in res["landscapes"].items():
        ad = r["additivity"]
        for n, c in r["cells"].items():
            m = c["means"]
            ds = []
            for a, b in COMPARISONS:
                p = c[f"{a}-{b}"]
                lo, hi = p["delta"] - p["ci95"], p["delta"] + p["ci95"]
                ds.append(f"{p['delta']:+.3f} [{lo:+.3f}, {hi:+.3f}] ({p['wins']}/{p['n']})")
            lines.append(
                f"| {name} | {ad['r2']:.2f} ({ad['r2_heldout']:.2f}) | {n} | {m['red_black']:.3f} "
                f"| {m['no_coloring']:.3f} | {m['direct_random']:.3f} "
                f"| {m['red_black_zero_black']:.3f} | {' | '.join(ds)} |"
            )
    return "\n".join(lines) + "\n"


def plot(res: dict, path: Path) -> None:
    """Paired Δ with its 95% interval per landscape, one panel per N."""
    plt = pyplot()
    names = list(res["landscapes"])
    ns = list(next(iter(res["landscapes"].values()))["cells"])
    fig, axes = plt.subplots(1, len(ns), figsize=(6 * len(ns), 4), sharey=True, squeeze=False)
    for ax, n in zip(axes[0], ns, strict=True):
        for k, (a, b) in enumerate(COMPARISONS):
            ps = [res["landscapes"][x]["cells"][n][f"{a}-{b}"] for x in names]
            xs = [i + (k - 1.5) * 0.15 for i in range(len(names))]
            ax.errorbar(xs, [p["delta"] for p in ps], yerr=[p["ci95"] for p in ps], fmt="o",
                        capsize=3, label=f"{a} − {b}")  # fmt: skip
        ax.axhline(0, color="grey", lw=0.8)
        r2 = [res["landscapes"][x]["additivity"]["r2"] for x in names]
        ax.set_xticks(range(len(names)), [f"{x}\nR²={v:.2f}" for x, v in zip(names, r2)])
        ax.set_title(f"N = {n} iterations")
        ax.tick_params(axis="x", labelsize=7)
    axes[0][0].set_ylabel("paired Δ test similarity (95% CI)")
    axes[0][0].legend(fontsize=7)
    save_plot(fig, path)


@torch_threads(1)
def main(argv: list[str] | None = None) -> dict:
    """Parse the arguments, run every landscape, write the results."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--iterations", type=int, nargs="+", default=[20, 60])
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.0, 0.5, 1.0])
    ap.add_argument("--r2-chains", type=int, default=300)
    ap.add_argument("--out", default="outputs/agentxray_diagnose")
    args = ap.parse_args(argv)
    t0, res = time.perf_counter(), {"landscapes": {}}
    for name, over in landscapes(args.alphas).items():
        cfg = AgentXRayRunConfig(
            arms=list(ARMS[:3]), iterations=args.iterations, seeds=list(range(args.seeds)), **over
        )
        res["landscapes"][name] = run_landscape(cfg, args.r2_chains)
        print(f"{name}: done at {time.perf_counter() - t0:.0f} s", flush=True)
    res["wall_seconds"] = time.perf_counter() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=1))
    (out / "results.md").write_text(markdown(res) + f"\nrun time {res['wall_seconds']:.0f} s\n")
    plot(res, out / "agentxray_diagnose.png")
    print(markdown(res))
    return res


if __name__ == "__main__":
    main()
