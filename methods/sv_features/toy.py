"""The toy stages of sv_features (``toy`` / ``synthetic``; the real-model SAD stages are in :mod:`.paper`).

Toy A (``single``): one target pair, alignment of ``(w_0, w_1)`` with the top singular pair of Omega,
with the attention loss and without it (negative control, ``lam = 0``). Toy B (``multi``): many pairs,
Hungarian-matched alignment and Spearman(sigma, pair weight). Toy C (``closed_form``): the least-squares
oracle against a sampled ``lstsq`` fit. Toy D (``sad``): sparse attention decomposition before and after
training a one-layer model, with the random-rotation control.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from common.threads import torch_threads
from common.tracking import pyplot, save_plot, write_results
from methods.sv_features.alignment import lsq_optimal_omega, whitened_feature_dirs
from methods.sv_features.superposition import multi_pair_pairs, train_toy
from methods.sv_features.toy_sad import run_match_toy

logger = logging.getLogger(__name__)


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


def toy_stage(run) -> dict[str, float]:
    """``stage=toy`` / ``synthetic``: the selected toys; writes results.{json,md} (+ PNGs)."""
    from dataclasses import asdict, replace

    rc = run.method
    cfg = run.cfg
    with torch_threads(min(2, torch.get_num_threads())):
        seed = int(run.seed)
        run_dir = Path(run.run_dir)
        metrics: dict[str, dict[str, float]] = {}
        extra: dict = {"timings_s": {}, "histories": {}}
        t_all = time.time()
        keys = ("align_top", "sigma_ratio_12", "ortho_gap", "attn", "recon")
        if "single" in rc.toys:
            t0 = time.time()
            tc = replace(rc.single, seed=seed)
            _, h1 = train_toy(tc, log_every=rc.log_every)
            tc0 = replace(rc.single, seed=seed, lam=0.0)
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
            tc = replace(rc.multi, seed=seed, pairs=multi_pair_pairs(**asdict(rc.multi_pairs)))
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
            metrics["closed_form"] = _closed_form(**asdict(rc.closed_form), seed=seed)
            if rc.plots:
                _plot_closed_form(asdict(rc.closed_form), seed, run_dir / "toy_c_closed_form.png")
            extra["timings_s"]["closed_form"] = time.time() - t0
        if "sad" in rc.toys:
            t0 = time.time()
            mcfg = replace(rc.sad, seed=seed)
            hist_d: list = []
            dists: dict = {}
            out = run_match_toy(mcfg, hist_d, max(1, mcfg.steps // 6), dists)
            metrics["sad_init"] = out["init"]
            metrics["sad_trained"] = out["trained"]
            extra["histories"]["sad"] = hist_d
            if rc.plots:
                _plot_sad(hist_d, dists, run_dir / "toy_d_sad.png")
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


def _plot_closed_form(cf: dict, seed: int, path: Path) -> None:
    """Toy C: the sampled lstsq fit converges to the closed form as the sample count grows."""
    plt = pyplot()

    top = int(cf.get("samples", 200_000))
    ns = [n for n in (1_000, 3_000, 10_000, 30_000, 100_000, 300_000) if n <= top] or [top]
    kw = {k: v for k, v in cf.items() if k != "samples"}
    rows = [_closed_form(**kw, samples=n, seed=seed) for n in ns]
    fig, ax = plt.subplots(1, 2, figsize=(8, 3))
    ax[0].loglog(ns, [r["rel_err"] for r in rows], "o-")
    ax[0].set_xlabel("samples")
    ax[0].set_ylabel("||fit - closed form|| / ||closed form||")
    ax[1].semilogx(ns, [1 - r["cos_u"] for r in rows], "o-", label="1 - |cos(u1, S_X^-1 x_a)|")
    ax[1].semilogx(ns, [1 - r["cos_v"] for r in rows], "x-", label="1 - |cos(v1, S_Y^-1 y_b)|")
    ax[1].set_yscale("log")
    ax[1].set_xlabel("samples")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    save_plot(fig, path)


def _plot_sad(hist: list[dict], dists: dict, path: Path) -> None:
    """Toy D: median sparseness over training (singular vs rotated basis) and per-edge histograms."""
    plt = pyplot()

    fig, ax = plt.subplots(1, 2, figsize=(8.5, 3.2))
    steps = [r["step"] for r in hist]
    ax[0].plot(steps, [r["sparseness"] for r in hist], "o-", label="singular basis")
    ax[0].plot(steps, [r["sparseness_control"] for r in hist], "x-", label="random rotation")
    ax[0].plot(steps, [r["accuracy"] for r in hist], ":", c="gray", label="task accuracy")
    ax[0].set_xlabel("training step")
    ax[0].set_ylabel("median Rolls-Tovee S (lower = sparser)")
    ax[0].set_ylim(0, 1.05)
    ax[0].legend(fontsize=7)
    bins = [i / 20 for i in range(21)]
    for key, ls in (("init", "--"), ("trained", "-")):
        d = dists.get(key) or {}
        ax[1].hist(d.get("sparseness", []), bins, histtype="step", ls=ls, color="C0",
                   label=f"singular, {key}")  # fmt: skip
        ax[1].hist(d.get("sparseness_control", []), bins, histtype="step", ls=ls, color="C1",
                   label=f"rotated, {key}")  # fmt: skip
    ax[1].set_xlabel("S per edge (last -> j*)")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    save_plot(fig, path)


def _plot_single(h1: list[dict], h0: list[dict], path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot([r["step"] for r in h1], [r["align_top"] for r in h1], label="lam=1 (attention loss)")
    ax.plot([r["step"] for r in h0], [r["align_top"] for r in h0], label="lam=0 (control)")
    ax.set_xlabel("step")
    ax.set_ylabel("alignment of target pair with top SV pair")
    ax.set_ylim(0, 1.05)
    ax.legend()
    save_plot(fig, path)


def _plot_multi(model, path: Path) -> None:
    plt = pyplot()

    with torch.no_grad():
        S = torch.linalg.svdvals(model.omega())
    w = [float(p[2]) for p in model.cfg.pairs]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(range(1, len(S) + 1), S.numpy(), "o-", ms=3, label="sigma_k of Omega")
    ax.plot(range(1, len(w) + 1), sorted(w, reverse=True), "x", label="pair weights (sorted)")
    ax.set_xlabel("rank k")
    ax.legend()
    save_plot(fig, path)
