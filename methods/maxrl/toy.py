"""MaxRL's toy stages: T1 ("ImageNet in miniature", paper §6.1, App. D) and T2 (mazes, §6.2, App. E.1).

``stage=toy`` trains a linear softmax policy from binary self-sampled rewards with cross-entropy
(exact maximum likelihood), REINFORCE, GRPO and MaxRL at several rollout counts N with one shared
learning rate, and writes a pass@1 / pass@128 table and the pass@1 curves (PNG). ``stage=maze``
warm-starts a tiny Qwen2 by SFT on shortest paths, then trains GRPO and MaxRL through
:class:`methods.maxrl.trainer.MaxRLTrainer`.
"""

from __future__ import annotations

import time
from pathlib import Path

from common.config import Run
from common.threads import torch_threads
from common.tracking import progress, pyplot, save_plot, write_results

from .classification import make_gaussian_classes, train_classifier
from .maze import run_maze_toy


def _plot(curves: dict[str, list[tuple[int, float]]], path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm, curve in curves.items():
        steps, vals = zip(*curve)
        style = "-" if arm.startswith(("maxrl", "ce")) else "--"
        ax.plot(steps, vals, style, label=arm)
    ax.set_xlabel("SGD step")
    ax.set_ylabel("val pass@1 (exact)")
    ax.set_title("MaxRL toy T1: linear policy, binary self-sampled reward")
    ax.legend(fontsize=7, ncol=2)
    save_plot(fig, path)


def run_toy(run: Run) -> dict[str, float]:
    """Toy T1; writes ``results.json``, ``results.md`` and ``t1_curves.png`` into the run folder."""
    mcfg, start = run.method, time.perf_counter()
    with torch_threads(1):  # tiny matmuls: threading only adds overhead
        data = make_gaussian_classes(mcfg.t1, seed=run.seed)
        jobs = [("ce", 1)] if "ce" in mcfg.methods else []
        jobs += [(m, n) for m in mcfg.methods if m != "ce" for n in mcfg.n_rollouts]
        metrics, curves = {}, {}
        for method, n in progress(jobs, desc="maxrl toy T1", unit="run"):
            arm = "ce" if method == "ce" else f"{method}_N{n}"
            out = train_classifier(method, n, mcfg.t1, data, seed=run.seed)
            metrics[arm] = {**out["final"], "grad_norm_vs_p_corr": out["grad_corr"]}
            curves[arm] = out["curve"]
        n_max = max(mcfg.n_rollouts)
        for method in mcfg.methods:  # headline arms: each sampled method at the largest N
            if method != "ce":
                metrics[method] = dict(metrics[f"{method}_N{n_max}"])
    _plot(curves, run.run_dir / "t1_curves.png")
    notes = (
        f"Toy T1: {mcfg.t1.num_classes} classes, linear policy from zero (pass@1 starts at "
        f"1/{mcfg.t1.num_classes}), {mcfg.t1.steps} SGD steps at lr {mcfg.t1.lr} for every method. "
        f"Arms without _N are the sampled methods at the largest N={n_max}. "
        "grad_norm_vs_p_corr: Pearson correlation of per-example gradient norm and pass rate at "
        f"step {mcfg.t1.grad_corr_step}. Curves: t1_curves.png."
    )
    return write_results(
        run.run_dir,
        "maxrl",
        metrics,
        cfg=run.cfg,
        extra={"curves": curves},
        wall_time_s=time.perf_counter() - start,
        notes=notes,
    )


def run_maze(run: Run) -> dict[str, float]:
    """Toy T2: SFT warm start, then GRPO vs MaxRL through MaxRLTrainer (TRL) on mazes."""
    t2, start = run.method.t2, time.perf_counter()
    with torch_threads(1):
        metrics = run_maze_toy(t2, ("grpo", "maxrl"), seed=run.seed, output_dir=str(run.run_dir))
    notes = (
        f"Toy T2: {t2.size}x{t2.size} Prim mazes, tiny Qwen2 (hidden {t2.hidden_size}); SFT on BFS "
        f"paths until held-out pass@1 >= {t2.sft_band[0]}, then {t2.rl_steps} RL steps of "
        f"{t2.rl_prompts} prompts x N={t2.num_generations} (lr {t2.rl_lr}) with MaxRLTrainer. "
        f"Eval: {t2.eval_mazes} held-out mazes, {t2.eval_samples} samples each, T=1."
    )
    return write_results(
        run.run_dir,
        "maxrl",
        metrics,
        cfg=run.cfg,
        wall_time_s=time.perf_counter() - start,
        notes=notes,
    )
