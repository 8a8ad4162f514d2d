"""The toy stage ``icml26 experiment=agentxray_toy`` (``stage=toy``; our CPU toy, "XRayBench-lite").

A hidden length-5 chain of deterministic code-transforming agents (``xraybench.py``) is the black
box, clean and with 10% identifier noise on its outputs. Four arms at the same iteration budgets
and seeds: ``red_black`` (AgentXRay), ``no_coloring`` (unpruned MCTS, the paper's ablation),
``pure_random`` (random tree policy, official code ablation) and ``direct_random`` (random chains of
length 1–L_max with the red-black arm's number of primitive executions; our baseline). Reported:
test SFE, extracted length, tree depth, tokens (agent + generator) and exact recovery of the hidden
chain. With ``method.checkpoint_dir`` every MCTS search checkpoints after each iteration and a
rerun resumes it (``resume.py``).
"""

from __future__ import annotations

import logging
import random
import statistics
import time
from pathlib import Path

from common.config import Run
from common.metrics import ci_halfwidth, mean_over_seeds
from common.threads import torch_threads
from common.tracking import progress, pyplot, save_plot, write_results

from .config import HIDDEN_CHAIN, AgentXRayRunConfig, MCTSConfig  # noqa: F401  (HIDDEN_CHAIN: bench)
from .costs import CostMeter, count_tokens
from .executor import WorkflowExecutor
from .landscape import TracingExecutor, chain_similarity
from .mcts import AgentXRaySearch, extract_workflow
from .primitives import (
    Primitive,
    PrimitiveSpace,
    StaticProfileGenerator,
    generator_prompt,
    render_profile,
)
from .similarity import SIMILARITIES, Similarity
from .xraybench import (
    ALL_AGENTS,
    TOY_TOOLS,
    ToyChat,
    add_token_noise,
    make_tasks,
    toy_agent_pool,
)

logger = logging.getLogger(__name__)

ARMS = ("red_black", "no_coloring", "pure_random", "direct_random")
Pairs = list[tuple[str, str]]


def summarize_seeds(rows: list[dict[str, float]]) -> dict[str, float]:
    """Mean of every metric over seeds, plus the 95% CI half-widths of ``test_sfe`` and ``tokens``
    (:func:`common.metrics.ci_halfwidth`, normal quantile; 0 with one seed)."""

    def ci(xs: list[float]) -> float:
        return ci_halfwidth(xs) if len(xs) > 1 else 0.0

    agg = mean_over_seeds([{"arm": r} for r in rows])["arm"]
    agg["test_sfe_ci95"] = ci([r["test_sfe"] for r in rows])
    agg["tokens_ci95"] = ci([r["tokens"] for r in rows])
    return agg


def toy_similarity(cfg: AgentXRayRunConfig) -> Similarity:
    """The toy's reward: ``cfg.similarity`` on outputs, or ``Sim_α`` on the agents a chain ran when
    ``cfg.landscape == "chain"`` (``landscape.py``, issue-43 diagnosis)."""
    if cfg.landscape == "chain":
        return chain_similarity(cfg.landscape_alpha)
    return SIMILARITIES[cfg.similarity]


def toy_executor(cfg: AgentXRayRunConfig, meter: CostMeter) -> WorkflowExecutor:
    """The toy's executor (``ToyChat`` agents, toy tools); under the ``chain`` landscape it also
    records the agents a chain ran (``TracingExecutor``)."""
    cls = TracingExecutor if cfg.landscape == "chain" else WorkflowExecutor
    return cls(ToyChat(), TOY_TOOLS, meter)


def search_config(cfg: AgentXRayRunConfig, arm: str, seed: int, **over) -> MCTSConfig:
    """``cfg.search`` for one arm: colouring on only for ``red_black``, the random tree policy for
    ``pure_random`` (official code ablation configs)."""
    return MCTSConfig(
        **{
            **cfg.search.__dict__,
            "seed": seed,
            "coloring": arm == "red_black" and cfg.search.coloring,
            "pure_random": arm == "pure_random",
            **over,
        }
    )


def _direct_random(
    cfg: AgentXRayRunConfig, iters: int, seed: int, train: Pairs, budget: int | None
) -> tuple[list[Primitive], dict]:
    """Best of random chains of length 1–L_max (our baseline): ``random_budget="executions"`` gives
    it red_black's number of primitive executions, ``"iterations"`` one chain per iteration."""
    meter = CostMeter()
    ex = toy_executor(cfg, meter)
    sim = toy_similarity(cfg)
    rng = random.Random(seed)
    omega = toy_agent_pool(cfg.n_distractors) + [Primitive("tool", t) for t in TOY_TOOLS]
    budget = budget or iters * cfg.search.max_depth
    best, best_r, used, i = [], -1.0, 0, 0
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


def _toy_search(
    arm: str,
    cfg: AgentXRayRunConfig,
    iters: int,
    seed: int,
    train: Pairs,
    budget: int | None,
    checkpoint_dir: str | None = None,
) -> tuple[list[Primitive], dict]:
    """One search (or the random-chain baseline) on the toy; returns workflow and stats.
    ``checkpoint_dir``: this search's own folder (MCTS arms only)."""
    if arm == "direct_random":
        return _direct_random(cfg, iters, seed, train, budget)
    meter = CostMeter()
    ex = toy_executor(cfg, meter)
    gen = StaticProfileGenerator(
        toy_agent_pool(cfg.n_distractors),
        seed=seed,
        tokens_per_profile=cfg.tokens_per_profile,
        meter=meter,
    )
    scfg = search_config(cfg, arm, seed, iterations=iters)
    search = AgentXRaySearch(PrimitiveSpace(list(TOY_TOOLS), gen), ex, toy_similarity(cfg), scfg)
    res = search.run(train, checkpoint_dir=checkpoint_dir)
    return res.best_workflow, {
        "depth": float(res.depth),
        "executions": float(res.executions),
        **res.tokens,
    }


def _toy_row(cfg: AgentXRayRunConfig, wf: list[Primitive], st: dict, test: Pairs) -> dict:
    """Test SFE of the extracted workflow against the black box, and the search's statistics."""
    sim = toy_similarity(cfg)
    ex = toy_executor(cfg, CostMeter())
    scores = [sim(ex.final_output(ex.run(wf, t)), o) if wf else 0.0 for t, o in test]
    names = [p.name for p in wf if p.kind == "agent"]
    return {
        "test_sfe": statistics.mean(scores),
        "length": float(len(wf)),
        "depth": st["depth"],
        "tokens": float(st["tokens/total"]),
        "tokens_generator": float(st["tokens/generator"]),
        "tokens_agent": float(st["tokens/agent"]),
        "exact_recovery": float(names == list(cfg.hidden_chain)),
    }


def toy_data(cfg: AgentXRayRunConfig, noise: float) -> tuple[Pairs, Pairs]:
    """(task, black-box output) pairs for training and test; ``noise``: identifier noise rate."""
    black_box = toy_executor(cfg, CostMeter())
    hidden = [Primitive("agent", n) for n in cfg.hidden_chain]

    def target(t: str, k: int) -> str:
        out = black_box.run(hidden, t)
        return add_token_noise(out, noise, k) if noise > 0 else out

    train_tasks = make_tasks(cfg.n_train, cfg.data_seed)
    test_tasks = make_tasks(cfg.n_test, cfg.data_seed + 1)
    train = [(t, target(t, k)) for k, t in enumerate(train_tasks)]
    return train, [(t, target(t, 1000 + k)) for k, t in enumerate(test_tasks)]


def _run_toy(cfg: AgentXRayRunConfig, run_dir: str) -> tuple[dict[str, dict[str, float]], dict]:
    """Every arm × N × noise × seed; rows ``<arm>_n<N>[_noise<r>]`` (mean over seeds, CI)."""
    metrics: dict[str, dict[str, float]] = {}
    examples: dict[str, str] = {}
    arms = [a for a in ARMS if a in cfg.arms]  # red_black first: direct_random matches its budget
    for noise in cfg.noise:
        train, test = toy_data(cfg, noise)
        for iters in cfg.iterations:
            budgets: dict[int, int] = {}
            for arm in arms:
                rows = []
                for seed in progress(cfg.seeds, desc=f"agentxray {arm} it={iters}", unit="seed"):
                    t0 = time.perf_counter()
                    folder = None
                    if cfg.checkpoint_dir and arm != "direct_random":
                        name = f"noise{noise:g}/{arm}_n{iters}_seed{seed}"
                        folder = str(Path(cfg.checkpoint_dir) / "toy" / name)
                    wf, st = _toy_search(arm, cfg, iters, seed, train, budgets.get(seed), folder)
                    if arm == "red_black":
                        budgets[seed] = int(st["executions"])
                    row = _toy_row(cfg, wf, st, test)
                    rows.append({**row, "seconds": time.perf_counter() - t0})
                    if seed == cfg.seeds[0]:
                        examples[f"{arm}_n{iters}"] = extract_workflow(wf)
                key = f"{arm}_n{iters}" + (f"_noise{noise:g}" if noise > 0 else "")
                metrics[key] = agg = summarize_seeds(rows)
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
    plt = pyplot()

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


@torch_threads(1)  # tiny matmuls: extra OpenMP threads only spin on a busy machine
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
