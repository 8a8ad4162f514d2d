"""The paper stage ``icml26 experiment=agentxray_paper`` (``stage=paper``).

Every set of the benchmark group (``configs/benchmark/agentxray.yaml``: the AgentXRay subsets by hub
id ``shiowen/AgentXRay-Datasets`` or a local folder) × arm (red_black, no_coloring, pure_random) ×
seed, with an OpenAI-compatible model for the profile generator and every agent (official code
``experiment.py``, ``cli.py``: search on the train split, the extracted workflow scored on the test
split); token counts from the API's usage field, generator tokens reported apart from agent tokens.
With ``method.checkpoint_dir`` each search checkpoints after every iteration, its test evaluation
is journaled, and a finished (set, arm, seed) is not run again (``resume.py``).
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from pathlib import Path

from common.checkpoint import CallJournal, atomic_write_json
from common.config import Run
from common.tracking import write_results

from .config import PAPER_ARMS, AgentXRayRunConfig
from .costs import CostMeter
from .executor import WorkflowExecutor, compiler_tool, empty_detect, syntax_check
from .mcts import AgentXRaySearch, extract_workflow
from .primitives import LLMProfileGenerator, PrimitiveSpace
from .resume import run_journaled
from .similarity import SIMILARITIES
from .toy import search_config, summarize_seeds

logger = logging.getLogger(__name__)

Pairs = list[tuple[str, str]]


def _search_row(res, gen: LLMProfileGenerator, test_meter: CostMeter, scores: list[float]) -> dict:
    """The metrics of one search: test SFE, shape, search tokens by kind, test tokens."""
    tok = dict(res.tokens)
    counted = tok["counted_by/api"] + tok["counted_by/tokenizer"]
    return {
        "test_sfe": statistics.mean(scores) if scores else 0.0,
        "length": float(len(res.best_workflow)),
        "depth": float(res.depth),
        "tokens": float(tok["tokens/total"]),
        "tokens_generator": float(tok["tokens/generator"]),
        "tokens_agent": float(tok["tokens/agent"]),
        "completion_tokens": float(
            tok["completion_tokens/generator"] + tok["completion_tokens/agent"]
        ),
        "calls_generator": float(tok["calls/generator"]),
        "calls_agent": float(tok["calls/agent"]),
        "tokens_from_api_usage": float(tok["counted_by/api"] / max(1, counted)),
        "test_tokens": float(test_meter.total),
        "generator_parse_failures": float(gen.parse_failures),
    }


def _paper_search(
    arm: str,
    seed: int,
    cfg: AgentXRayRunConfig,
    train: Pairs,
    test: Pairs,
    sim_name: str,
    checkpoint_dir: str | None = None,
) -> dict:
    """One search + test evaluation on real data with an OpenAI-compatible model.

    ``checkpoint_dir``: this search's own folder; a finished row (``row.json``) is returned as is.
    """
    from .costs import UsageOpenAIChat

    done = Path(checkpoint_dir) / "row.json" if checkpoint_dir else None
    if done is not None and done.exists():
        return json.loads(done.read_text())
    meter = CostMeter()
    llm = UsageOpenAIChat(
        cfg.llm_model,
        base_url=cfg.base_url,
        api_key_env=cfg.llm_api_key_env,
        temperature=1.0,  # official code backends/gpt.py
        max_tokens=8192,  # official code backends/gpt.py (env MAX_TOKENS)
        seed=seed,
    )
    tool_impl = {
        "compiler": lambda: compiler_tool(cfg.compiler_timeout, isolation=cfg.compiler_isolation),
        "syntax_error_checker": lambda: syntax_check,
        "empty_detect": lambda: empty_detect,
    }
    ex = WorkflowExecutor(llm, {t: tool_impl[t]() for t in cfg.tools}, meter)
    gen = LLMProfileGenerator(llm, cfg.model_menu, default_model=cfg.default_model, meter=meter)
    sim = SIMILARITIES[sim_name]
    t0 = time.perf_counter()
    space = PrimitiveSpace(cfg.tools, gen, cfg.model_menu)
    search = AgentXRaySearch(space, ex, sim, search_config(cfg, arm, seed))
    res = search.run(train, checkpoint_dir=checkpoint_dir)
    test_meter = CostMeter()  # evaluation calls are counted apart from the search budget
    tex = WorkflowExecutor(llm, ex.tools, test_meter)
    if checkpoint_dir is None:
        outs = [tex.run(res.best_workflow, t) for t, _ in test]
    else:
        journal = CallJournal(Path(checkpoint_dir) / "test_journal.jsonl")
        outs = [run_journaled(journal, tex, res.best_workflow, t) for t, _ in test]
    scores = [sim(tex.final_output(out), o) for out, (_, o) in zip(outs, test, strict=True)]
    row = {
        **_search_row(res, gen, test_meter, scores),
        "seconds": time.perf_counter() - t0,
        "_workflow": extract_workflow(res),
    }
    if done is not None:
        atomic_write_json(done, row)
    return row


def _set_pairs(cfg: AgentXRayRunConfig, name: str, spec) -> tuple[Pairs, Pairs]:
    """Train and test pairs of one benchmark set: its local folder, or the hub snapshot."""
    from .data import load_set_folder, resolve_data_root

    subset = spec.config or name
    if spec.path:
        folder = Path(spec.path)
    else:
        root = resolve_data_root(
            spec.hub_id, [subset], revision=cfg.hub_revision, cache_dir=cfg.hub_cache_dir
        )
        folder = Path(root) / subset
    train = load_set_folder(folder, subset, "train")[: cfg.train_samples or None]
    cap = cfg.test_samples or spec.limit
    test = load_set_folder(folder, subset, "test")[: cap or None]
    return train, test


def _check_paper_inputs(cfg: AgentXRayRunConfig, bench) -> tuple[list[str], list[str]]:
    """The sets and arms to run; refuses unknown sets, no paper arm, or a missing API key before
    any download or search (bad-input rule; a local server needs no key)."""
    unknown = [s for s in cfg.sets if s not in bench.sets]
    if unknown:
        raise ValueError(
            f"method.sets {unknown} are not sets of benchmark={bench.name}: {sorted(bench.sets)}"
        )
    arms = [a for a in PAPER_ARMS if a in cfg.arms]
    if not arms:
        raise ValueError(f"stage=paper runs arms from {PAPER_ARMS}; got {cfg.arms}")
    if cfg.base_url is None and not os.environ.get(cfg.llm_api_key_env):
        raise ValueError(
            f"stage=paper against the hosted API needs {cfg.llm_api_key_env} set "
            "(or set method.base_url to a local OpenAI-compatible server)"
        )
    return list(cfg.sets) or list(bench.sets), arms


def _run_paper(cfg: AgentXRayRunConfig, bench) -> tuple[dict[str, dict[str, float]], dict]:
    """paper setting: every set × arm × seed; rows ``<set>/<arm>`` (mean over seeds, CI)."""
    names, arms = _check_paper_inputs(cfg, bench)
    metrics: dict[str, dict[str, float]] = {}
    workflows: dict[str, str] = {}
    for name in names:
        train, test = _set_pairs(cfg, name, bench.sets[name])
        sim_name = cfg.similarity_by_set.get(name, cfg.similarity)
        logger.info("%s: %d train / %d test pairs, %s", name, len(train), len(test), sim_name)
        for arm in arms:
            rows = []
            for seed in cfg.seeds:
                folder = None
                if cfg.checkpoint_dir:
                    folder = str(Path(cfg.checkpoint_dir) / "paper" / name / f"{arm}_seed{seed}")
                rows.append(_paper_search(arm, seed, cfg, train, test, sim_name, folder))
            workflows[f"{name}/{arm}"] = rows[0].pop("_workflow")
            for r in rows[1:]:
                r.pop("_workflow")
            agg = summarize_seeds(rows)
            agg["n_train"], agg["n_test"] = float(len(train)), float(len(test))
            metrics[f"{name}/{arm}"] = agg
        base = metrics.get(f"{name}/no_coloring")
        if base and f"{name}/red_black" in metrics and base["tokens"] > 0:
            rb = metrics[f"{name}/red_black"]
            rb["token_change_vs_no_coloring"] = rb["tokens"] / base["tokens"] - 1.0
    return metrics, {
        "workflows": workflows,
        "benchmark": bench.name,
        "sets": names,
        "similarity": {n: cfg.similarity_by_set.get(n, cfg.similarity) for n in names},
    }


def run_paper(run: Run) -> dict[str, float]:
    """``stage=paper``: the benchmark's sets × arms × seeds against an OpenAI-compatible model."""
    if run.benchmark is None:
        raise ValueError("stage=paper needs a benchmark group: benchmark=agentxray")
    t0 = time.perf_counter()
    metrics, extra = _run_paper(run.method, run.benchmark)
    extra["wall_seconds"] = time.perf_counter() - t0
    return write_results(run.run_dir, "agentxray", metrics, cfg=run.cfg, extra=extra)
