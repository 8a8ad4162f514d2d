"""Toy A1: a shared-parameter contextual bandit that shows Recursive Space Contraction.

P prompts, A actions. Policy logits are ``s + E_x W`` with a shared bias ``s`` [A] and a shared map
``W`` [D, A] (sharing is what lets easy prompts starve hard ones). The reference π_ref is the initial
policy. Easy prompts accept the reference argmax and one action of reference ranks 2-8; hard prompts
accept a single action of reference ranks 3-8: inside the Top-8 safe manifold, but rare
(``hard_rank_band`` moves it to ranks 1-2 or 6-8 for the diagnosis, :mod:`methods.apo.diagnose`). Each step
samples a batch of prompts and a group of G actions per prompt, computes GRPO advantages and takes
one on-policy SGD step on ``(s, W)`` with the arm's loss. Every arm calls the library loss
:func:`methods.apo.apo_policy_loss` with T = 1 and V = A, so the toy exercises the real code.

Arms (one shared hyper-parameter setting): ``grpo`` (λ = 1, β = 0), ``grpo_kl`` (+ exact
KL(π‖π_ref) per sampled prompt), ``kl_on_wrong`` (the same KL only on negative-advantage samples)
and ``apo`` (λ, β, K from the config). Extra arms: ``apo_beta<β>`` (the paper form with larger β) and
``apo_<form>_beta<β>`` (the diagnostic anchor forms) and ``apo_anchor_old`` (the anchor ratio to π_old).

Metrics are exact (no sampling): p_x = Σ_{a valid} π(a|x), Pass@k = mean_x [1 − (1 − p_x)^k], split
into easy and hard prompts, and the safe-manifold mass Σ_{TopK(π_ref)} π.

Shape letters: P prompts, A actions, D embedding size, B prompts per step, G group size.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from common.advantages import group_advantages
from common.threads import torch_threads
from common.train_loop import train_steps
from methods.apo.config import HARD_RANK_BANDS, BanditArm, BanditConfig
from methods.apo.loss import apo_policy_loss

logger = logging.getLogger(__name__)

__all__ = [
    "BanditArm",
    "BanditConfig",
    "BanditProblem",
    "arm_from_dict",
    "arm_loss",
    "base_metrics",
    "main_arms",
    "make_bandit",
    "run_bandit_arm",
    "run_toy",
]


@dataclass
class BanditProblem:
    """A sampled toy instance (all tensors float64 / int64)."""

    emb: torch.Tensor  # [P, D]
    s0: torch.Tensor  # [A]
    w0: torch.Tensor  # [D, A]
    valid: torch.Tensor  # [P, A] bool
    hard: torch.Tensor  # [P] bool
    ref_logp: torch.Tensor  # [P, A]

    def logits(self, s: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return s + self.emb @ w  # [P, A]


def make_bandit(cfg: BanditConfig, seed: int) -> BanditProblem:
    """Builds our bandit toy instance from a seed (prompts, reference, valid sets)."""
    g = torch.Generator().manual_seed(seed)
    p, a, d = cfg.n_prompts, cfg.n_actions, cfg.emb_dim
    emb = torch.randn(p, d, generator=g, dtype=torch.float64) / d**0.5  # N(0, 1/D)
    s0 = torch.zeros(a, dtype=torch.float64)
    s0[:2] = 2.0
    w0 = torch.randn(d, a, generator=g, dtype=torch.float64)
    ref_logits = s0 + emb @ w0  # [P, A]
    ranks = ref_logits.argsort(dim=-1, descending=True)  # [P, A]; ranks[:, 0] is the argmax
    hard = torch.zeros(p, dtype=torch.bool)
    hard[torch.randperm(p, generator=g)[: round(p * (1 - cfg.frac_easy))]] = True
    valid = torch.zeros(p, a, dtype=torch.bool)
    lo, hi = HARD_RANK_BANDS[cfg.hard_rank_band]  # default "current": 0-based 2..7, ranks 3-8
    for x in range(p):
        if hard[x]:  # one action among the band's reference ranks
            valid[x, ranks[x, int(torch.randint(lo, hi, (1,), generator=g))]] = True
        else:  # the argmax and one action among ranks 2-8 (0-based 1..7)
            valid[x, ranks[x, 0]] = True
            valid[x, ranks[x, int(torch.randint(1, 8, (1,), generator=g))]] = True
    return BanditProblem(emb, s0, w0, valid, hard, torch.log_softmax(ref_logits, -1))


def _evaluate(
    problem: BanditProblem, logp: torch.Tensor, ks: list[int], k_safe: int
) -> dict[str, float]:
    pi = logp.exp()  # [P, A]
    p_valid = (pi * problem.valid).sum(-1)  # [P]
    top = problem.ref_logp.topk(k_safe, dim=-1).indices  # [P, K]
    out: dict[str, float] = {}
    for split, sel in (("easy", ~problem.hard), ("hard", problem.hard)):
        for k in ks:
            out[f"{split}/pass@{k}"] = float((1 - (1 - p_valid[sel]) ** k).mean())
    out["safe_mass"] = float(pi.gather(-1, top).sum(-1).mean())
    out["entropy"] = float(-(pi * logp).sum(-1).mean())
    return out


def arm_loss(
    problem: BanditProblem,
    cfg: BanditConfig,
    arm: BanditArm,
    logits_all: torch.Tensor,
    batch: tuple[torch.Tensor, ...],
    detach_anchor: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """One step's loss of ``arm`` on a sampled batch, as ``(apo_loss, kl_loss, stats)``.

    ``batch`` is ``(xs [B], acts [B, G], top_ids [P, K], top_lp [P, K])``. The APO part calls the
    library :func:`methods.apo.apo_policy_loss` with T = 1, V = A. ``detach_anchor`` passes the
    policy log-probs at the Top-K ids detached (``gathered=True``): same values, hence the same
    clipping, but no gradient through the anchor term (the probe's split, :mod:`methods.apo.probe`).
    """
    xs, acts, top_ids, top_lp = batch
    logp = torch.log_softmax(logits_all[xs], -1)  # [B, A]
    with torch.no_grad():
        rewards = problem.valid[xs[:, None], acts].double()  # [B, G]
        adv = group_advantages(rewards, eps=cfg.adv_eps)  # [B, G], Bessel-corrected std
    n = xs.numel() * cfg.group_size
    logp_seq = logp.repeat_interleave(cfg.group_size, 0)[:, None, :]  # [B·G, 1, A]
    sampled = acts.reshape(n, 1)  # [B·G, 1]
    old = logp_seq.detach().gather(-1, sampled[..., None]).squeeze(-1)  # on-policy
    ids = top_ids[xs].repeat_interleave(cfg.group_size, 0)[:, None, :]  # [B·G, 1, K]
    extra: dict[str, Any] = {}
    if detach_anchor:
        logp_k = logp_seq.gather(-1, ids).detach()  # [B·G, 1, K]
        extra = {"gathered": True, "logp_sampled": logp_seq.gather(-1, sampled[..., None])[..., 0]}
        logp_seq = logp_k
    loss, stats = apo_policy_loss(
        logp_seq,
        old,
        sampled,
        adv.reshape(n),
        torch.ones(n, 1, dtype=torch.float64),
        ids,
        top_lp[xs].repeat_interleave(cfg.group_size, 0)[:, None, :],
        lam=arm.lam,
        beta=arm.beta,
        clip_mode=arm.clip_mode,
        anchor_form=arm.anchor_form,
        anchor_ratio_to=arm.anchor_ratio_to,
        **extra,
    )
    kl_loss = torch.zeros((), dtype=loss.dtype)
    if arm.kl != "none":
        kl = (logp.exp() * (logp - problem.ref_logp[xs])).sum(-1)  # [B], exact KL(π‖π_ref)
        kl = kl.repeat_interleave(cfg.group_size)  # [B·G]
        if arm.kl == "wrong":
            kl = kl * (adv.reshape(n) < 0)
        coef = cfg.kl_coef if arm.kl_coef is None else arm.kl_coef
        kl_loss = coef * kl.mean()
    return loss, kl_loss, stats


def run_bandit_arm(
    problem: BanditProblem, cfg: BanditConfig, arm: BanditArm, seed: int
) -> tuple[dict[str, float], list[dict[str, float]]]:
    """Trains one arm from π_ref and returns (final metrics, curve of evaluations).

    The sampling stream depends only on ``seed``, so arms see the same prompt order.
    """
    g = torch.Generator().manual_seed(10_000 + seed)
    params = torch.nn.ParameterList([problem.s0.clone(), problem.w0.clone()])  # trained (s, w)
    s, w = params[0], params[1]
    opt = torch.optim.SGD([s, w], lr=cfg.lr)
    top_lp, top_ids = problem.ref_logp.topk(arm.k, dim=-1)  # [P, K]
    curve = []
    stats: dict[str, float] = {}
    probe: dict[str, float] = {}  # the latest grad_probe split (methods.apo.probe)

    def log(step: int) -> None:  # exact metrics before the step's update
        if step % cfg.eval_every == 0 or step == cfg.steps:
            with torch.no_grad():
                row = _evaluate(
                    problem, torch.log_softmax(problem.logits(s, w), -1), cfg.pass_ks, 8
                )
            curve.append({"step": float(step), **row, **stats, **probe})

    def loss_fn(step: int) -> torch.Tensor:
        nonlocal stats
        log(step)
        xs = torch.randperm(cfg.n_prompts, generator=g)[: cfg.prompts_per_step]  # [B]
        with torch.no_grad():
            pi = torch.log_softmax(problem.logits(s, w)[xs], -1).exp()  # [B, A]
            acts = torch.multinomial(pi, cfg.group_size, replacement=True, generator=g)  # [B, G]
        batch = (xs, acts, top_ids, top_lp)
        if cfg.grad_probe and step % cfg.eval_every == 0:
            from methods.apo.probe import probe_step

            probe.update(probe_step(problem, cfg, arm, s, w, batch))  # logged at the next row
        pg, kl, stats = arm_loss(problem, cfg, arm, problem.logits(s, w), batch)
        return pg + kl

    train_steps(params, loss_fn, cfg.steps, optimizer=opt, desc="apo bandit arm")
    log(cfg.steps)
    return curve[-1], curve


def base_metrics(problem: BanditProblem, cfg: BanditConfig) -> dict[str, float]:
    """The reference policy's exact metrics (the untrained row of the table)."""
    return _evaluate(problem, problem.ref_logp, cfg.pass_ks, 8)


def main_arms(mc: Any) -> list[BanditArm]:
    """GRPO, GRPO+KL and KL-on-Wrong with the APO arm's K, then the APO arm itself."""
    k = mc.apo_arm.k
    return [
        BanditArm("grpo", lam=1.0, beta=0.0, k=k),
        BanditArm("grpo_kl", lam=1.0, beta=0.0, k=k, kl="all"),
        BanditArm("kl_on_wrong", lam=1.0, beta=0.0, k=k, kl="wrong"),
        mc.apo_arm,
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
    from common.tracking import pyplot, save_plot

    plt = pyplot()

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


def run_toy(run: Any) -> dict[str, float]:
    """``stage=toy``: every arm and seed of the bandit; results and curves into ``run.run_dir``."""
    from common.tracking import MetricsLogger, progress, write_results

    mc, cfg = run.method, run.cfg
    toy = mc.toy
    arms = main_arms(mc) + list(mc.extra_arms)
    run_dir = Path(run.run_dir)
    start = time.time()
    mlog = MetricsLogger(run_dir, use_wandb=str(cfg.get("logger")) == "wandb")
    finals: dict[str, list[dict[str, float]]] = {"base": []}
    curves: dict[str, list[list[dict[str, float]]]] = {}
    with torch_threads(mc.threads), contextlib.closing(mlog):
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


def arm_from_dict(d: dict) -> BanditArm:
    """Builds a :class:`BanditArm` with a strict field check."""
    names = {f.name for f in dataclasses.fields(BanditArm)}
    unknown = set(d) - names
    if unknown:
        raise ValueError(f"unknown arm fields {sorted(unknown)}; valid: {sorted(names)}")
    return BanditArm(**d)
