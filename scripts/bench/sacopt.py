"""SAC-Opt: toy accuracy of SAC-Opt + judge vs one-pass generation as the judge gets noisier and
as T_max grows (an accuracy ratio, not a cost; mean LLM calls in the spread column)."""

from __future__ import annotations

from methods.sacopt.pipeline import SACOptConfig
from methods.sacopt.toy import run_toy
from scripts.bench._harness import row


def run(quick: bool = False) -> dict:
    n, fps, tmaxes = (4, (0.5,), (0, 5)) if quick else (30, (0.0, 0.05, 0.2, 0.5), (0, 1, 5))
    rows = []
    for fp in fps:
        for t_max in tmaxes:
            cfg = SACOptConfig(
                n_problems=n,
                judge_false_pass=fp,
                t_max=t_max,
                arms=["single_pass", "sacopt_judge"],
                detection_problems=0,
            )
            m = run_toy(cfg, seed=0)
            rows.append(
                row(
                    f"accuracy, judge false-pass {fp:g}, T_max {t_max}",
                    m["sacopt_judge"]["accuracy"],
                    max(m["single_pass"]["accuracy"], 1e-9),
                    f"SAC-Opt LLM calls {m['sacopt_judge']['mean_llm_calls']:.1f}",
                )
            )
    return {
        "title": "SAC-Opt toy accuracy vs one-pass",
        "command": "python -m scripts.bench sacopt",
        "rows": rows,
        "notes": f"{n} toy problems, seed 0. No threshold in the issue; ratio > 1 is SAC-Opt's gain.",
    }
