"""MCCE: cost of the official whole-archive NSGA-II selection and of the HV metric, as ratios.

Selection runs on the *entire* archive every generation (official ``model/util.py::nsga2_so_selection``),
so its cost grows with the budget. On random 5-objective t vectors: ``nsga2_so_select(archive, 50)``
and the top-100 hypervolume against a plain top-k by F (the scalar baseline), archive sizes up to
the paper's budget of 5000. Informative ratios (no threshold in the issue).
"""

from __future__ import annotations

import numpy as np

from methods.mcce import Candidate, fitness, hypervolume, nsga2_so_select
from scripts.bench._harness import row, time_median


def run(quick: bool = False) -> dict:
    rng = np.random.default_rng(0)
    sizes, reps = ((100,), 1) if quick else ((500, 1000, 2500, 5000), 3)
    rows = []
    for n in sizes:
        t = rng.random((n, 5))
        cands = [Candidate(f"C{i}", {}, t[i], float(fitness(t[i])), index=i) for i in range(n)]
        topk, tk_iqr = time_median(lambda c=cands: sorted(c, key=lambda x: -x.total)[:50], reps, 1)
        sel, s_iqr = time_median(lambda c=cands: nsga2_so_select(c, 50), reps, 0)
        hv, h_iqr = time_median(lambda c=cands: hypervolume(c, top=100), reps, 0)
        rows.append(row(f"NSGA-II select 50 (s), archive {n}", sel, topk, f"IQR {s_iqr:.2g} s"))
        rows.append(row(f"HV top-100 (s), archive {n}", hv, topk, f"IQR {h_iqr:.2g} s"))
    return {
        "title": "MCCE selection and hypervolume vs top-k",
        "command": "python -m scripts.bench mcce",
        "rows": rows,
        "notes": "Baseline: `sorted(archive, key=-F)[:50]`. No threshold: the ratios size the cost of "
        "the official whole-archive selection.",
    }
