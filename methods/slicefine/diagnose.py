"""Issue-43 diagnosis of the toy: does SliceFine lose to LoRA only because of a shared learning rate?

``python -m methods.slicefine.diagnose`` trains, on the toy's data and seeds (0-4), LoRA at ranks 1
and 2 and row slices at widths 1, 2 and 4 (moving every ``switch_every`` steps, plus a static slice
of width 4), each at every learning rate of ``--lrs`` (the head shares the arm's rate). Matched
trainable parameters: a row slice of width w holds 384·w weights per target matrix and LoRA of rank
k holds 2·384·k, so slice w=4 ↔ LoRA r=2 and slice w=2 ↔ LoRA r=1; slice w=1 (half of LoRA r=1) is
compared with LoRA r=1. Each arm's learning rate is picked on a validation split (its own seed,
mean over seeds) and the test accuracy is read at that rate; the table reports the paired Δ
(slice − its LoRA, each at its own best rate; mean over seeds and Student-t 95% interval), and the
same Δ at today's shared rate. Writes ``results.json``, ``results.md`` and
``slicefine_diagnose.png`` under ``--out``. Our experiment (docs/methods/slicefine.md, "Diagnosis"),
not the paper's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

from common.metrics import paired_difference as paired
from common.threads import torch_threads

from .config import ToyConfig
from .toy import load_minilm, make_data, train_arm

# name -> (toy arm, slice width or LoRA rank, matched LoRA variant or None)
VARIANTS: dict[str, tuple[str, int, str | None]] = {
    "lora_r1": ("lora", 1, None),
    "lora_r2": ("lora", 2, None),
    "slice_w1": ("slicefine", 1, "lora_r1"),
    "slice_w2": ("slicefine", 2, "lora_r1"),
    "slice_w4": ("slicefine", 4, "lora_r2"),
    "static_w4": ("static", 4, "lora_r2"),
}


def variant_config(toy: ToyConfig, name: str, lr: float) -> ToyConfig:
    """The toy setting of one variant at learning rate ``lr``."""
    arm, k, _ = VARIANTS[name]
    over = {"lora_r": k} if arm == "lora" else {"r": k}
    return dataclasses.replace(toy, lr=lr, **over)


def best_lr(runs: dict[float, list[dict]]) -> float:
    """The rate with the highest mean validation accuracy (ties: the smallest rate)."""
    return max(sorted(runs), key=lambda lr: statistics.mean(r["val_accuracy"] for r in runs[lr]))


def summarise(raw: dict[str, dict[float, list[dict]]], today_lr: float) -> list[dict]:
    """One row per variant: best rate, mean val/test accuracy at it, trainable parameters, and for
    slices the paired test Δ vs the matched LoRA at each one's best rate and at ``today_lr``."""
    best = {v: best_lr(runs) for v, runs in raw.items()}
    rows = []
    for v, runs in raw.items():
        acc = [r["accuracy"] for r in runs[best[v]]]
        row = {
            "variant": v,
            "best_lr": best[v],
            "val_accuracy": statistics.mean(r["val_accuracy"] for r in runs[best[v]]),
            "test_accuracy": statistics.mean(acc),
            "trainable_params": runs[best[v]][0]["trainable_params"],
            "test_by_lr": {
                lr: statistics.mean(r["accuracy"] for r in rs) for lr, rs in runs.items()
            },
            "seeds": len(acc),
        }
        ref = VARIANTS[v][2]
        if ref in raw:
            row["vs"] = ref
            row["tuned"] = paired(acc, [r["accuracy"] for r in raw[ref][best[ref]]])
            if today_lr in runs and today_lr in raw[ref]:
                row["today"] = paired(
                    [r["accuracy"] for r in runs[today_lr]],
                    [r["accuracy"] for r in raw[ref][today_lr]],
                )
        rows.append(row)
    return rows


def _ci(p: dict | None) -> str:
    if not p:
        return "—"
    d, h = p["delta"], p["ci95"]
    return f"{d:+.3f} [{d - h:+.3f}, {d + h:+.3f}]"


def _markdown(rows: list[dict], lrs: list[float], command: str, wall: float, today: float) -> str:
    lines = [
        f"Command: `{command}` (wall {wall:.0f} s, one torch thread)",
        "",
        "| variant | encoder params | best lr (val) | val acc | test acc | "
        + " | ".join(f"test @ {lr:g}" for lr in lrs)
        + f" | vs | Δ test, each at its best lr [95% CI] | Δ test @ {today:g} [95% CI] |",
        "|" + "---|" * (8 + len(lrs)),
    ]
    for r in rows:
        cells = [r["variant"], f"{r['trainable_params']:,.0f}", f"{r['best_lr']:g}"]
        cells += [f"{r['val_accuracy']:.3f}", f"{r['test_accuracy']:.3f}"]
        cells += [f"{r['test_by_lr'].get(lr, float('nan')):.3f}" for lr in lrs]
        cells += [r.get("vs", "—"), _ci(r.get("tuned")), _ci(r.get("today"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _plot(rows: list[dict], path: Path) -> None:
    from common.tracking import pyplot, save_plot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        xs = sorted(r["test_by_lr"])
        ls = "--" if r["variant"].startswith("lora") else "-"
        ax.plot(xs, [r["test_by_lr"][x] for x in xs], ls, marker="o", label=r["variant"])
    ax.set_xscale("log")
    ax.set_xlabel("learning rate (AdamW, shared by adapter and head)")
    ax.set_ylabel("test accuracy (mean over seeds)")
    ax.set_title("SliceFine toy: learning-rate sweep per variant")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_plot(fig, path)


def run(toy: ToyConfig, variants: list[str], lrs: list[float], seeds: list[int]) -> dict:
    """``{variant: {lr: [result per seed]}}``; every variant shares each seed's data."""
    encoder, tok = load_minilm(toy.encoder_layers)
    raw: dict[str, dict[float, list[dict]]] = {v: {lr: [] for lr in lrs} for v in variants}
    for seed in seeds:
        data = (
            make_data(toy.n_train, seed),
            make_data(toy.n_test, 10_000 + seed),
            make_data(toy.n_val, 20_000 + seed),
        )
        for v in variants:
            for lr in lrs:
                res = train_arm(
                    VARIANTS[v][0], encoder, tok, variant_config(toy, v, lr), seed, data
                )
                raw[v][lr].append({k: x for k, x in res.items() if not k.startswith("_")})
    return raw


def main(argv: list[str] | None = None) -> dict:
    """CLI: ``python -m methods.slicefine.diagnose [--seeds ...] [--lrs ...] [--variants ...]``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(5)))
    ap.add_argument("--lrs", type=float, nargs="+", default=[2e-3, 6e-3, 2e-2])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--steps", type=int, default=100, help="as configs/experiment/slicefine_toy")
    ap.add_argument("--n-val", type=int, default=400)
    ap.add_argument("--out", default="outputs/slicefine_diagnosis")
    args = ap.parse_args(argv)
    if len(args.seeds) < 2:
        raise ValueError(f"--seeds needs at least 2 seeds for a paired interval, got {args.seeds}")
    toy = ToyConfig(steps=args.steps, n_val=args.n_val, diagnostics=False)
    start = time.time()
    with torch_threads(1):
        raw = run(toy, args.variants, args.lrs, args.seeds)
    wall = time.time() - start
    rows = summarise(raw, ToyConfig.lr)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python -m methods.slicefine.diagnose " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    result = {"command": command.strip(), "wall_time_s": wall, "seeds": args.seeds,
              "lrs": args.lrs, "rows": rows, "raw": raw}  # fmt: skip
    (out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "results.md").write_text(_markdown(rows, args.lrs, command.strip(), wall, ToyConfig.lr))
    _plot(rows, out / "slicefine_diagnose.png")
    print((out / "results.md").read_text())
    return result


if __name__ == "__main__":
    main()
