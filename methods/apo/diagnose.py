"""Diagnosis of toy A1: does APO's anchor reach the dying hard action, and where does KL stand?

``python -m methods.apo.diagnose`` runs the bandit of :mod:`methods.apo.toy` for every
``hard_rank_band`` (the hard prompt's valid action at reference ranks 1-2, 3-8 or 6-8) × the arms
GRPO, GRPO+KL at three coefficients (KL's frontier), APO with the anchor ratio to π_ref and to
π_old at two β, on the same instances and sampling streams per seed, with ``grad_probe`` on
(:mod:`methods.apo.probe`). It reports each arm's paired difference to GRPO (mean over seeds and
its 95% Student-t interval) in hard Pass@64 and easy Pass@1, and the probe's split of the update
over the collapse window; results.json, results.md and frontier.png go to ``--out``.
Our diagnostic experiment (docs/methods/apo.md, "Diagnosis"), not the paper's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

from common.metrics import ci_halfwidth
from common.threads import torch_threads
from methods.apo.config import HARD_RANK_BANDS, BanditArm, BanditConfig
from methods.apo.probe import PROBE_KEYS
from methods.apo.toy import base_metrics, make_bandit, run_bandit_arm

__all__ = ["DIAGNOSIS_ARMS", "diagnosis_arms", "main", "paired_rows", "run_diagnosis"]

HEADLINE_KEYS: tuple[str, ...] = ("hard/pass@64", "easy/pass@1")
KL_COEFS: tuple[float, ...] = (0.05, 0.2, 1.0)  # 0.05 is the toy's; 0.2 and 1.0 cost easy Pass@1
DIAGNOSIS_ARMS: tuple[str, ...] = (
    "grpo",
    *(f"grpo_kl{c:g}" for c in KL_COEFS),
    "apo_ref_b0.1",
    "apo_ref_b0.5_tok",
    "apo_old_b0.1",
    "apo_old_b0.5_tok",
)


def diagnosis_arms(kl_coefs: tuple[float, ...] = KL_COEFS) -> list[BanditArm]:
    """The arms of :data:`DIAGNOSIS_ARMS`. β = 0.1 is the paper's (rectified clip, as the toy's
    ``apo`` arm); β = 0.5 uses ``token_only`` clipping, since with the rectified clip λ − β = 0.55 <
    1 − ε would clip every negative sample on-policy and the arm would train on positives only."""
    arms = [BanditArm("grpo")]
    arms += [BanditArm(f"grpo_kl{c:g}", kl="all", kl_coef=c) for c in kl_coefs]
    for to in ("ref", "old"):
        arms.append(BanditArm(f"apo_{to}_b0.1", lam=1.05, beta=0.1, anchor_ratio_to=to))
        arms.append(
            BanditArm(
                f"apo_{to}_b0.5_tok", lam=1.05, beta=0.5, clip_mode="token_only", anchor_ratio_to=to
            )
        )
    return arms


def _probe_means(curve: list[dict[str, float]], window: int) -> dict[str, float]:
    """Means of the probe keys over the rows logged at steps 1..``window`` (the collapse window)."""
    rows = [r for r in curve if 0 < r["step"] <= window and PROBE_KEYS[0] in r]
    return {k: statistics.mean(r[k] for r in rows) for k in PROBE_KEYS} if rows else {}


def run_diagnosis(
    seeds: list[int],
    bands: list[str],
    toy: BanditConfig,
    window: int = 200,
    arms: list[BanditArm] | None = None,
) -> dict[str, dict[str, dict[str, list[float]]]]:
    """Every band × arm × seed: ``{band: {arm: {metric: [value per seed]}}}`` (``base`` included).

    Arms of one seed share the instance and the sampling stream (:func:`run_bandit_arm`), so the
    per-seed values pair across arms.
    """
    from common.tracking import progress

    out: dict[str, dict[str, dict[str, list[float]]]] = {}
    arms = diagnosis_arms() if arms is None else arms
    jobs = [(b, s) for b in bands for s in seeds]
    with torch_threads(1):
        for band, seed in progress(jobs, desc="apo diagnosis (band, seed)", unit="seed"):
            cfg = dataclasses.replace(toy, hard_rank_band=band, grad_probe=True)
            problem = make_bandit(cfg, seed)
            per_arm = {"base": base_metrics(problem, cfg)}
            for arm in arms:
                final, curve = run_bandit_arm(problem, cfg, arm, seed)
                per_arm[arm.name] = {k: final[k] for k in HEADLINE_KEYS} | _probe_means(
                    curve, window
                )
            for arm_name, metrics in per_arm.items():
                dst = out.setdefault(band, {}).setdefault(arm_name, {})
                for k, v in metrics.items():
                    dst.setdefault(k, []).append(float(v))
    return out


def paired_rows(
    raw: dict[str, dict[str, dict[str, list[float]]]], baseline: str = "grpo"
) -> list[dict[str, object]]:
    """One row per band × arm: the mean of each headline metric, its paired Δ vs ``baseline`` (mean
    over seeds of the per-seed difference) with the 95% Student-t half-width, and the probe means."""
    rows: list[dict[str, object]] = []
    for band, arms in raw.items():
        for arm, metrics in arms.items():
            row: dict[str, object] = {
                "band": band,
                "arm": arm,
                "seeds": len(metrics[HEADLINE_KEYS[0]]),
            }
            for k in HEADLINE_KEYS:
                row[k] = statistics.mean(metrics[k])
                diffs = [a - b for a, b in zip(metrics[k], arms[baseline][k], strict=True)]
                row[f"{k}/delta"] = statistics.mean(diffs)
                row[f"{k}/ci95"] = ci_halfwidth(diffs, dist="t") if arm != baseline else 0.0
            for k in PROBE_KEYS:
                if k in metrics:
                    row[k] = statistics.mean(metrics[k])
            rows.append(row)
    return rows


def _fmt(x: object, nd: int = 3) -> str:
    return f"{x:+.{nd}f}" if isinstance(x, float) else str(x)


def _markdown(rows: list[dict[str, object]], command: str, wall: float, baseline: str) -> str:
    head = (
        f"| band | arm | hard P@64 | Δ vs {baseline} [95% CI] | easy P@1 | Δ vs {baseline} "
        "[95% CI] | "
        "PG drift | anchor drift | KL drift | anchor logit share | zero-adv hard groups | "
        "hard p_valid |\n|" + "---|" * 12
    )
    lines = [f"Command: `{command}` (wall {wall:.0f} s, one torch thread)", "", head]
    for r in rows:
        cells = [str(r["band"]), str(r["arm"])]
        for k in HEADLINE_KEYS:
            cells.append(f"{r[k]:.3f}")
            cells.append(
                "—"
                if r["arm"] in (baseline, "base")
                else f"{r[f'{k}/delta']:+.3f} [{r[f'{k}/delta'] - r[f'{k}/ci95']:+.3f}, "
                f"{r[f'{k}/delta'] + r[f'{k}/ci95']:+.3f}]"
            )
        for k in PROBE_KEYS[:3]:
            cells.append(f"{1e3 * r[k]:+.2f}" if k in r else "—")
        for k in (PROBE_KEYS[3], PROBE_KEYS[5], PROBE_KEYS[6]):
            cells.append(f"{r[k]:.3f}" if k in r else "—")
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Δ: mean over seeds of (arm − {baseline}) on the same instance and sampling stream, with the 95% "
        "Student-t interval. Drifts: first-order change of mean hard log p_valid per SGD step from "
        "each part of the update (×1e-3 nats), mean over the probes at steps 1-window; anchor logit "
        "share: the anchor term's share of the gradient on the hard prompts' valid-action logit.",
    ]
    return "\n".join(lines) + "\n"


def _plot(rows: list[dict[str, object]], path: Path, baseline: str) -> None:
    from common.tracking import pyplot, save_plot

    plt = pyplot()
    bands = list(dict.fromkeys(str(r["band"]) for r in rows))
    fig, axes = plt.subplots(1, len(bands), figsize=(4.6 * len(bands), 4), squeeze=False)
    for ax, band in zip(axes[0], bands):
        for r in rows:
            if r["band"] != band or r["arm"] in (baseline, "base"):
                continue
            ax.errorbar(
                r["easy/pass@1/delta"], r["hard/pass@64/delta"],
                xerr=r["easy/pass@1/ci95"], yerr=r["hard/pass@64/ci95"],
                fmt="s" if str(r["arm"]).startswith("grpo_kl") else "o", capsize=3, label=r["arm"],
            )  # fmt: skip
        ax.axhline(0, color="k", lw=0.6)
        ax.axvline(0, color="k", lw=0.6)
        ax.set_xlabel(f"Δ easy Pass@1 vs {baseline} (paired)")
        ax.set_ylabel(f"Δ hard Pass@64 vs {baseline} (paired)")
        ax.set_title(f"hard action band: {band} {HARD_RANK_BANDS[band]}")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(f"APO toy A1 diagnosis: paired Δ vs {baseline}, 95% CI over seeds")
    save_plot(fig, path)


def main(argv: list[str] | None = None) -> dict[str, object]:
    """CLI: ``python -m methods.apo.diagnose [--seeds 0 1 ...] [--bands ...] [--out DIR]``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    ap.add_argument(
        "--bands", nargs="+", default=list(HARD_RANK_BANDS), choices=list(HARD_RANK_BANDS)
    )
    ap.add_argument("--steps", type=int, default=BanditConfig.steps)
    ap.add_argument("--window", type=int, default=200, help="probe window (steps 1..window)")
    ap.add_argument("--kl-coefs", type=float, nargs="+", default=list(KL_COEFS))
    ap.add_argument("--arms", nargs="+", default=None, help="a subset of the arm names")
    ap.add_argument("--baseline", default="grpo", help="the arm every Δ is paired against")
    ap.add_argument("--out", default="outputs/apo_diagnosis")
    args = ap.parse_args(argv)
    if len(args.seeds) < 2:
        raise ValueError(f"--seeds needs at least 2 seeds for a paired interval, got {args.seeds}")
    toy = BanditConfig(steps=args.steps)
    start = time.time()
    arms = diagnosis_arms(tuple(args.kl_coefs))
    if args.arms is not None:
        unknown = sorted(set(args.arms) - {a.name for a in arms})
        if unknown or args.baseline not in args.arms:
            raise ValueError(
                f"--arms must name arms of {[a.name for a in arms]} and include --baseline "
                f"{args.baseline!r}; got {args.arms}"
            )
        arms = [a for a in arms if a.name in args.arms]
    raw = run_diagnosis(args.seeds, args.bands, toy, args.window, arms)
    wall = time.time() - start
    rows = paired_rows(raw, args.baseline)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python -m methods.apo.diagnose " + " ".join(sys.argv[1:] if argv is None else argv)
    result = {"command": command.strip(), "wall_time_s": wall, "seeds": args.seeds,
              "toy": dataclasses.asdict(toy), "window": args.window, "rows": rows, "raw": raw}  # fmt: skip
    (out / "results.json").write_text(json.dumps(result, indent=1))
    (out / "results.md").write_text(_markdown(rows, command.strip(), wall, args.baseline))
    _plot(rows, out / "frontier.png", args.baseline)
    print((out / "results.md").read_text())  # noqa: T201 (CLI output)
    return result


if __name__ == "__main__":
    main()
