"""SAC-Opt's paper stage: the benchmark runner over the cleaned benchmarks and seeds (mean over 5
runs as the paper reports; official code run.py).

``icml26 experiment=sacopt_paper``: :func:`paper_stage` runs :func:`run_benchmark` on every set of the
``benchmark`` group; :func:`format_paper_table` writes the paper-style table.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from common.config import Run
from common.llm import ChatLLM
from common.tracking import progress
from methods.sacopt.pipeline import SACOptConfig, is_correct, solve_problem

logger = logging.getLogger(__name__)

__all__ = ["format_paper_table", "load_problems", "paper_stage", "run_benchmark"]


def load_problems(root: str | Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Read ``<root>/<id>/description.txt`` + ``answer.txt`` (+ optional ``sample.json``).

    The official repo's processed layout; see :mod:`methods.sacopt.data` for the benchmarks'
    own formats. Problems without a numeric answer are excluded, with the reason returned
    (our bad-input rules).

    Returns:
        ``(problems, excluded_reasons)``; each problem is ``{id, dataset, description, answer,
        input, meta}`` (:class:`~methods.sacopt.data.ORProblem`).
    """
    from methods.sacopt.data import convert_problem_dirs

    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"dataset folder {root} does not exist")
    problems, excluded = convert_problem_dirs(root)
    for r in excluded:
        logger.warning("excluded %s", r)
    return list(problems), excluded


def _score(rec: dict[str, Any], answer: float, cfg: SACOptConfig) -> None:
    ok = rec["status"] == "optimal"
    rec["correct"] = ok and is_correct(rec["objective"], answer, cfg.rtol, cfg.atol)
    rec["correct_1e-2"] = ok and is_correct(rec["objective"], answer, 1e-2, cfg.atol)


def run_benchmark(
    cfg: SACOptConfig,
    llm: ChatLLM | None = None,
    out_dir: str | Path | None = None,
    sets: dict[str, tuple[str, int | None]] | None = None,
) -> dict[str, dict[str, float]]:
    """Paper-scale evaluation: every dataset in ``cfg.datasets``, every seed (the paper's setup: mean over 5 seeds).

    Each seed is one full pass over every dataset with a fresh chat client whose request seed is
    ``cfg.llm_seed + seed`` (temperature ``cfg.temperature``); the paper reports the mean over 5
    such runs. Problems run concurrently (``cfg.workers`` threads; each solve is a separate
    sandboxed process, so threads are enough).

    Args:
        cfg: Settings; ``cfg.data_root`` holds the benchmarks in the LLM4OR ``clean_benchmarks``
            layout or the official repo's processed layout
            (:func:`~methods.sacopt.data.load_clean_benchmark`).
        llm: Chat model for every seed (tests); default a fresh
            :class:`common.llm.OpenAIChat` per seed from ``cfg.llm_*``.
        out_dir: Where to write ``results_<dataset>_seed<k>.jsonl`` (one record per problem)
            and ``paper_table.md``.
        sets: ``{dataset: (root, limit)}`` (the ``benchmark`` group's sets); default every name of
            ``cfg.datasets`` under ``cfg.data_root``.

    Returns:
        ``{dataset: {"accuracy_mean", "accuracy_std", "accuracy_1e-2_mean", "accuracy_1e-2_std",
        "n", "n_excluded", "mean_llm_calls", "mean_runtime_s"}}`` plus an ``"average"`` row:
        the macro-average over datasets, its std taken over the seeds' macro-averages.
    """
    if sets is None:
        if not cfg.data_root:
            raise ValueError(
                "data_root must point at the cleaned benchmarks (see docs/methods/sacopt.md)"
            )
        if not cfg.datasets:
            raise ValueError("datasets must list at least one benchmark, e.g. [IndustryOR]")
        sets = {name: (cfg.data_root, None) for name in cfg.datasets}
    if not sets:
        raise ValueError("sets must name at least one benchmark")
    if not cfg.seeds:
        raise ValueError("seeds must list at least one seed")
    out = Path(out_dir) if out_dir else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    loaded = _load_sets(sets, cfg)
    # per_seed[name][k] = list of records of seed k
    per_seed: dict[str, list[list[dict[str, Any]]]] = {n: [] for n in loaded}
    for seed in progress(cfg.seeds, desc="sacopt seeds", unit="seed"):
        done = _run_seed(cfg, llm, loaded, seed)
        for name in loaded:
            recs = [r for r in done if r["dataset"] == name]
            logger.info(
                "%s seed %d: accuracy %.3f over %d",
                name,
                seed,
                float(np.mean([r["correct"] for r in recs])),
                len(recs),
            )
            if out:
                with open(out / f"results_{name}_seed{seed}.jsonl", "w") as f:
                    for r in recs:
                        f.write(json.dumps({k: v for k, v in r.items() if k != "state"}) + "\n")
            per_seed[name].append(recs)
    table = _summarise(per_seed, loaded, len(cfg.seeds))
    if out:
        (out / "paper_table.md").write_text(format_paper_table(table, cfg))
    return table


def _load_sets(sets: dict[str, tuple[str, int | None]], cfg: SACOptConfig) -> dict[str, tuple]:
    """``{name: (problems, excluded)}``, each set cut to its limit (else ``cfg.max_problems``)."""
    from methods.sacopt.data import load_clean_benchmark

    loaded = {}
    for name, (root, limit) in sets.items():
        problems, excluded = load_clean_benchmark(name, root)
        limit = limit if limit is not None else cfg.max_problems
        if limit is not None:
            problems = problems[:limit]
        if not problems:
            raise ValueError(f"benchmark {name} under {root} has no usable problem")
        loaded[name] = (problems, excluded)
    return loaded


def _run_seed(
    cfg: SACOptConfig, llm: ChatLLM | None, loaded: dict[str, tuple], seed: int
) -> list[dict[str, Any]]:
    """One run (one of the paper's 5 averaged runs; official code run.py) over every set's problems,
    scored records."""
    from concurrent.futures import ThreadPoolExecutor

    from common.llm import OpenAIChat

    client = llm or OpenAIChat(
        cfg.llm_model,
        base_url=cfg.llm_base_url,
        api_key_env=cfg.llm_api_key_env,
        temperature=cfg.temperature,
        seed=cfg.llm_seed + seed,
    )

    def one(task):
        name, p = task
        rec = solve_problem(client, p["description"], cfg, input_data=p["input"])
        rec.update(id=p["id"], dataset=name, answer=p["answer"], seed=seed)
        _score(rec, p["answer"], cfg)
        return rec

    # one pool over every dataset's problems, so small benchmarks do not idle the workers
    tasks = [(name, p) for name, (problems, _) in loaded.items() for p in problems]
    with ThreadPoolExecutor(max_workers=cfg.workers) as pool:
        return list(pool.map(one, tasks))


def _summarise(
    per_seed: dict[str, list[list[dict[str, Any]]]], loaded: dict[str, tuple], n_seeds: int
) -> dict[str, dict[str, float]]:
    """Mean and population std over the seeds per set, and the macro-average row (our inference:
    the paper reports mean over 5 runs, not which std)."""
    table: dict[str, dict[str, float]] = {}
    macro = np.zeros(n_seeds)  # (n_seeds,) macro-average accuracy of each seed
    macro2 = np.zeros(n_seeds)
    for name, runs in per_seed.items():
        acc = np.array([np.mean([r["correct"] for r in recs]) for recs in runs])  # (n_seeds,)
        acc2 = np.array([np.mean([r["correct_1e-2"] for r in recs]) for recs in runs])
        macro += acc / len(per_seed)
        macro2 += acc2 / len(per_seed)
        allrecs = [r for recs in runs for r in recs]
        table[name] = {
            "accuracy_mean": float(acc.mean()),
            "accuracy_std": float(acc.std()),
            "accuracy_1e-2_mean": float(acc2.mean()),
            "accuracy_1e-2_std": float(acc2.std()),
            "n": float(len(loaded[name][0])),
            "n_excluded": float(len(loaded[name][1])),
            "mean_llm_calls": float(np.mean([r.get("n_llm_calls", 0) for r in allrecs])),
            "mean_runtime_s": float(np.mean([r.get("runtime_s", 0.0) for r in allrecs])),
        }
    table["average"] = {
        "accuracy_mean": float(macro.mean()),
        "accuracy_std": float(macro.std()),
        "accuracy_1e-2_mean": float(macro2.mean()),
        "accuracy_1e-2_std": float(macro2.std()),
        "n": float(sum(len(p) for p, _ in loaded.values())),
        "n_excluded": float(sum(len(e) for _, e in loaded.values())),
    }
    return table


def format_paper_table(table: dict[str, dict[str, float]], cfg: SACOptConfig) -> str:
    """Markdown table in the paper's style: accuracy (%) as mean ± std over the seeds."""
    lines = [
        f"SAC-Opt, {cfg.llm_model}, verifier={cfg.verifier}, T_max={cfg.t_max}, "
        f"{len(cfg.seeds)} seeds (mean ± std, population std over seeds)",
        "",
        "| dataset | N | excluded | accuracy % (rel 1e-4) | accuracy % (rel 1e-2) |",
        "|---|---|---|---|---|",
    ]
    for name, row in table.items():
        lines.append(
            f"| {name} | {int(row['n'])} | {int(row['n_excluded'])} | "
            f"{100 * row['accuracy_mean']:.1f} ± {100 * row['accuracy_std']:.1f} | "
            f"{100 * row['accuracy_1e-2_mean']:.1f} ± {100 * row['accuracy_1e-2_std']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def _check_data_folders(sets: dict[str, tuple[str, int | None]]) -> None:
    """Stops before any API call when a set's data folder is missing, naming how to set it.

    Raises:
        ConfigError: naming the first missing ``benchmark.sets.<set>.path``, ``SACOPT_DATA``
            and the fix.
    """
    from common.config import ConfigError
    from methods.sacopt.data import DATA_HINT

    missing = [(n, root) for n, (root, _) in sets.items() if not Path(root).expanduser().is_dir()]
    if missing:
        name, root = missing[0]
        more = f" (and {len(missing) - 1} more sets)" if len(missing) > 1 else ""
        raise ConfigError(
            f"benchmark.sets.{name}.path={root!r}{more}: no such folder "
            f"({Path(root).expanduser().resolve()}); {DATA_HINT}"
        )


def paper_stage(run: Run) -> dict[str, float]:
    """The ``paper`` stage: :func:`run_benchmark` on every set of ``run.benchmark`` (format
    ``or_clean``; a set's ``path`` is the cleaned-benchmarks folder, its ``limit`` the first k
    problems), or on ``method.datasets`` under ``method.data_root`` when no benchmark is selected."""
    from common.config import dataset_source
    from common.tracking import write_results

    sets = None
    if run.benchmark is not None:
        sets = {n: (dataset_source(sp), sp.limit) for n, sp in run.benchmark.sets.items()}
        _check_data_folders(sets)
    metrics = run_benchmark(run.method, out_dir=run.run_dir, sets=sets)
    return write_results(run.run_dir, "sacopt", metrics, cfg=run.cfg)
