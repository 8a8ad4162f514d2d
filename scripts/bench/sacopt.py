"""SAC-Opt bench: toy accuracy as the judge gets noisier and as T_max grows (not a test).

    python scripts/bench/sacopt.py --n 60

Prints one Markdown table: accuracy of one-pass generation vs SAC-Opt+judge for judge false-pass
rates {0, 0.05, 0.2, 0.5} and T_max {0, 1, 5}, plus mean LLM calls (the cost side of the ratio).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ICML26_PROGRESS", "0")

from methods.sacopt.evaluate import SACOptConfig  # noqa: E402
from methods.sacopt.experiment import run_toy  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows = [
        "| judge false-pass | T_max | one-pass acc | SAC-Opt acc | ratio | SAC-Opt LLM calls |",
        "|---|---|---|---|---|---|",
    ]
    for fp in (0.0, 0.05, 0.2, 0.5):
        for t_max in (0, 1, 5):
            cfg = SACOptConfig(
                n_problems=args.n,
                judge_false_pass=fp,
                t_max=t_max,
                arms=["single_pass", "sacopt_judge"],
                detection_problems=0,
            )
            m = run_toy(cfg, seed=args.seed)
            a, b = m["single_pass"]["accuracy"], m["sacopt_judge"]["accuracy"]
            ratio = b / a if a else float("inf")
            rows.append(
                f"| {fp:g} | {t_max} | {a:.3f} | {b:.3f} | {ratio:.2f} | "
                f"{m['sacopt_judge']['mean_llm_calls']:.1f} |"
            )
    print("\n".join(rows))


if __name__ == "__main__":
    main()
