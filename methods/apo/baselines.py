"""The paper's KL baselines that need code of their own: KL-on-Wrong.

"Anchored Policy Optimization" (arXiv 2602.05717) compares APO with GRPO, GRPO + KL and
"KL-on-Wrong", a KL penalty applied only on negative samples (README of the official code,
github.com/1BIMU/APO_OFFICAL; its exact form is not known here).

Shape letters: B sequences, T completion tokens.
"""

from __future__ import annotations

import torch

from methods.apo.checks import broadcast_advantages, check_tensor

__all__ = ["kl_on_wrong_penalty"]


def kl_on_wrong_penalty(
    logp_sampled: torch.Tensor,
    ref_logp_sampled: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    coef: float,
) -> torch.Tensor:
    """Per-token "KL-on-Wrong" penalty: the k3 KL estimator on negative-advantage tokens only.

    Baseline of the paper's experiments (form not given; k3 as TRL, our inference): coef · (exp(q − p) − (q − p) − 1) with p = log π_θ(y_t),
    q = log π_ref(y_t), applied where A < 0 and the mask is on, zero elsewhere. Add it to the
    per-token policy loss before aggregation (as TRL does for its β·KL term).

    Args:
        logp_sampled: policy log-probs of the sampled tokens, [B, T].
        ref_logp_sampled: reference log-probs of the sampled tokens, [B, T].
        advantages: [B] or [B, T].
        mask: completion mask, [B, T].
        coef: KL coefficient ≥ 0.

    Returns:
        Per-token penalty [B, T].
    """
    if coef < 0:
        raise ValueError(f"coef must be >= 0, got {coef}")
    check_tensor("logp_sampled", logp_sampled, (2,))
    if ref_logp_sampled.shape != logp_sampled.shape or mask.shape != logp_sampled.shape:
        raise ValueError(
            "logp_sampled, ref_logp_sampled and mask must share shape [B, T], got "
            f"{tuple(logp_sampled.shape)}, {tuple(ref_logp_sampled.shape)}, {tuple(mask.shape)}"
        )
    adv = broadcast_advantages(advantages, (logp_sampled.shape[0], logp_sampled.shape[1]))
    d = ref_logp_sampled - logp_sampled  # [B, T]
    k3 = torch.exp(d) - d - 1.0  # [B, T], >= 0
    on = (adv < 0) & (mask > 0)  # [B, T]
    return torch.where(on, coef * k3, 0.0)
