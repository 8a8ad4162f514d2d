"""AgentXRay experiments for the CLI: ``icml26 experiment=agentxray_toy`` and ``agentxray_paper``.

Toy (spec §6, "XRayBench-lite"): a hidden length-5 chain of deterministic code-transforming agents
is the black box (clean, and with 10% identifier noise on its outputs). Four arms at the same
iteration budgets and seeds: ``red_black`` (AgentXRay), ``no_coloring`` (unpruned MCTS),
``pure_random`` (random tree policy) and ``direct_random`` (random chains of length 1–L_max with
the red-black arm's number of primitive executions). Reported: test SFE, extracted length, tree
depth, simulated tokens (agent + generator) and exact recovery of the hidden chain.

Paper (``task=paper``): the AgentXRay datasets, loaded by hub id (``shiowen/AgentXRay-Datasets``)
or from a local copy, with an OpenAI-compatible model for both the profile generator and the agents
(spec §7); every dataset × arm (red_black, no_coloring, pure_random) × seed, token counts from the
API's usage field, generator tokens reported apart from agent tokens.
"""

from __future__ import annotations

import logging
import math
import os
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from common.tracking import save_plot, write_results

from .executor import WorkflowExecutor, compiler_tool, empty_detect, syntax_check
from .mcts import AgentXRaySearch, MCTSConfig, extract_workflow
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
    HIDDEN_CHAIN,
    TOY_TOOLS,
    ToyChat,
    add_token_noise,
    make_tasks,
    toy_agent_pool,
)

logger = logging.getLogger(__name__)

DEMO_OVERRIDES: list[str] = [
    "method.arms=[red_black,no_coloring]",
    "method.iterations=[20]",
    "method.seeds=[0]",
    "method.noise=[0.0]",
    "method.n_test=4",
]
HEADLINE: tuple[str, str] = ("red_black_n20/test_sfe", "no_coloring_n20/test_sfe")

ARMS = ("red_black", "no_coloring", "pure_random", "direct_random")
SIMILARITIES = {"sfe": sfe, "tfidf": tfidf_cosine}


@dataclass
class AgentXRayRunConfig:
    """``cfg.method``: search settings, toy sizes and the paper path's data/LLM settings."""

    name: str = "agentxray"
    task: str = "toy"  # toy | paper
    search: MCTSConfig = field(default_factory=MCTSConfig)
    similarity: str = "sfe"  # sfe | tfidf (text domains, spec §9.1)
    arms: list[str] = field(default_factory=lambda: list(ARMS))
    iterations: list[int] = field(default_factory=lambda: [20, 60])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    noise: list[float] = field(default_factory=lambda: [0.0, 0.1])
    n_train: int = 8
    n_test: int = 8
    data_seed: int = 0
    hidden_chain: list[str] = field(default_factory=lambda: list(HIDDEN_CHAIN))
    n_distractors: int = 0  # near-miss agents added to Ω (0–12), spec §6 "more primitives"
    random_budget: str = "executions"  # direct_random: executions (red_black's) | iterations
    tokens_per_profile: int | None = None  # None: tokenizer count of the generator call; int: fixed
    # paper path
    dataset: str = "metagpt"
    datasets: list[str] = field(default_factory=list)  # paper: several subsets; [] = [dataset]
    data_root: str | None = None  # local folder, or a hub id; None = shiowen/AgentXRay-Datasets
    hub_revision: str | None = None
    hub_cache_dir: str | None = None
    train_samples: int | None = None
    test_samples: int | None = None
    llm_api_key_env: str = "OPENAI_API_KEY"
    llm_model: str = "gpt-4o-mini"
    base_url: str | None = None
    model_menu: list[str] = field(default_factory=lambda: ["gpt-4o-mini", "gpt-3.5-turbo"])
    default_model: str = "gpt-4o-mini"
    tools: list[str] = field(
        default_factory=lambda: ["compiler", "syntax_error_checker", "empty_detect"]
    )
    compiler_timeout: float = 30.0

    def __post_init__(self) -> None:
        if self.task not in ("toy", "paper"):
            raise ValueError(f"task must be 'toy' or 'paper', got {self.task!r}")
        bad = [a for a in self.arms if a not in ARMS]
        if bad:
            raise ValueError(f"arms must be drawn from {ARMS}, got {bad}")
        if self.similarity not in SIMILARITIES:
            raise ValueError(
                f"similarity must be one of {sorted(SIMILARITIES)}, got {self.similarity!r}"
            )
        if any(n < 0 for n in self.iterations):
            raise ValueError(f"iterations must be >= 0, got {self.iterations}")
        if self.random_budget not in ("executions", "iterations"):
            raise ValueError(
                f"random_budget must be 'executions' or 'iterations', got {self.random_budget!r}"
            )
        unknown = [n for n in self.hidden_chain if n not in ALL_AGENTS]
        if not self.hidden_chain or unknown:
            raise ValueError(f"hidden_chain must name toy agents, unknown: {unknown}")
        if any(not 0.0 <= r < 1.0 for r in self.noise):
            raise ValueError(f"noise rates must be in [0, 1), got {self.noise}")


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
                for seed in cfg.seeds:
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


PAPER_ARMS = ("red_black", "no_coloring", "pure_random")


def _paper_search(
    arm: str,
    seed: int,
    cfg: AgentXRayRunConfig,
    train: list[tuple[str, str]],
    test: list[tuple[str, str]],
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
        "compiler": compiler_tool(cfg.compiler_timeout),
        "syntax_error_checker": syntax_check,
        "empty_detect": empty_detect,
    }
    ex = WorkflowExecutor(llm, {t: tool_impl[t] for t in cfg.tools}, meter)
    gen = LLMProfileGenerator(llm, cfg.model_menu, default_model=cfg.default_model, meter=meter)
    scfg = MCTSConfig(
        **{
            **cfg.search.__dict__,
            "seed": seed,
            "coloring": arm == "red_black" and cfg.search.coloring,
            "pure_random": arm == "pure_random",
        }
    )
    sim = SIMILARITIES[cfg.similarity]
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


def _run_paper(cfg: AgentXRayRunConfig, run_dir: str) -> tuple[dict[str, dict[str, float]], dict]:
    """Spec §7: every dataset × arm × seed; rows ``<dataset>/<arm>`` (mean over seeds, CI)."""
    from .data import load_split, resolve_data_root

    names = list(cfg.datasets) or [cfg.dataset]
    arms = [a for a in PAPER_ARMS if a in cfg.arms]
    if not arms:
        raise ValueError(f"task=paper runs arms from {PAPER_ARMS}; got {cfg.arms}")
    if cfg.base_url is None and not os.environ.get(cfg.llm_api_key_env):
        # fail before any download or search (spec §8); a local server needs no key
        raise ValueError(
            f"task=paper against the hosted API needs {cfg.llm_api_key_env} set "
            "(or set method.base_url to a local OpenAI-compatible server)"
        )
    unknown = [
        t for t in cfg.tools if t not in ("compiler", "syntax_error_checker", "empty_detect")
    ]
    if unknown:
        raise ValueError(
            f"tools {unknown} not implemented; choose from compiler, syntax_error_checker, "
            "empty_detect"
        )
    root = resolve_data_root(
        cfg.data_root, names, revision=cfg.hub_revision, cache_dir=cfg.hub_cache_dir
    )
    metrics: dict[str, dict[str, float]] = {}
    workflows: dict[str, str] = {}
    for name in names:
        train = load_split(root, name, "train")[: cfg.train_samples or None]
        test = load_split(root, name, "test")[: cfg.test_samples or None]
        logger.info("%s: %d train / %d test pairs", name, len(train), len(test))
        for arm in arms:
            rows = [_paper_search(arm, seed, cfg, train, test) for seed in cfg.seeds]
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
    return metrics, {"workflows": workflows, "data_root": root, "datasets": names}


def run(cfg: DictConfig) -> dict[str, float]:
    """Entry point for ``icml26 experiment=agentxray_toy`` (or ``agentxray_paper``)."""
    schema = OmegaConf.structured(AgentXRayRunConfig)
    rc: AgentXRayRunConfig = OmegaConf.to_object(OmegaConf.merge(schema, cfg.method))
    run_dir = str(cfg.run_dir)
    t0 = time.perf_counter()
    metrics, extra = (_run_toy if rc.task == "toy" else _run_paper)(rc, run_dir)
    extra["wall_seconds"] = time.perf_counter() - t0
    return write_results(run_dir, "agentxray", metrics, cfg=cfg, extra=extra)
