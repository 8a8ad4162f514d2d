"""Toy A1 of the spec (§6): a shared-parameter contextual bandit that shows Recursive Space Contraction.

P prompts, A actions. Policy logits are ``s + E_x W`` with a shared bias ``s`` [A] and a shared map
``W`` [D, A] (sharing is what lets easy prompts starve hard ones). The reference π_ref is the initial
policy. Easy prompts accept the reference argmax and one action of reference ranks 2-8; hard prompts
accept a single action of reference ranks 3-8: inside the Top-8 safe manifold, but rare. Each step
samples a batch of prompts and a group of G actions per prompt, computes GRPO advantages and takes
one on-policy SGD step on ``(s, W)`` with the arm's loss. Every arm calls the library loss
:func:`methods.apo.apo_policy_loss` with T = 1 and V = A, so the toy exercises the real code.

Arms (one shared hyper-parameter setting): ``grpo`` (λ = 1, β = 0), ``grpo_kl`` (+ exact
KL(π‖π_ref) per sampled prompt), ``kl_on_wrong`` (the same KL only on negative-advantage samples)
and ``apo`` (λ, β, K from the config). Extra arms: ``apo_beta<β>`` (the paper form with larger β) and
``apo_<form>_beta<β>`` (the non-paper diagnostic anchor forms of spec §9.7, labelled as such).

Metrics are exact (no sampling): p_x = Σ_{a valid} π(a|x), Pass@k = mean_x [1 − (1 − p_x)^k], split
into easy and hard prompts, and the safe-manifold mass Σ_{TopK(π_ref)} π.

Shape letters: P prompts, A actions, D embedding size, B prompts per step, G group size.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

import torch

from methods.apo.loss import ANCHOR_FORMS, ANCHOR_RATIO_TO, CLIP_MODES, apo_policy_loss

logger = logging.getLogger(__name__)

__all__ = [
    "BanditArm",
    "BanditConfig",
    "BanditProblem",
    "arm_from_dict",
    "base_metrics",
    "make_bandit",
    "run_bandit_arm",
]


@dataclass
class BanditConfig:
    """Toy A1 sizes and training settings (spec §6).

    Attributes:
        n_actions: A, the vocabulary of the bandit.
        n_prompts: P.
        emb_dim: D; prompt embeddings are N(0, 1/D).
        frac_easy: share of easy prompts.
        steps: SGD steps per arm.
        prompts_per_step: B.
        group_size: G samples per prompt.
        lr: SGD step size on (s, W).
        kl_coef: coefficient of the exact KL for ``grpo_kl`` and ``kl_on_wrong``.
        adv_eps: ε in A = (R − mean) / (std + ε) (std with Bessel's correction).
        eval_every: steps between evaluations (curves).
        pass_ks: the k of the exact Pass@k metrics.
    """

    n_actions: int = 16
    n_prompts: int = 200
    emb_dim: int = 8
    frac_easy: float = 0.7
    steps: int = 600
    prompts_per_step: int = 32
    group_size: int = 8
    lr: float = 0.5
    kl_coef: float = 0.05
    adv_eps: float = 1e-6
    eval_every: int = 25
    pass_ks: list[int] = field(default_factory=lambda: [1, 8, 64])

    def __post_init__(self) -> None:
        if self.n_actions < 9:
            raise ValueError(f"n_actions must be >= 9 (ranks 2-8 must exist), got {self.n_actions}")
        if not 0 < self.frac_easy < 1:
            raise ValueError(f"frac_easy must be in (0, 1), got {self.frac_easy}")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (group std), got {self.group_size}")
        if self.prompts_per_step > self.n_prompts:
            raise ValueError(
                f"prompts_per_step ({self.prompts_per_step}) must be <= n_prompts ({self.n_prompts})"
            )


@dataclass
class BanditArm:
    """One training arm: the loss settings for :func:`run_bandit_arm`.

    Attributes:
        name: the arm's label in tables and plots.
        lam: push coefficient λ (1.0 and ``beta=0`` give GRPO).
        beta: pull coefficient β.
        k: safe-manifold size K.
        kl: ``"none"``, ``"all"`` (GRPO+KL) or ``"wrong"`` (KL-on-Wrong).
        clip_mode: see :data:`methods.apo.CLIP_MODES`.
        anchor_form: see :data:`methods.apo.ANCHOR_FORMS` (``paper_linear`` is the paper's).
        anchor_ratio_to: ``ref`` or ``old`` (:data:`methods.apo.ANCHOR_RATIO_TO`): the policy the
            virtual anchor ratio is taken against (the source is ambiguous; both are offered).
    """

    name: str
    lam: float = 1.0
    beta: float = 0.0
    k: int = 8
    kl: str = "none"
    clip_mode: str = "rectified"
    anchor_form: str = "paper_linear"
    anchor_ratio_to: str = "ref"

    def __post_init__(self) -> None:
        if self.anchor_ratio_to not in ANCHOR_RATIO_TO:
            raise ValueError(
                f"anchor_ratio_to must be one of {list(ANCHOR_RATIO_TO)}, got "
                f"{self.anchor_ratio_to!r}"
            )
        if self.kl not in ("none", "all", "wrong"):
            raise ValueError(f"kl must be 'none', 'all' or 'wrong', got {self.kl!r}")
        if self.clip_mode not in CLIP_MODES:
            raise ValueError(f"clip_mode must be one of {list(CLIP_MODES)}, got {self.clip_mode!r}")
        if self.anchor_form not in ANCHOR_FORMS:
            raise ValueError(
                f"anchor_form must be one of {list(ANCHOR_FORMS)}, got {self.anchor_form!r}"
            )


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
    """Builds the toy instance of spec §6 from a seed (prompts, reference, valid sets)."""
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
    for x in range(p):
        if hard[x]:  # one action among reference ranks 3-8 (0-based 2..7)
            valid[x, ranks[x, int(torch.randint(2, 8, (1,), generator=g))]] = True
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


def _grpo_advantages(rewards: torch.Tensor, eps: float) -> torch.Tensor:
    mean = rewards.mean(-1, keepdim=True)  # [B, 1]
    std = rewards.std(-1, keepdim=True)  # [B, 1], Bessel-corrected
    return (rewards - mean) / (std + eps)  # [B, G]


def run_bandit_arm(
    problem: BanditProblem, cfg: BanditConfig, arm: BanditArm, seed: int
) -> tuple[dict[str, float], list[dict[str, float]]]:
    """Trains one arm from π_ref and returns (final metrics, curve of evaluations).

    The sampling stream depends only on ``seed``, so arms see the same prompt order.
    """
    g = torch.Generator().manual_seed(10_000 + seed)
    s = problem.s0.clone().requires_grad_(True)
    w = problem.w0.clone().requires_grad_(True)
    opt = torch.optim.SGD([s, w], lr=cfg.lr)
    ref_logp = problem.ref_logp  # [P, A]
    top_lp, top_ids = ref_logp.topk(arm.k, dim=-1)  # [P, K]
    curve = []
    stats: dict[str, float] = {}
    for step in range(cfg.steps + 1):
        if step % cfg.eval_every == 0 or step == cfg.steps:
            with torch.no_grad():
                row = _evaluate(
                    problem, torch.log_softmax(problem.logits(s, w), -1), cfg.pass_ks, 8
                )
            curve.append({"step": float(step), **row, **stats})
        if step == cfg.steps:
            break
        xs = torch.randperm(cfg.n_prompts, generator=g)[: cfg.prompts_per_step]  # [B]
        logits = problem.logits(s, w)[xs]  # [B, A]
        logp = torch.log_softmax(logits, -1)  # [B, A]
        with torch.no_grad():
            acts = torch.multinomial(logp.exp(), cfg.group_size, replacement=True, generator=g)
            rewards = problem.valid[xs[:, None], acts].double()  # [B, G]
            adv = _grpo_advantages(rewards, cfg.adv_eps)  # [B, G]
        n = xs.numel() * cfg.group_size
        logp_seq = logp.repeat_interleave(cfg.group_size, 0)[:, None, :]  # [B·G, 1, A]
        sampled = acts.reshape(n, 1)  # [B·G, 1]
        old = logp_seq.detach().gather(-1, sampled[..., None]).squeeze(-1)  # on-policy
        loss, stats = apo_policy_loss(
            logp_seq,
            old,
            sampled,
            adv.reshape(n),
            torch.ones(n, 1, dtype=torch.float64),
            top_ids[xs].repeat_interleave(cfg.group_size, 0)[:, None, :],
            top_lp[xs].repeat_interleave(cfg.group_size, 0)[:, None, :],
            lam=arm.lam,
            beta=arm.beta,
            clip_mode=arm.clip_mode,
            anchor_form=arm.anchor_form,
            anchor_ratio_to=arm.anchor_ratio_to,
        )
        if arm.kl != "none":
            kl = (logp.exp() * (logp - ref_logp[xs])).sum(-1)  # [B], exact KL(π‖π_ref)
            kl = kl.repeat_interleave(cfg.group_size)  # [B·G]
            if arm.kl == "wrong":
                kl = kl * (adv.reshape(n) < 0)
            loss = loss + cfg.kl_coef * kl.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return curve[-1], curve


def base_metrics(problem: BanditProblem, cfg: BanditConfig) -> dict[str, float]:
    """The reference policy's exact metrics (the untrained row of the table)."""
    return _evaluate(problem, problem.ref_logp, cfg.pass_ks, 8)


def arm_from_dict(d: dict) -> BanditArm:
    """Builds a :class:`BanditArm` with a strict field check."""
    names = {f.name for f in dataclasses.fields(BanditArm)}
    unknown = set(d) - names
    if unknown:
        raise ValueError(f"unknown arm fields {sorted(unknown)}; valid: {sorted(names)}")
    return BanditArm(**d)
