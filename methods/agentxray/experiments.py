"""The stages of ``icml26 experiment=agentxray_toy`` and ``agentxray_paper``.

Toy (our CPU toy, "XRayBench-lite"): a hidden length-5 chain of deterministic code-transforming agents
is the black box (clean, and with 10% identifier noise on its outputs). Four arms at the same
iteration budgets and seeds: ``red_black`` (AgentXRay), ``no_coloring`` (unpruned MCTS),
``pure_random`` (random tree policy) and ``direct_random`` (random chains of length 1–L_max with
the red-black arm's number of primitive executions). Reported: test SFE, extracted length, tree
depth, simulated tokens (agent + generator) and exact recovery of the hidden chain.

Paper: every set of the benchmark group (``configs/benchmark/agentxray.yaml``: the AgentXRay
subsets by hub id ``shiowen/AgentXRay-Datasets`` or a local folder) × arm (red_black, no_coloring,
pure_random) × seed, with an OpenAI-compatible model for the profile generator and every agent;
token counts from the API's usage field, generator tokens reported apart from agent tokens.
"""

from __future__ import annotations

import logging
import math
import os
import random
import statistics
import time
from pathlib import Path

from common.config import Run
from common.tracking import progress, save_plot, write_results

from .config import PAPER_ARMS, AgentXRayRunConfig, MCTSConfig
from .executor import WorkflowExecutor, compiler_tool, empty_detect, syntax_check
from .mcts import AgentXRaySearch, extract_workflow
from .primitives import (
    CostMeter,
    LLMProfileGenerator,
    Primitive,
    PrimitiveSpace,
    StaticProfileGenerator,
    count_tokens,
    generator_prompt,
    render_profile,
)
from .similarity import sfe, tfidf_cosine
from .toy import (
    ALL_AGENTS,
    TOY_TOOLS,
    ToyChat,
    add_token_noise,
    make_tasks,
    toy_agent_pool,
)

logger = logging.getLogger(__name__)

ARMS = ("red_black", "no_coloring", "pure_random", "direct_random")
SIMILARITIES = {"sfe": sfe, "tfidf": tfidf_cosine}


def _ci95(xs: list[float]) -> float:
    return 1.96 * statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0


def _toy_search(
    arm: str,
    cfg: AgentXRayRunConfig,
    iters: int,
    seed: int,
    train: list[tuple[str, str]],
    budget: int | None,
) -> tuple[list[Primitive], dict]:
    """One search (or random-chain baseline) on the toy; returns workflow and stats."""
    meter = CostMeter()
    ex = WorkflowExecutor(ToyChat(), TOY_TOOLS, meter)
    sim = SIMILARITIES[cfg.similarity]
    if arm == "direct_random":
        rng = random.Random(seed)
        omega = toy_agent_pool(cfg.n_distractors) + [Primitive("tool", t) for t in TOY_TOOLS]
        budget = budget or iters * cfg.search.max_depth
        best, best_r, used, i = [], -1.0, 0, 0
        # "executions": as many primitive executions as red_black used; "iterations": one random
        # chain per search iteration (N chains), the cheaper reading of "same budget"
        while (used < budget) if cfg.random_budget == "executions" else (i < iters):
            wf = [rng.choice(omega) for _ in range(rng.randint(1, cfg.search.max_depth))]
            task, target = train[i % len(train)]
            sibs: list[Primitive] = []
            for p in wf:  # each agent of a random chain stands for one generated profile
                if p.kind != "agent":
                    continue
                if cfg.tokens_per_profile is not None:
                    meter.charge("generator", cfg.tokens_per_profile)
                else:
                    pt = count_tokens(generator_prompt(task, sibs))
                    ct = count_tokens(render_profile(p))
                    meter.charge("generator", pt + ct, ct, source="tokenizer")
                sibs.append(p)
            out = ex.final_output(ex.run(wf, task))
            r = sim(out, target) if out else 0.0
            used, i = used + len(wf), i + 1
            if r > best_r:
                best, best_r = wf, r
        while best and best[0].kind == "tool":
            best = best[1:]
        return best, {"depth": float(len(best)), "executions": float(used), **meter.snapshot()}
    scfg = MCTSConfig(
        **{
            **cfg.search.__dict__,
            "iterations": iters,
            "seed": seed,
            "coloring": arm == "red_black" and cfg.search.coloring,
            "pure_random": arm == "pure_random",
        }
    )
    gen = StaticProfileGenerator(
        toy_agent_pool(cfg.n_distractors),
        seed=seed,
        tokens_per_profile=cfg.tokens_per_profile,
        meter=meter,
    )
    res = AgentXRaySearch(PrimitiveSpace(list(TOY_TOOLS), gen), ex, sim, scfg).run(train)
    return res.best_workflow, {
        "depth": float(res.depth),
        "executions": float(res.executions),
        **res.tokens,
    }


def _run_toy(cfg: AgentXRayRunConfig, run_dir: str) -> tuple[dict[str, dict[str, float]], dict]:
    black_box = WorkflowExecutor(ToyChat(), TOY_TOOLS, CostMeter())
    hidden = [Primitive("agent", n) for n in cfg.hidden_chain]
    train_tasks = make_tasks(cfg.n_train, cfg.data_seed)
    test_tasks = make_tasks(cfg.n_test, cfg.data_seed + 1)
    sim = SIMILARITIES[cfg.similarity]
    metrics: dict[str, dict[str, float]] = {}
    examples: dict[str, str] = {}
    arms = [a for a in ARMS if a in cfg.arms]  # red_black first: direct_random matches its budget
    for noise in cfg.noise:

        def target(t: str, k: int, noise: float = noise) -> str:
            out = black_box.run(hidden, t)
            return add_token_noise(out, noise, k) if noise > 0 else out

        train = [(t, target(t, k)) for k, t in enumerate(train_tasks)]
        test = [(t, target(t, 1000 + k)) for k, t in enumerate(test_tasks)]
        for iters in cfg.iterations:
            budgets: dict[int, int] = {}
            for arm in arms:
                rows = []
                for seed in progress(cfg.seeds, desc=f"agentxray {arm} it={iters}", unit="seed"):
                    t0 = time.perf_counter()
                    wf, st = _toy_search(arm, cfg, iters, seed, train, budgets.get(seed))
                    if arm == "red_black":
                        budgets[seed] = int(st["executions"])
                    ex = WorkflowExecutor(ToyChat(), TOY_TOOLS, CostMeter())
                    scores = [
                        sim(ex.final_output(ex.run(wf, t)), o) if wf else 0.0 for t, o in test
                    ]
                    names = [p.name for p in wf if p.kind == "agent"]
                    rows.append(
                        {
                            "test_sfe": statistics.mean(scores),
                            "length": float(len(wf)),
                            "depth": st["depth"],
                            "tokens": float(st["tokens/total"]),
                            "tokens_generator": float(st["tokens/generator"]),
                            "tokens_agent": float(st["tokens/agent"]),
                            "exact_recovery": float(names == list(cfg.hidden_chain)),
                            "seconds": time.perf_counter() - t0,
                        }
                    )
                    if seed == cfg.seeds[0]:
                        examples[f"{arm}_n{iters}"] = extract_workflow(wf)
                key = f"{arm}_n{iters}" + (f"_noise{noise:g}" if noise > 0 else "")
                agg = {k: statistics.mean(r[k] for r in rows) for k in rows[0]}
                agg["test_sfe_ci95"] = _ci95([r["test_sfe"] for r in rows])
                agg["tokens_ci95"] = _ci95([r["tokens"] for r in rows])
                metrics[key] = agg
                logger.info(
                    "%s: test SFE %.3f, length %.1f, tokens %.0f",
                    key,
                    agg["test_sfe"],
                    agg["length"],
                    agg["tokens"],
                )
    _plot(metrics, run_dir)
    return metrics, {"example_workflows": examples, "hidden_chain": list(cfg.hidden_chain)}


def _plot(metrics: dict[str, dict[str, float]], run_dir: str) -> None:
    """Test SFE against simulated tokens, one point per (arm, N) on the clean black box."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for arm in ARMS:
        pts = [
            (v["tokens"], v["test_sfe"], k)
            for k, v in metrics.items()
            if k.startswith(arm + "_n") and "noise" not in k
        ]
        if pts:
            ax.plot([p[0] / 1e3 for p in pts], [p[1] for p in pts], "o-", label=arm)
            for x, y, k in pts:
                ax.annotate(k.rsplit("_", 1)[-1], (x / 1e3, y), fontsize=7)
    ax.set_xlabel("simulated tokens during search (thousands)")
    ax.set_ylabel("test SFE vs black box")
    ax.set_title("XRayBench-lite: similarity vs cost (mean over seeds)")
    ax.legend(fontsize=8)
    save_plot(fig, Path(run_dir) / "agentxray_toy.png")


def _paper_search(
    arm: str,
    seed: int,
    cfg: AgentXRayRunConfig,
    train: list[tuple[str, str]],
    test: list[tuple[str, str]],
    sim_name: str,
) -> dict:
    """One search + test evaluation on real data with an OpenAI-compatible model."""
    from .primitives import UsageOpenAIChat

    meter = CostMeter()
    llm = UsageOpenAIChat(
        cfg.llm_model,
        base_url=cfg.base_url,
        api_key_env=cfg.llm_api_key_env,
        temperature=1.0,  # repo
        max_tokens=8192,  # repo (env MAX_TOKENS)
        seed=seed,
    )
    tool_impl = {
        "compiler": lambda: compiler_tool(cfg.compiler_timeout, isolation=cfg.compiler_isolation),
        "syntax_error_checker": lambda: syntax_check,
        "empty_detect": lambda: empty_detect,
    }
    ex = WorkflowExecutor(llm, {t: tool_impl[t]() for t in cfg.tools}, meter)
    gen = LLMProfileGenerator(llm, cfg.model_menu, default_model=cfg.default_model, meter=meter)
    scfg = MCTSConfig(
        **{
            **cfg.search.__dict__,
            "seed": seed,
            "coloring": arm == "red_black" and cfg.search.coloring,
            "pure_random": arm == "pure_random",
        }
    )
    sim = SIMILARITIES[sim_name]
    t0 = time.perf_counter()
    res = AgentXRaySearch(PrimitiveSpace(cfg.tools, gen, cfg.model_menu), ex, sim, scfg).run(train)
    search_tokens = dict(res.tokens)
    test_meter = CostMeter()  # evaluation calls are counted apart from the search budget
    tex = WorkflowExecutor(llm, ex.tools, test_meter)
    scores = [sim(tex.final_output(tex.run(res.best_workflow, t)), o) for t, o in test]
    return {
        "test_sfe": statistics.mean(scores) if scores else 0.0,
        "length": float(len(res.best_workflow)),
        "depth": float(res.depth),
        "tokens": float(search_tokens["tokens/total"]),
        "tokens_generator": float(search_tokens["tokens/generator"]),
        "tokens_agent": float(search_tokens["tokens/agent"]),
        "completion_tokens": float(
            search_tokens["completion_tokens/generator"] + search_tokens["completion_tokens/agent"]
        ),
        "calls_generator": float(search_tokens["calls/generator"]),
        "calls_agent": float(search_tokens["calls/agent"]),
        "tokens_from_api_usage": float(
            search_tokens["counted_by/api"]
            / max(1, search_tokens["counted_by/api"] + search_tokens["counted_by/tokenizer"])
        ),
        "test_tokens": float(test_meter.total),
        "generator_parse_failures": float(gen.parse_failures),
        "seconds": time.perf_counter() - t0,
        "_workflow": extract_workflow(res),
    }


def _set_pairs(
    cfg: AgentXRayRunConfig, name: str, spec
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
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


def _run_paper(cfg: AgentXRayRunConfig, bench) -> tuple[dict[str, dict[str, float]], dict]:
    """paper setting: every set × arm × seed; rows ``<set>/<arm>`` (mean over seeds, CI)."""
    unknown = [s for s in cfg.sets if s not in bench.sets]
    if unknown:
        raise ValueError(
            f"method.sets {unknown} are not sets of benchmark={bench.name}: {sorted(bench.sets)}"
        )
    names = list(cfg.sets) or list(bench.sets)
    arms = [a for a in PAPER_ARMS if a in cfg.arms]
    if not arms:
        raise ValueError(f"stage=paper runs arms from {PAPER_ARMS}; got {cfg.arms}")
    if cfg.base_url is None and not os.environ.get(cfg.llm_api_key_env):
        # fail before any download or search (bad-input rule); a local server needs no key
        raise ValueError(
            f"stage=paper against the hosted API needs {cfg.llm_api_key_env} set "
            "(or set method.base_url to a local OpenAI-compatible server)"
        )
    metrics: dict[str, dict[str, float]] = {}
    workflows: dict[str, str] = {}
    for name in names:
        train, test = _set_pairs(cfg, name, bench.sets[name])
        sim_name = cfg.similarity_by_set.get(name, cfg.similarity)
        logger.info("%s: %d train / %d test pairs, %s", name, len(train), len(test), sim_name)
        for arm in arms:
            rows = [_paper_search(arm, seed, cfg, train, test, sim_name) for seed in cfg.seeds]
            workflows[f"{name}/{arm}"] = rows[0].pop("_workflow")
            for r in rows[1:]:
                r.pop("_workflow")
            agg = {k: statistics.mean(r[k] for r in rows) for k in rows[0]}
            agg["test_sfe_ci95"] = _ci95([r["test_sfe"] for r in rows])
            agg["tokens_ci95"] = _ci95([r["tokens"] for r in rows])
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


def run_toy(run: Run) -> dict[str, float]:
    """``stage=toy``: every arm × N × noise × seed on XRayBench-lite."""
    rc: AgentXRayRunConfig = run.method
    unknown = [n for n in rc.hidden_chain if n not in ALL_AGENTS]
    if unknown:
        raise ValueError(
            f"method.hidden_chain must name toy agents, unknown: {unknown}; "
            f"known: {sorted(ALL_AGENTS)}"
        )
    t0 = time.perf_counter()
    metrics, extra = _run_toy(rc, str(run.run_dir))
    extra["wall_seconds"] = time.perf_counter() - t0
    return write_results(run.run_dir, "agentxray", metrics, cfg=run.cfg, extra=extra)


def run_paper(run: Run) -> dict[str, float]:
    """``stage=paper``: the benchmark's sets × arms × seeds against an OpenAI-compatible model."""
    if run.benchmark is None:
        raise ValueError("stage=paper needs a benchmark group: benchmark=agentxray")
    t0 = time.perf_counter()
    metrics, extra = _run_paper(run.method, run.benchmark)
    extra["wall_seconds"] = time.perf_counter() - t0
    return write_results(run.run_dir, "agentxray", metrics, cfg=run.cfg, extra=extra)
