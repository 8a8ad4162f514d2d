"""The ``toy`` stage of AutoQRA ("AutoQRA-tiny"): joint (bits, rank) search vs fixed allocations.

A tiny Llama is pretrained on a sparse 2nd-order Markov source; block 1 gets function-preserving input-channel
outliers (hard to quantise). The downstream task is a shifted source. Arms, all fine-tuned with the same
steps / lr / batch and evaluated by held-out task cross-entropy (lower is better) over several seeds:

- ``fp_lora``: full-precision base + LoRA (reference; over budget);
- ``uniform4``: uniform 4-bit (toy ladder's middle), reference rank — defines the budget B;
- ``uniform3_hi_rank``: uniform 3-bit with a higher rank, ≈ equal memory;
- ``sequential``: bits allocated greedily by quantisation error per byte (I_q), reference rank;
- ``random_search``: best of as many random feasible configurations as AutoQRA's HF evaluations;
- ``autoqra``: Stage 1 evolution + Stage 2 BO.
Arm ``search`` holds the LF/HF Spearman agreement, evaluation counts and timings.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from common.config import Run
from common.metrics import spearman
from common.threads import torch_threads
from common.tracking import pyplot, save_plot, write_results

from .importance import Importance, compute_adapt_sensitivity, compute_quant_sensitivity
from .memory import MemoryModel
from .operators import repair_to_budget
from .search import AutoQRA, EvolutionConfig
from .space import QRConfig, SearchSpace
from .toy_world import FakeQuantEvaluator, MarkovSource, inject_outliers, tiny_llama, train_lm

logger = logging.getLogger(__name__)


def sequential_allocation(
    space: SearchSpace, memory: MemoryModel, raw_q: np.ndarray, budget: float, rank: int
) -> QRConfig:
    """Quantisation-error-first baseline: ranks fixed, bits raised greedily by error saved per byte.

    The error of block ℓ at b bits is modelled as ``raw_q[ℓ]·4^{-(b - q_min)}`` (RTN error ∝ step²).
    """
    q = [space.Q[0]] * space.num_layers
    r = (rank,) * space.num_layers

    def err(i, b):
        return max(raw_q[i], 0.0) * 4.0 ** (-(b - space.Q[0]))

    while True:
        best, arg = -1.0, None
        for i in range(space.num_layers):
            k = space.idx_q(q[i])
            if k + 1 >= len(space.Q):
                continue
            nq = list(q)
            nq[i] = space.Q[k + 1]
            cand = QRConfig(tuple(nq), r)
            if memory.total_bytes(cand) > budget:
                continue
            gain = (err(i, q[i]) - err(i, nq[i]) + 1e-12) / (
                memory.total_bytes(cand) - memory.total_bytes(QRConfig(tuple(q), r))
            )
            if gain > best:
                best, arg = gain, nq
        if arg is None:
            return QRConfig(tuple(q), r)
        q = arg


def _spearman(a, b) -> float:
    return spearman(a, b, min_n=3)


def _plot(arms: dict[str, QRConfig], path: Path) -> None:
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(9, 3))
    width = 0.8 / len(arms)
    for j, (name, c) in enumerate(arms.items()):
        x = np.arange(c.num_layers) + j * width
        axes[0].bar(x, c.q, width, label=name)
        axes[1].bar(x, c.r, width, label=name)
    axes[0].set(title="bits per block", xlabel="block")
    axes[1].set(title="LoRA rank per block", xlabel="block")
    axes[1].legend(fontsize=7)
    save_plot(fig, path)
    plt.close(fig)


def _toy_base(t, seed: int):
    """The base model pretrained on S_pre (outliers injected, frozen) and the S_task data."""
    src = MarkovSource(t.vocab, support=t.markov_support, order=t.markov_order, seed=seed)
    task = src.shifted(t.task_shift, seed=seed + 1)
    pre_data = src.sample(max(t.n_train, 512), t.seq_len, seed=seed + 2)
    train = task.sample(t.n_train, t.seq_len, seed=seed + 3)
    heldout = task.sample(t.n_heldout, t.seq_len, seed=seed + 4)
    base = tiny_llama(t.num_layers, t.hidden_size, t.intermediate_size, t.vocab, seed)
    train_lm(base, pre_data, t.pretrain_steps, t.pretrain_batch, t.lr, seed)
    if t.inject_outliers:
        inject_outliers(
            base,
            t.outlier_blocks,
            channels=t.outlier_channels,
            factor=t.outlier_factor,
            seed=seed,
            mode=t.outlier_mode,
        )
    for p in base.parameters():
        p.requires_grad_(False)
    return base, pre_data, train, heldout


def _toy_priors(base, pre_data, train, space: SearchSpace, group_size: int):
    """Phase I importance priors: raw I_q (2-bit loss increase per block) and raw I_r (Fisher)."""
    calib = [pre_data[i : i + 64] for i in range(0, 128, 64)]
    task_b = [train[i : i + 32] for i in range(0, 64, 32)]
    raw_q = compute_quant_sensitivity(base, calib, bits=space.Q[0], group_size=group_size)
    for p in base.parameters():
        p.requires_grad_(True)
    raw_r = compute_adapt_sensitivity(base, task_b)
    for p in base.parameters():
        p.requires_grad_(False)
    return raw_q, raw_r


def evolution_config(c) -> EvolutionConfig:
    """``EvolutionConfig`` from the run config's search knobs."""
    return EvolutionConfig(
        pop=c.pop, gens=c.gens, promote_k=c.promote_k, k_neighbors=c.k_neighbors, gamma=c.gamma,
        hv_eps=c.hv_eps, hv_window=c.hv_window, max_lowbit_fraction=c.max_lowbit_fraction,
        offspring_ops=tuple(c.offspring_ops), surrogate_training=c.surrogate_training,
        jitter_mode=c.jitter_mode, init_promotion=c.init_promotion,
        hv_include_init=c.hv_include_init,
    )  # fmt: skip


def _baseline_arms(c, space, memory, raw_q, budget, ev, n_hf: int, seed: int):
    """The fixed allocations at the same budget, and random feasible search with ``n_hf`` HF evaluations."""
    t = c.toy
    ref_rank = c.budget_rank
    hi_rank = space.R[min(space.idx_r(ref_rank) + 1, len(space.R) - 1)]
    lo_bits = space.Q[max(space.idx_q(c.budget_bits) - 1, 0)]
    arms: dict[str, QRConfig] = {
        "fp_lora": QRConfig.uniform(t.num_layers, 16, ref_rank),
        "uniform4": QRConfig.uniform(t.num_layers, c.budget_bits, ref_rank),
        "uniform3_hi_rank": QRConfig.uniform(t.num_layers, lo_bits, hi_rank),
        "sequential": sequential_allocation(space, memory, raw_q, budget, ref_rank),
    }
    if t.random_search and "random_search" in t.arms:
        rng = np.random.default_rng(seed + 100)
        best, best_p = None, -np.inf
        for _ in range(max(n_hf, 1)):
            rc = QRConfig(
                tuple(rng.choice(space.Q, t.num_layers)), tuple(rng.choice(space.R, t.num_layers))
            )
            rc = repair_to_budget(rc, space, memory, Importance.uniform(t.num_layers), budget)
            p = ev.evaluate(rc, "high").perf
            if p > best_p:
                best, best_p = rc, p
        arms["random_search"] = best
    return arms


def _final_metrics(arms, c, base, memory, train, heldout, fids, budget) -> dict[str, dict]:
    """Final fine-tune of every arm over ``toy.final_seeds``: task CE (mean, std), memory, bits, ranks."""
    t = c.toy
    metrics: dict[str, dict[str, float]] = {}
    unknown = sorted(set(t.arms) - set(arms) - {"random_search"})
    if unknown:
        raise ValueError(f"method.toy.arms has unknown arms {unknown}; choose from {sorted(arms)}")
    for name, ac in arms.items():
        if name not in t.arms:
            continue
        ces = []
        for s in t.final_seeds:
            ev_s = FakeQuantEvaluator(
                base, memory, train, heldout, fids, t.lr, t.batch, c.group_size, s
            )
            ces.append(ev_s.evaluate(ac, "full").meta["ce"])
        mem = memory.total_bytes(ac)
        metrics[name] = {
            "ce": float(np.mean(ces)),
            "ce_std": float(np.std(ces)),
            "mem_kb": mem / 1024.0,
            "mem_over_budget": mem / budget,
            "avg_bits": float(np.mean(ac.q)),
            "avg_rank": float(np.mean(ac.r)),
        }
    return metrics


@torch_threads(1)  # tiny matmuls: extra threads only contend on a loaded machine
def toy_stage(run: Run) -> dict[str, float]:
    """Run the toy; returns the flattened ``{"arm/metric": float}`` results.

    The search checkpoints into ``method.checkpoint_dir`` (default ``run_dir/search``); a rerun with
    the same settings resumes it, other settings are refused (``CheckpointMismatch``).
    """
    c = run.method
    t = c.toy
    seed = int(run.seed)  # the registry seeded python, numpy and torch with it
    run_dir = Path(run.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()

    base, pre_data, train, heldout = _toy_base(t, seed)  # 1) base model and task data
    space = SearchSpace(c.Q, c.R, t.num_layers)
    memory = MemoryModel.from_hf_config(
        base.config, group_size=c.group_size, lora_bits=c.lora_bits, meta_bits=c.meta_bits
    )
    budget = memory.budget_from_reference(c.budget_bits, c.budget_rank, c.budget_slack)
    raw_q, raw_r = _toy_priors(base, pre_data, train, space, c.group_size)  # 2) Phase I
    imp = Importance(raw_q, raw_r)
    fids = {
        "low": {"steps": t.lf_steps, "n_train": t.lf_n},
        "high": {"steps": t.hf_steps, "n_train": t.hf_n},
        "full": {"steps": t.final_steps, "n_train": t.n_train},
    }
    ev = FakeQuantEvaluator(base, memory, train, heldout, fids, t.lr, t.batch, c.group_size, seed)

    # 3) AutoQRA search (checkpointed)
    ckpt_dir = Path(c.checkpoint_dir) if c.checkpoint_dir else run_dir / "search"
    t0 = time.perf_counter()
    stage1, sel = AutoQRA(
        space, memory, imp, ev, budget, evolution_config(c), c.alpha, c.bo_iters, c.k_bo, seed
    ).run(ckpt_dir)
    search_s = time.perf_counter() - t0
    auto_cfg = QRConfig(tuple(sel.q), tuple(sel.r))
    both = [r for r in stage1.records if r.phigh is not None]
    n_hf = len(both) + len(sel.history)

    # 4) baselines at the same budget, 5) final fine-tune of every arm over the seeds
    arms = _baseline_arms(c, space, memory, raw_q, budget, ev, n_hf, seed)
    arms["autoqra"] = auto_cfg
    metrics = _final_metrics(arms, c, base, memory, train, heldout, fids, budget)
    ob = [b for b in t.outlier_blocks if b < t.num_layers] if t.inject_outliers else []
    others = [i for i in range(t.num_layers) if i not in ob]
    metrics["search"] = {
        "spearman_lf_hf": _spearman([r.plow for r in both], [r.phigh for r in both]),
        "n_lf": float(stage1.n_evals.get("low", 0)),
        "n_hf": float(n_hf),
        "pareto_size": float(len(stage1.pareto)),
        "search_s": search_s,
        "outlier_bits_minus_rest": float(
            np.mean([auto_cfg.q[i] for i in ob]) - np.mean([auto_cfg.q[i] for i in others])
        )
        if ob and others
        else float("nan"),
        "budget_kb": budget / 1024.0,
        "total_s": time.perf_counter() - t_start,
    }
    _plot({k: arms[k] for k in ("uniform4", "sequential", "autoqra")}, run_dir / "allocation.png")
    extra = {
        "configs": {k: v.to_dict() for k, v in arms.items()},
        "raw_q": raw_q.tolist(),
        "raw_r": raw_r.tolist(),
        "op_counts": stage1.op_counts,
    }
    return write_results(run_dir, "autoqra", metrics, cfg=run.cfg, extra=extra)
