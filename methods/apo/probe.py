"""Where one toy step moves the hard actions: the anchor, KL and policy-gradient parts of the update.

The diagnosis of toy A1 (docs/methods/apo.md, "Diagnosis") asks whether APO's pull (the β anchor
term of ratio rectification, arXiv 2602.05717 as restated second-hand) reaches the rare valid
action of a hard prompt at all. For one sampled batch it splits the arm's loss gradient into

- ``anchor``: the gradient through the anchor term only (the full APO loss minus the same loss with
  the policy log-probs at the Top-K ids detached, :func:`methods.apo.toy.arm_loss`; the values and
  therefore the clipping are identical, so the split is exact),
- ``kl``: the KL penalty of the GRPO+KL arms,
- ``pg``: everything else (the clipped policy-gradient surrogate with λ),

and reports, per part, (1) the first-order change of J = mean_{hard x} log p_valid(x) that one SGD
step of that part causes through the shared parameters (s, W), −lr·⟨g_part, ∇J⟩, and (2) the part's
share of the gradient on the valid action's logit of the batch's own hard prompts. It also logs the
two preconditions the mechanism needs: the share of hard prompts whose group has all-equal rewards
(zero advantage: APO adds nothing there) and the mean p_valid of hard prompts (the pull of the π_ref
reading on an anchor token scales with its current probability).

Shape letters: P prompts, A actions, B prompts per step, G group size. Our diagnostic, not the paper's.
"""

from __future__ import annotations

import torch

from methods.apo.config import BanditArm, BanditConfig

__all__ = ["PROBE_KEYS", "probe_step"]

PROBE_KEYS: tuple[str, ...] = (
    "probe/drift_pg",
    "probe/drift_anchor",
    "probe/drift_kl",
    "probe/anchor_logit_share",
    "probe/kl_logit_share",
    "probe/hard_zero_adv_frac",
    "probe/hard_p_valid",
)
"""What :func:`probe_step` returns: ``drift_<part>`` is −lr·⟨g_part, ∇J⟩ (nats of mean hard
log p_valid per step); ``<part>_logit_share`` is Σ|∂L_part/∂z_{x,a*}| / Σ_parts over the batch's hard
prompts x and their valid action a*; ``hard_zero_adv_frac`` the share of the batch's hard prompts
whose G rewards are all equal; ``hard_p_valid`` the mean p_valid over every hard prompt."""


def probe_step(
    problem: object,
    cfg: BanditConfig,
    arm: BanditArm,
    s: torch.Tensor,
    w: torch.Tensor,
    batch: tuple[torch.Tensor, ...],
) -> dict[str, float]:
    """The split of one step's update into its policy-gradient, anchor (the paper's ratio
    rectification, restated second-hand: methods/apo/loss.py) and KL parts (our diagnosis probe; see
    the module docstring); consumes no random numbers.

    Args:
        problem: the :class:`methods.apo.toy.BanditProblem`.
        cfg: the toy config (``lr``, ``group_size``).
        arm: the arm being trained.
        s: shared bias [A] (a leaf that requires grad).
        w: shared map [D, A].
        batch: ``(xs [B], acts [B, G], top_ids [P, K], top_lp [P, K])`` as in
            :func:`methods.apo.toy.arm_loss`.

    Returns:
        The floats named in :data:`PROBE_KEYS`.
    """
    from methods.apo.toy import arm_loss

    logits = problem.logits(s, w)  # [P, A]
    full, kl, _ = arm_loss(problem, cfg, arm, logits, batch)
    no_anchor, _, _ = arm_loss(problem, cfg, arm, logits, batch, detach_anchor=True)
    parts = {"pg": no_anchor, "anchor": full - no_anchor, "kl": kl}
    hard = problem.hard  # [P]
    logp = torch.log_softmax(logits, -1)  # [P, A]
    log_pv = torch.logsumexp(logp.masked_fill(~problem.valid, -torch.inf), -1)  # [P]
    j_grad = torch.autograd.grad(log_pv[hard].mean(), [s, w], retain_graph=True)
    xs, acts = batch[0], batch[1]
    hard_b = xs[hard[xs]]  # hard prompts of the batch
    out: dict[str, float] = {}
    logit_mag: dict[str, float] = {}
    for name, part in parts.items():
        if not part.requires_grad:  # e.g. no KL term, or β = 0
            out[f"probe/drift_{name}"] = 0.0
            logit_mag[name] = 0.0
            continue
        gs, gw, gz = torch.autograd.grad(part, [s, w, logits], retain_graph=True)
        dot = (gs * j_grad[0]).sum() + (gw * j_grad[1]).sum()
        out[f"probe/drift_{name}"] = float(-cfg.lr * dot)
        logit_mag[name] = float((gz[hard_b] * problem.valid[hard_b]).sum(-1).abs().sum())
    total = sum(logit_mag.values())
    for name in ("anchor", "kl"):
        out[f"probe/{name}_logit_share"] = logit_mag[name] / total if total > 0 else 0.0
    with torch.no_grad():
        rewards = problem.valid[xs[:, None], acts]  # [B, G]
        flat = (rewards.all(-1) | ~rewards.any(-1))[hard[xs]]  # all-equal groups of hard prompts
        out["probe/hard_zero_adv_frac"] = float(flat.double().mean()) if flat.numel() else 0.0
        out["probe/hard_p_valid"] = float(log_pv[hard].exp().mean())
    return out
