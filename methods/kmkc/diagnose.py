"""Issue-43 diagnosis of the toy: why does CGKE tie uniform SFT at equal budget?

``python -m methods.kmkc.diagnose`` pretrains the toy's fact world once per seed (seeds 0-4), builds
CGKE's item pool from the rule regions, then, from the same checkpoint, fine-tunes four arms at
equal budget: ``vanilla_sft`` (uniform, with replacement: today's baseline), ``vanilla_cover``
(uniform, every fact once per round), ``cgke`` and ``cgke_plain`` (CGKE's items, so its per-region
counts, as plain (question, gold) pairs: allocation without augmentation). Cells: today's setting
(CGKE's pool size, ``sft_steps`` steps) and a budget sweep of ``--budgets`` items per fact at a fixed
``--epochs``. Every model is asked in three templates (``prompt_ids``): ``qa`` (the training
template, today's evaluation), ``reversed`` (held out: no arm trains it on a tier-C fact) and
``statement`` (the wording of CGKE's epistemic-foundation items, without their context). Per cell
it reports the paired Δ (mean over seeds and the Student-t 95% interval) of cgke − vanilla_sft,
cgke_plain − vanilla_sft, cgke − cgke_plain and vanilla_cover − vanilla_sft, and the preconditions
(items and passes per tier-C fact, uniform's unseen share). Writes ``results.json``,
``results.md`` and ``kmkc_diagnose.png`` under ``--out``. Our experiment (docs/methods/kmkc.md,
"Diagnosis"), not the paper's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from common.metrics import ci_halfwidth
from common.threads import torch_threads

from .config import EVAL_TEMPLATES, ToyConfig
from .toy import greedy_eval, pretrain_and_profile, toy_generator, train
from .toy_sft import cgke_pool, sft_arm_pairs, sft_steps, uniform_pairs

ARMS = ("vanilla_sft", "vanilla_cover", "cgke", "cgke_plain")
COMPARISONS = (
    ("cgke", "vanilla_sft"),
    ("cgke_plain", "vanilla_sft"),
    ("cgke", "cgke_plain"),
    ("vanilla_cover", "vanilla_sft"),
)
METRICS = tuple(f"{t}/{k}" for t in EVAL_TEMPLATES for k in ("acc", "acc_C"))


def cells(budgets: list[float], epochs: float) -> dict[str, dict]:
    """Cell name → ToyConfig overrides: today's setting, then one per budget at ``epochs``."""
    out: dict[str, dict] = {"today": {}}
    for b in budgets:
        out[f"{b:g}/fact"] = {"sft_items_per_fact": b, "sft_epochs": epochs}
    return out


def preconditions(world, data: dict[str, list], steps: dict[str, int], batch: int) -> dict:
    """Per arm: items per tier-C fact, SFT passes per item, and the share of tier-C facts with no
    item containing their question (in either word order)."""
    c_facts = [q for q, _, _, t in world.facts if t == "C"]
    out = {}
    for arm, pairs in data.items():
        qs = Counter(" ".join(sorted(q.split())) for q, _ in pairs)
        per_c = [qs.get(" ".join(sorted(q.split())), 0) for q in c_facts]
        out[arm] = {
            "items_per_C_fact": statistics.mean(per_c),
            "passes_per_item": steps[arm] * batch / len(pairs),
            "unseen_C": sum(n == 0 for n in per_c) / len(c_facts),
        }
    return out


def run_seed_cells(toy: ToyConfig, seed: int, cell_cfgs: dict[str, dict]) -> dict:
    """One seed: ``{cell: {arm: {metric: value}, "pre": preconditions}}``; one pretrained checkpoint
    and one CGKE pool for every cell and arm."""
    world, model, state, profiles, _, _ = pretrain_and_profile(toy, seed)
    pool, questions, _ = cgke_pool(world, profiles, toy, toy_generator(world))
    out: dict = {}
    for cell, over in cell_cfgs.items():
        cfg = dataclasses.replace(toy, **over)
        data = sft_arm_pairs(world, pool, questions, cfg, seed)
        data["vanilla_cover"] = uniform_pairs(world, len(data["cgke"]), "cover", seed)
        steps = {arm: sft_steps(cfg, len(data[arm])) for arm in ARMS}
        res: dict = {"pre": preconditions(world, data, steps, cfg.batch_size)}
        for arm in ARMS:
            model.load_state_dict(state)
            train(model, world, data[arm], steps[arm], cfg.sft_lr, cfg.batch_size, seed + 2)
            res[arm] = {"n_items": len(data[arm]), "steps": steps[arm]}
            for t in EVAL_TEMPLATES:
                ev = greedy_eval(model, world, template=t)
                res[arm] |= {f"{t}/acc": ev["acc"], f"{t}/acc_C": ev["acc_C"]}
        out[cell] = res
    return out


def paired_rows(raw: dict[str, list[dict]]) -> list[dict]:
    """One row per cell × comparison: mean of each arm and the paired Δ with its 95% t half-width."""
    rows = []
    for cell, per_seed in raw.items():
        for a, b in COMPARISONS:
            row: dict = {"cell": cell, "arm": a, "baseline": b, "seeds": len(per_seed)}
            for k in METRICS:
                diffs = [s[a][k] - s[b][k] for s in per_seed]
                row[k] = statistics.mean(s[a][k] for s in per_seed)
                row[f"{k}/base"] = statistics.mean(s[b][k] for s in per_seed)
                row[f"{k}/delta"] = statistics.mean(diffs)
                row[f"{k}/ci95"] = ci_halfwidth(diffs, dist="t")
            row["steps"] = per_seed[0][a]["steps"]
            row["n_items"] = per_seed[0][a]["n_items"]
            for k in ("items_per_C_fact", "passes_per_item", "unseen_C"):
                row[f"{a}/{k}"] = statistics.mean(s["pre"][a][k] for s in per_seed)
                row[f"{b}/{k}"] = statistics.mean(s["pre"][b][k] for s in per_seed)
            rows.append(row)
    return rows


def _ci(r: dict, k: str) -> str:
    d, h = r[f"{k}/delta"], r[f"{k}/ci95"]
    return f"{d:+.3f} [{d - h:+.3f}, {d + h:+.3f}]"


def _markdown(rows: list[dict], command: str, wall: float) -> str:
    keys = ("qa/acc", "qa/acc_C", "reversed/acc_C", "statement/acc_C")
    head = (
        "| cell (items, steps) | Δ | " + " | ".join(f"Δ {k} [95% CI]" for k in keys)
        + " | items / passes per C fact (arm vs baseline) | unseen C (arm vs baseline) |\n|"
        + "---|" * (4 + len(keys))
    )  # fmt: skip
    lines = [f"Command: `{command}` (wall {wall:.0f} s, one torch thread)", "", head]
    for r in rows:
        a, b = r["arm"], r["baseline"]
        ipf = [r[f"{x}/items_per_C_fact"] for x in (a, b)]
        pas = [r[f"{x}/items_per_C_fact"] * r[f"{x}/passes_per_item"] for x in (a, b)]
        cells_ = [f"{r['cell']} ({r['n_items']}, {r['steps']})", f"{a} − {b}"]
        cells_ += [_ci(r, k) for k in keys]
        cells_.append(f"{ipf[0]:.2f} / {pas[0]:.1f} vs {ipf[1]:.2f} / {pas[1]:.1f}")
        cells_.append(f"{r[f'{a}/unseen_C']:.3f} vs {r[f'{b}/unseen_C']:.3f}")
        lines.append("| " + " | ".join(cells_) + " |")
    lines += ["", "Means of the arms (qa/acc; reversed/acc_C):", ""]
    for r in rows:
        if r["baseline"] == "vanilla_sft" and r["arm"] == "cgke":
            lines.append(
                f"- {r['cell']}: vanilla_sft {r['qa/acc/base']:.3f}, cgke {r['qa/acc']:.3f}; "
                f"reversed acc_C {r['reversed/acc_C/base']:.3f} vs {r['reversed/acc_C']:.3f}"
            )
    return "\n".join(lines) + "\n"


def _plot(rows: list[dict], path: Path) -> None:
    from common.tracking import pyplot, save_plot

    plt = pyplot()
    keys = ("qa/acc", "qa/acc_C", "reversed/acc_C")
    fig, axes = plt.subplots(1, len(keys), figsize=(4.6 * len(keys), 3.8), squeeze=False)
    sweep = [r for r in rows if r["cell"] != "today"]
    for ax, k in zip(axes[0], keys):
        for a, b in COMPARISONS:
            rs = [r for r in sweep if r["arm"] == a and r["baseline"] == b]
            xs = [float(r["cell"].split("/")[0]) for r in rs]
            ax.errorbar(
                xs, [r[f"{k}/delta"] for r in rs], yerr=[r[f"{k}/ci95"] for r in rs],
                marker="o", capsize=3, label=f"{a} − {b}",
            )  # fmt: skip
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xscale("log")
        ax.set_xlabel("SFT items per fact (fixed epochs)")
        ax.set_ylabel(f"paired Δ {k}")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("KMKC toy diagnosis: paired Δ, 95% CI over seeds")
    save_plot(fig, path)


def main(argv: list[str] | None = None) -> dict:
    """CLI: ``python -m methods.kmkc.diagnose [--seeds ...] [--budgets ...] [--epochs E] [--out D]``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(5)))
    ap.add_argument("--budgets", type=float, nargs="+", default=[0.5, 1.0, 3.0])
    ap.add_argument("--epochs", type=float, default=3.0)
    ap.add_argument("--pretrain-steps", type=int, default=ToyConfig.pretrain_steps)
    ap.add_argument("--n-per-tier", type=int, default=ToyConfig.n_per_tier)
    ap.add_argument("--sft-steps", type=int, default=ToyConfig.sft_steps, help="today's cell")
    ap.add_argument("--out", default="outputs/kmkc_diagnosis")
    args = ap.parse_args(argv)
    if len(args.seeds) < 2:
        raise ValueError(f"--seeds needs at least 2 seeds for a paired interval, got {args.seeds}")
    toy = ToyConfig(
        pretrain_steps=args.pretrain_steps, n_per_tier=args.n_per_tier, sft_steps=args.sft_steps
    )
    cell_cfgs = cells(args.budgets, args.epochs)
    start = time.time()
    raw: dict[str, list[dict]] = {c: [] for c in cell_cfgs}
    with torch_threads(1):
        for seed in args.seeds:
            for cell, res in run_seed_cells(toy, seed, cell_cfgs).items():
                raw[cell].append(res)
    wall = time.time() - start
    rows = paired_rows(raw)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python -m methods.kmkc.diagnose " + " ".join(sys.argv[1:] if argv is None else argv)
    result = {"command": command.strip(), "wall_time_s": wall, "seeds": args.seeds,
              "toy": dataclasses.asdict(toy), "cells": cell_cfgs, "rows": rows, "raw": raw}  # fmt: skip
    (out / "results.json").write_text(json.dumps(result, indent=1))
    (out / "results.md").write_text(_markdown(rows, command.strip(), wall))
    _plot(rows, out / "kmkc_diagnose.png")
    print((out / "results.md").read_text())  # noqa: T201 (CLI output)
    return result


if __name__ == "__main__":
    main()
