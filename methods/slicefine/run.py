"""SliceFine's toy for the CLI: ``icml26 experiment=slicefine_toy``."""

from __future__ import annotations

import logging
import statistics
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from common.tracking import save_plot, write_results
from methods.slicefine.toy import ToyConfig, load_minilm, make_data, run_diagnostics, train_arm

logger = logging.getLogger(__name__)

DEMO_OVERRIDES = [
    "method.arms=[head,lora,slicefine]",
    "method.steps=30",
    "method.seeds=[0]",
    "method.encoder_layers=2",
    "method.n_train=400",
    "method.n_test=200",
    "method.diagnostics=false",
]
HEADLINE = ("slicefine/accuracy", "lora/accuracy")


def run(cfg: DictConfig) -> dict[str, float]:
    fields = OmegaConf.to_container(cfg.method, resolve=True)
    fields.pop("name", None)
    task = fields.pop("task", "toy")
    glue_fields = fields.pop("glue", None) or {}
    vision_fields = fields.pop("vision", None) or {}
    if task == "glue":
        return _run_paper(cfg, task, glue_fields)
    if task == "vision":
        return _run_paper(cfg, task, vision_fields)
    if task != "toy":
        raise ValueError(f"method.task must be 'toy', 'glue' or 'vision', got {task!r}")
    tc = ToyConfig(**fields)  # unknown keys raise TypeError
    t0 = time.time()
    encoder, tok = load_minilm(tc.encoder_layers)
    seeds = [int(cfg.seed) + s for s in tc.seeds]
    per_arm: dict[str, list[dict]] = {a: [] for a in tc.arms}
    for seed in seeds:
        data = (make_data(tc.n_train, seed), make_data(tc.n_test, 10_000 + seed))
        for arm in tc.arms:
            per_arm[arm].append(train_arm(arm, encoder, tok, tc, seed, data))
    metrics = {}
    for arm, runs in per_arm.items():
        keys = [k for k in runs[0] if not k.startswith("_")]
        metrics[arm] = {k: statistics.mean(r[k] for r in runs) for k in keys}
        if len(runs) > 1:
            metrics[arm]["accuracy_std"] = statistics.stdev(r["accuracy"] for r in runs)
    extra = {}
    if tc.diagnostics:
        extra["diagnostics"] = run_diagnostics(encoder, tok, seed=seeds[0])
        metrics["diagnostics"] = extra["diagnostics"]
    _plot(per_arm, Path(cfg.run_dir) / "loss_curves.png")
    return write_results(
        cfg.run_dir,
        "slicefine",
        metrics,
        cfg=cfg,
        extra=extra,
        wall_time_s=time.time() - t0,
        notes=f"MiniLM (offline), r={tc.r}, N={tc.switch_every}, {tc.steps} steps, batch "
        f"{tc.batch_size}, lr {tc.lr} shared by all arms; seeds {seeds}.",
    )


def _run_paper(cfg: DictConfig, task: str, fields: dict) -> dict[str, float]:
    """The paper-scale paths (spec §7): HF Trainer + SliceFine on GLUE or VTAB-1K."""
    if task == "glue":
        from methods.slicefine.glue import GlueConfig as Config
        from methods.slicefine.glue import train_glue as train
    else:
        from methods.slicefine.vision import VisionConfig as Config
        from methods.slicefine.vision import train_vision as train
    pc = Config(**{"seed": int(cfg.seed), **fields})
    t0 = time.time()
    res = train(pc, Path(cfg.run_dir) / "trainer")
    return write_results(
        cfg.run_dir,
        "slicefine",
        {f"slicefine_{pc.task}": res},
        cfg=cfg,
        wall_time_s=time.time() - t0,
    )


def _plot(per_arm: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for arm, runs in per_arm.items():
        losses = runs[0]["_losses"]
        k = 10
        smooth = [statistics.mean(losses[max(0, i - k) : i + 1]) for i in range(len(losses))]
        ax.plot(smooth, label=arm)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (cross-entropy, 10-step mean)")
    ax.set_title("SliceFine toy: second-noun category on MiniLM")
    ax.legend(fontsize=8)
    save_plot(fig, path)
