"""The CPU toys of spec §6 for the CLI: ``icml26 experiment=sv_features_toy``.

Toy A (``single``): one target pair, alignment of ``(w_0, w_1)`` with the top singular pair of Omega,
with the attention loss and without it (negative control, ``lam = 0``). Toy B (``multi``): many pairs,
Hungarian-matched alignment and Spearman(sigma, pair weight). Toy C (``closed_form``): the least-squares
oracle against a sampled ``lstsq`` fit. Toy D (``sad``): sparse attention decomposition before and after
training a one-layer model, with the random-rotation control.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from common.tracking import save_plot, write_results
from methods.sv_features.alignment import lsq_optimal_omega, whitened_feature_dirs
from methods.sv_features.toy import ToyConfig, multi_pair_pairs, train_toy
from methods.sv_features.toy_sad import MatchTaskConfig, run_match_toy

logger = logging.getLogger(__name__)

DEMO_OVERRIDES = [
    "method.toys=[single,closed_form]",
    "method.single.steps=150",
    "method.single.batch=128",
    "method.single.lr=0.02",
    "method.single.n_keys=4",
    "method.single.feature_prob=0.2",
    "method.closed_form.samples=5000",
    "method.log_every=150",
    "method.plots=false",
]
HEADLINE = ("single/align_top", "single_no_attn/align_top")
_TOYS = ("single", "multi", "closed_form", "sad")


@dataclass
class RunConfig:
    """``cfg.method`` without ``name``: which toys to run and each toy's settings."""

    toys: list = field(default_factory=lambda: list(_TOYS))
    single: dict = field(default_factory=dict)
    multi: dict = field(default_factory=dict)
    multi_pairs: dict = field(default_factory=dict)
    closed_form: dict = field(default_factory=dict)
    sad: dict = field(default_factory=dict)
    log_every: int = 50
    plots: bool = True

    def __post_init__(self) -> None:
        bad = [t for t in self.toys if t not in _TOYS]
        if bad:
            raise ValueError(f"method.toys has unknown toys {bad}; choose from {list(_TOYS)}")


def _closed_form(d: int = 6, n: int = 10, samples: int = 200_000, a: int = 0, b: int = 1, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(d, n, generator=g).double()
    Y = torch.randn(d, n, generator=g).double()
    T = torch.zeros(n, n, dtype=torch.float64)
    T[a, b] = 1.0
    fr = torch.randn(samples, n, generator=g).double()
    fs = torch.randn(samples, n, generator=g).double()
    r, s = fr @ X.T, fs @ Y.T
    design = (r[:, :, None] * s[:, None, :]).reshape(samples, -1)
    fit = torch.linalg.lstsq(design, (fr[:, a] * fs[:, b])[:, None]).solution.reshape(d, d)
    om = lsq_optimal_omega(X, Y, T)
    u, v = whitened_feature_dirs(X, Y, a, b)
    U, S, Vh = torch.linalg.svd(fit)
    return {
        "max_abs_err": float((fit - om).abs().max()),
        "rel_err": float((fit - om).norm() / om.norm()),
        "cos_u": float(abs(U[:, 0] @ u)),
        "cos_v": float(abs(Vh[0] @ v)),
        "sigma2_over_sigma1": float(S[1] / S[0]),
    }


def _last(hist: list[dict], keys) -> dict[str, float]:
    return {k: float(hist[-1][k]) for k in keys if k in hist[-1]}


def run(cfg: DictConfig) -> dict[str, float]:
    """Runs the selected toys and writes results.{json,md} (+ PNGs) into ``cfg.run_dir``."""
    fields = OmegaConf.to_container(cfg.method, resolve=True)
    fields.pop("name", None)
    rc = RunConfig(**fields)  # unknown keys raise TypeError
    torch.set_num_threads(min(2, torch.get_num_threads()))
    seed = int(cfg.seed)
    run_dir = Path(cfg.run_dir)
    metrics: dict[str, dict[str, float]] = {}
    extra: dict = {"timings_s": {}, "histories": {}}
    t_all = time.time()
    keys = ("align_top", "sigma_ratio_12", "ortho_gap", "attn", "recon")
    if "single" in rc.toys:
        t0 = time.time()
        tc = ToyConfig(**{**rc.single, "seed": seed})
        _, h1 = train_toy(tc, log_every=rc.log_every)
        tc0 = ToyConfig(**{**rc.single, "seed": seed, "lam": 0.0})
        _, h0 = train_toy(tc0, log_every=rc.log_every)
        metrics["single"] = _last(h1, keys) | {"align_init": float(h1[0]["align_top"])}
        metrics["single_no_attn"] = _last(h0, keys)
        extra["histories"]["single"] = h1
        extra["histories"]["single_no_attn"] = h0
        extra["timings_s"]["single"] = time.time() - t0
        if rc.plots:
            _plot_single(h1, h0, run_dir / "toy_a_alignment.png")
    if "multi" in rc.toys:
        t0 = time.time()
        pairs = multi_pair_pairs(**rc.multi_pairs) if rc.multi_pairs else None
        kw = {**rc.multi, "seed": seed}
        if pairs is not None:
            kw["pairs"] = pairs
        tc = ToyConfig(**kw)
        model, hm = train_toy(tc, log_every=max(rc.log_every, tc.steps // 10 or 1))
        metrics["multi"] = _last(
            hm,
            (
                "align_matched_median",
                "align_matched_mean",
                "spearman_sigma_weight",
                "spearman_rank_weight",
                "attn",
                "recon",
            ),
        )
        extra["histories"]["multi"] = hm
        extra["timings_s"]["multi"] = time.time() - t0
        if rc.plots:
            _plot_multi(model, run_dir / "toy_b_sigma_vs_weight.png")
    if "closed_form" in rc.toys:
        t0 = time.time()
        metrics["closed_form"] = _closed_form(**{**rc.closed_form, "seed": seed})
        extra["timings_s"]["closed_form"] = time.time() - t0
    if "sad" in rc.toys:
        t0 = time.time()
        out = run_match_toy(MatchTaskConfig(**{**rc.sad, "seed": seed}))
        metrics["sad_init"] = out["init"]
        metrics["sad_trained"] = out["trained"]
        extra["timings_s"]["sad"] = time.time() - t0
    return write_results(
        run_dir,
        "sv_features",
        metrics,
        cfg=cfg,
        extra=extra,
        wall_time_s=time.time() - t_all,
        notes=(
            "single: align_top = min(|cos(w_i, u_1)|, |cos(w_j, v_1)|) for the target pair; "
            "single_no_attn: the same toy with lam = 0 (negative control). multi: Hungarian-matched "
            "alignment of all pairs; spearman_* = rank correlation of sigma (or rank) with pair weight. "
            "closed_form: sampled lstsq fit vs Sigma_X^-1 X T Y^T Sigma_Y^-1. sad_*: one-layer model on "
            "the matching task, edge (last, j*), median Rolls-Tovee sparseness / N_recon (lower = "
            "sparser) in the singular basis and in a random rotation (control)."
        ),
    )


def _plot_single(h1: list[dict], h0: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot([r["step"] for r in h1], [r["align_top"] for r in h1], label="lam=1 (attention loss)")
    ax.plot([r["step"] for r in h0], [r["align_top"] for r in h0], label="lam=0 (control)")
    ax.set_xlabel("step")
    ax.set_ylabel("alignment of target pair with top SV pair")
    ax.set_ylim(0, 1.05)
    ax.legend()
    save_plot(fig, path)


def _plot_multi(model, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with torch.no_grad():
        S = torch.linalg.svdvals(model.omega())
    w = [float(p[2]) for p in model.cfg.pairs]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(range(1, len(S) + 1), S.numpy(), "o-", ms=3, label="sigma_k of Omega")
    ax.plot(range(1, len(w) + 1), sorted(w, reverse=True), "x", label="pair weights (sorted)")
    ax.set_xlabel("rank k")
    ax.legend()
    save_plot(fig, path)
