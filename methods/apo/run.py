"""``icml26 experiment=apo_toy``: the contextual-bandit reproduction of spec §6 (Toy A1).

Trains GRPO, GRPO+KL, KL-on-Wrong and APO (plus labelled extra arms) from the same reference policy
on the same prompts and seeds, and reports exact Pass@k on easy and hard prompts, the safe-manifold
mass and curves (``curves.png``, ``metrics.jsonl``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from common.tracking import MetricsLogger, progress, save_plot, write_results
from methods.apo.toy import (
    BanditArm,
    BanditConfig,
    arm_from_dict,
    base_metrics,
    make_bandit,
    run_bandit_arm,
)

logger = logging.getLogger(__name__)

DEMO_OVERRIDES: list[str] = [
    "method.seeds=[0]",
    "method.toy.steps=40",
    "method.toy.eval_every=20",
    "method.extra_arms=[]",
]
HEADLINE: tuple[str, str] = ("apo/hard/pass@64", "grpo/hard/pass@64")


@dataclass
class APORunConfig:
    """``cfg.method`` for APO (``configs/method/apo.yaml``).

    Attributes:
        name: the slug.
        mode: ``toy`` (the bandit of spec §6) or ``train`` (:class:`APOTrainer` on ``cfg.model``).
        k: safe-manifold size K (paper: 8).
        lam: push coefficient λ (paper: 1.05).
        beta: pull coefficient β (paper: 0.1).
        clip_mode: how the rectified ratio is clipped (spec §9.1).
        anchor_form: ``paper_linear`` (the paper's linear ratio) or a diagnostic form.
        anchor_ratio_to: ``ref`` (ratio to π_ref) or ``old`` (to π_old) for the ``apo`` arm.
        eps_low: PPO clip ε_low.
        eps_high: PPO clip ε_high.
        dual_clip: verl dual-clip constant c.
        seeds: seeds of the toy (one bandit instance and sampling stream per seed).
        toy: :class:`methods.apo.toy.BanditConfig` fields.
        extra_arms: additional labelled arms (``BanditArm`` fields), e.g. β sweeps or the
            other anchor forms / anchor_ratio_to; the four main arms are always run.
        threads: torch CPU threads for the toy (1 is fastest for these tiny tensors).
        train: ``mode=train`` settings (:class:`methods.apo.train.TrainSettings` fields).
    """

    name: str = "apo"
    mode: str = "toy"
    k: int = 8
    lam: float = 1.05
    beta: float = 0.1
    clip_mode: str = "rectified"
    anchor_form: str = "paper_linear"
    anchor_ratio_to: str = "ref"
    eps_low: float = 0.2
    eps_high: float = 0.2
    dual_clip: float | None = 3.0
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    toy: dict[str, Any] = field(default_factory=dict)
    extra_arms: list[dict[str, Any]] = field(default_factory=list)
    threads: int = 1
    train: dict[str, Any] = field(default_factory=dict)


def _method_config(cfg: DictConfig) -> APORunConfig:
    schema = OmegaConf.structured(APORunConfig)
    merged = OmegaConf.merge(schema, cfg.method)  # strict: unknown keys raise
    return APORunConfig(**OmegaConf.to_container(merged, resolve=True))


def main_arms(mc: APORunConfig) -> list[BanditArm]:
    """The four arms of the issue, with one shared setting."""
    return [
        BanditArm("grpo", lam=1.0, beta=0.0, k=mc.k),
        BanditArm("grpo_kl", lam=1.0, beta=0.0, k=mc.k, kl="all"),
        BanditArm("kl_on_wrong", lam=1.0, beta=0.0, k=mc.k, kl="wrong"),
        BanditArm(
            "apo",
            lam=mc.lam,
            beta=mc.beta,
            k=mc.k,
            clip_mode=mc.clip_mode,
            anchor_form=mc.anchor_form,
            anchor_ratio_to=mc.anchor_ratio_to,
        ),
    ]


def _mean_std(rows: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key in rows[0]:
        vals = torch.tensor([r[key] for r in rows], dtype=torch.float64)
        out[key] = float(vals.mean())
        if len(rows) > 1 and "/" in key:
            out[f"{key}_std"] = float(vals.std())
    return out


def _plot(curves: dict[str, list[list[dict[str, float]]]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, key in zip(axes, ["easy/pass@1", "hard/pass@1", "hard/pass@64"]):
        for arm, per_seed in curves.items():
            steps = [r["step"] for r in per_seed[0]]
            vals = torch.tensor([[r[key] for r in c] for c in per_seed]).mean(0)
            ax.plot(steps, vals, label=arm, lw=1.5, ls="--" if arm == "base" else "-")
        ax.set_xlabel("SGD step")
        ax.set_ylabel(f"{key} (exact)")
        ax.set_title(key)
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=7)
    fig.suptitle(title)
    save_plot(fig, path)


def run(cfg: DictConfig) -> dict[str, float]:
    """Runs the bandit toy for every arm and seed; writes results and curves into ``cfg.run_dir``."""
    mc = _method_config(cfg)
    if mc.mode == "train":
        from methods.apo.train import run_training

        return run_training(cfg, mc)
    if mc.mode != "toy":
        raise ValueError(f"method.mode must be 'toy' or 'train', got {mc.mode!r}")
    toy = BanditConfig(**mc.toy)
    arms = main_arms(mc) + [arm_from_dict(dict(a)) for a in mc.extra_arms]
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise ValueError(f"arm names must be unique, got {names}")
    run_dir = Path(cfg.run_dir)
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(mc.threads)
    start = time.time()
    mlog = MetricsLogger(run_dir, use_wandb=cfg.get("logger") == "wandb")
    finals: dict[str, list[dict[str, float]]] = {"base": []}
    curves: dict[str, list[list[dict[str, float]]]] = {}
    try:
        jobs = [(s, a) for s in mc.seeds for a in arms]
        problems = {s: make_bandit(toy, int(s)) for s in mc.seeds}
        for s in mc.seeds:
            finals["base"].append(base_metrics(problems[s], toy))
        for seed, arm in progress(jobs, desc="apo toy arms", unit="arm"):
            final, curve = run_bandit_arm(problems[seed], toy, arm, int(seed))
            finals.setdefault(arm.name, []).append(
                {k: v for k, v in final.items() if "/" in k or k in ("safe_mass", "entropy")}
            )
            curves.setdefault(arm.name, []).append(curve)
            for row in curve:
                mlog.log(
                    {f"{arm.name}/seed{seed}/{k}": v for k, v in row.items() if k != "step"},
                    step=int(row["step"]),
                )
    finally:
        torch.set_num_threads(torch_threads)
        mlog.close()
    metrics = {arm: _mean_std(rows) for arm, rows in finals.items()}
    _plot(
        curves,
        run_dir / "curves.png",
        f"APO toy A1: {toy.n_actions}-armed contextual bandit, {toy.n_prompts} prompts, "
        f"mean over seeds {list(mc.seeds)}",
    )
    wall = time.time() - start
    notes = (
        "Exact metrics of the trained policy (no sampling noise); mean over seeds, `_std` across "
        "seeds. `base` is the reference policy. Arms whose name contains `ref_xent` or `log` use a "
        "diagnostic anchor form; `apo_anchor_old` takes the anchor ratio against π_old instead of "
        "π_ref (the source leaves this open). With clip_mode=rectified and β > λ − (1 − ε_low) every "
        "negative token is clipped at initialisation (λ − β < 0.8), so such arms train on positive "
        "samples only."
    )
    return write_results(
        run_dir,
        "apo",
        metrics,
        cfg=cfg,
        extra={"arms": [dataclasses.asdict(a) for a in arms], "toy": dataclasses.asdict(toy)},
        wall_time_s=wall,
        notes=notes,
    )
