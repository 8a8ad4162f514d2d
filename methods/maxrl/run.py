"""CLI entry for MaxRL: toy T1 ("ImageNet in miniature", spec §6) and optional toy T2 (maze, TRL).

``icml26 experiment=maxrl_toy`` trains a linear softmax policy from binary self-sampled rewards with
cross-entropy (exact ML), REINFORCE, GRPO and MaxRL at several rollout counts N, one shared
learning rate, and writes a pass@1 / pass@128 table and the pass@1 curves (PNG).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from common.tracking import progress, save_plot, write_results

from .classification import (
    METHODS,
    ClassificationToyConfig,
    make_gaussian_classes,
    train_classifier,
)
from .maze import MazeToyConfig, run_maze_toy
from .paper import PaperConfig

logger = logging.getLogger(__name__)

DEMO_OVERRIDES: list[str] = [
    "method.n_rollouts=[16,64]",
    "method.t1.num_classes=100",
    "method.t1.n_train=5000",
    "method.t1.n_val=1000",
    "method.t1.steps=120",
    "method.t1.eval_every=40",
]
HEADLINE: tuple[str, str] = ("maxrl/pass@1", "grpo/pass@1")


@dataclass
class MaxRLRunConfig:
    """Hydra ``method`` group for MaxRL (``configs/method/maxrl.yaml``).

    The trainer fields mirror :class:`methods.maxrl.MaxRLConfig` (used by the paper-scale script);
    ``toy``, ``methods``, ``n_rollouts`` and ``t1`` drive the CPU toy.
    """

    name: str = "maxrl"
    advantage_estimator: str = "maxrl"
    adv_eps: float = 1e-6  # App. F
    num_generations: int = 16  # §6.4, Table 6 (Qwen3)
    loss_type: str = "dapo"  # global token mean ~ verl token-mean
    toy: str = "classification"
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    n_rollouts: list[int] = field(default_factory=lambda: [16, 128, 1024])
    t1: ClassificationToyConfig = field(default_factory=ClassificationToyConfig)
    t2: MazeToyConfig = field(default_factory=MazeToyConfig)
    paper: PaperConfig = field(default_factory=PaperConfig)  # GPU scale, see paper.py


def _to_config(method_cfg: DictConfig) -> MaxRLRunConfig:
    schema = OmegaConf.structured(MaxRLRunConfig)
    merged = OmegaConf.merge(schema, method_cfg)  # unknown keys raise
    cfg = OmegaConf.to_object(merged)
    bad = [m for m in cfg.methods if m not in METHODS]
    if bad:
        raise ValueError(f"method.methods has unknown names {bad}; valid: {list(METHODS)}")
    if cfg.toy not in ("classification", "maze"):
        raise ValueError(f"method.toy must be 'classification' or 'maze', got {cfg.toy!r}")
    return cfg


def _plot(curves: dict[str, list[tuple[int, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


def run(cfg: DictConfig) -> dict[str, float]:
    """Run toy T1 and write ``results.json``, ``results.md`` and ``t1_curves.png`` into ``cfg.run_dir``."""
    mcfg = _to_config(cfg.method)
    seed = int(cfg.seed)
    run_dir = Path(cfg.run_dir)
    start = time.perf_counter()
    if mcfg.toy == "maze":
        return _run_maze(mcfg, cfg, seed, run_dir, start)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: threading only adds overhead
    try:
        data = make_gaussian_classes(mcfg.t1, seed=seed)
        jobs = [("ce", 1)] if "ce" in mcfg.methods else []
        jobs += [(m, n) for m in mcfg.methods if m != "ce" for n in mcfg.n_rollouts]
        metrics, curves = {}, {}
        for method, n in progress(jobs, desc="maxrl toy T1", unit="run"):
            arm = "ce" if method == "ce" else f"{method}_N{n}"
            out = train_classifier(method, n, mcfg.t1, data, seed=seed)
            metrics[arm] = {**out["final"], "grad_norm_vs_p_corr": out["grad_corr"]}
            curves[arm] = out["curve"]
        n_max = max(mcfg.n_rollouts)
        for method in mcfg.methods:  # headline arms: each sampled method at the largest N
            if method != "ce":
                metrics[method] = dict(metrics[f"{method}_N{n_max}"])
    finally:
        torch.set_num_threads(threads)
    _plot(curves, run_dir / "t1_curves.png")
    notes = (
        f"Toy T1: {mcfg.t1.num_classes} classes, linear policy from zero (pass@1 starts at "
        f"1/{mcfg.t1.num_classes}), {mcfg.t1.steps} SGD steps at lr {mcfg.t1.lr} for every method. "
        f"Arms without _N are the sampled methods at the largest N={n_max}. "
        "grad_norm_vs_p_corr: Pearson correlation of per-example gradient norm and pass rate at "
        f"step {mcfg.t1.grad_corr_step}. Curves: t1_curves.png."
    )
    return write_results(
        run_dir,
        "maxrl",
        metrics,
        cfg=cfg,
        extra={"curves": curves},
        wall_time_s=time.perf_counter() - start,
        notes=notes,
    )


def _run_maze(mcfg: MaxRLRunConfig, cfg: DictConfig, seed: int, run_dir: Path, start: float):
    """Toy T2: SFT warm start, then GRPO vs MaxRL through MaxRLTrainer (TRL) on 7x7 mazes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        metrics = run_maze_toy(mcfg.t2, ("grpo", "maxrl"), seed=seed, output_dir=str(run_dir))
    finally:
        torch.set_num_threads(threads)
    t2 = mcfg.t2
    notes = (
        f"Toy T2: {t2.size}x{t2.size} Prim mazes, tiny Qwen2 (hidden {t2.hidden_size}); SFT on BFS "
        f"paths until held-out pass@1 >= {t2.sft_band[0]}, then {t2.rl_steps} RL steps of "
        f"{t2.rl_prompts} prompts x N={t2.num_generations} (lr {t2.rl_lr}) with MaxRLTrainer. "
        f"Eval: {t2.eval_mazes} held-out mazes, {t2.eval_samples} samples each, T=1."
    )
    return write_results(
        run_dir, "maxrl", metrics, cfg=cfg, wall_time_s=time.perf_counter() - start, notes=notes
    )
