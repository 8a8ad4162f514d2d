"""Objective-level theory of MaxRL: weight functions, truncated likelihood, estimator orders.

Implements §2-§4 of *Maximum Likelihood Reinforcement Learning* (arXiv:2602.02710): every method's
population gradient is ``E_x[w(p) ∇p]`` with a per-input weight of the pass rate p (Table 2, App. C);
the truncated objective ``J^(T) = −Σ_{k≤T} (1−p)^k / k`` interpolates between RL (T=1) and maximum
likelihood (T→∞, Eqs. 5-7). :func:`exact_expected_gradient` computes the expectation of the paper's
sampled estimators (Eq. 9, Eq. 10, Alg. 1) by enumerating every outcome for a small categorical
policy, which is how Theorem 2 is checked in the tests.
"""

from __future__ import annotations

import itertools
from typing import Literal

import torch
from torch import Tensor

__all__ = [
    "K0_POLICIES",
    "effective_order",
    "exact_expected_gradient",
    "truncated_objective",
    "weight_fn",
]

K0_POLICIES = ("drop_both", "keep_cv", "plain")
"""How an estimator treats a group with no success (K = 0): ``plain`` = Eq. 9 (no baseline),
``keep_cv`` = Eq. 10 (the −V_N control variate is kept), ``drop_both`` = Alg. 1 (what is trained)."""


def _check_p(p: Tensor) -> Tensor:
    p = torch.as_tensor(p, dtype=torch.float64)
    if ((p < 0) | (p > 1)).any() or not torch.isfinite(p).all():
        raise ValueError("p must lie in [0, 1]")
    return p


def weight_fn(
    p: Tensor, method: Literal["rl", "grpo", "maxrl", "ml"], T: int | None = None
) -> Tensor:
    """Population weight w(p) with ``∇J = E_x[w(p) ∇p]`` (Table 2, App. C).

    ``rl``: 1; ``grpo``: 1/sqrt(p(1−p)); ``maxrl`` of order T: (1 − (1−p)^T)/p = Σ_{k≤T}(1−p)^{k−1}
    (equal to T at p = 0); ``ml``: 1/p.

    Raises:
        ValueError: unknown method, p outside [0, 1], or ``method="maxrl"`` without T >= 1.
    """
    p = _check_p(p)
    if method == "rl":
        return torch.ones_like(p)
    if method == "grpo":
        return 1.0 / torch.sqrt(p * (1 - p))
    if method == "ml":
        return 1.0 / p
    if method == "maxrl":
        if T is None or T < 1:
            raise ValueError(f"weight_fn(method='maxrl') needs an order T >= 1, got T={T}")
        q = 1 - p
        safe = torch.where(p > 0, p, torch.ones_like(p))
        # -expm1(T·log1p(-p)) = 1 - (1-p)^T without cancellation for small p
        w = -torch.expm1(T * torch.log1p(-p)) / safe
        return torch.where(p > 0, w, torch.full_like(q, float(T)))
    raise ValueError(f"method must be one of 'rl', 'grpo', 'maxrl', 'ml', got {method!r}")


def truncated_objective(p: Tensor, T: int) -> Tensor:
    """Order-T truncated log-likelihood ``J^(T)(p) = −Σ_{k=1}^{T} (1−p)^k / k`` (Eq. 6); → log p."""
    if T < 1:
        raise ValueError(f"T must be >= 1, got {T}")
    p = _check_p(p)
    k = torch.arange(1, T + 1, dtype=torch.float64)  # [T]
    return -(((1 - p).unsqueeze(-1) ** k) / k).sum(-1)


def effective_order(n_rollouts: int, k0_policy: Literal["drop_both", "keep_cv", "plain"]) -> int:
    """Truncation order T that an N-rollout estimator is unbiased for (Theorem 2 and its Alg. 1 variant).

    ``plain`` (Eq. 9) and ``keep_cv`` (Eq. 10): T = N. ``drop_both`` (Alg. 1, the trained
    advantage): T = N − 1, because dropping the control variate on all-fail groups removes
    ``E[V_N·1{K=0}] = −(1−p)^{N−1}∇p``; N = 1 then gives a zero gradient.
    """
    if n_rollouts < 1:
        raise ValueError(f"n_rollouts must be >= 1, got {n_rollouts}")
    if k0_policy not in K0_POLICIES:
        raise ValueError(f"k0_policy must be one of {K0_POLICIES}, got {k0_policy!r}")
    return n_rollouts - 1 if k0_policy == "drop_both" else n_rollouts


def exact_expected_gradient(
    logits: Tensor, n_rollouts: int, k0_policy: str, correct: int = 0
) -> Tensor:
    """Exact E[ĝ_N] of a MaxRL estimator for a categorical policy, by enumerating all outcomes.

    The policy is ``softmax(logits)`` over A actions; action ``correct`` earns reward 1. For each of
    the A^N rollout sequences the estimator (Eq. 9, Eq. 10 or Alg. 1 per ``k0_policy``) is formed
    from the score functions ``S_i = ∇_logits log π(a_i)`` and weighted by its probability.

    Args:
        logits: ``[A]`` float64 logits.
        n_rollouts: N (keep A^N small).
        k0_policy: One of :data:`K0_POLICIES`.
        correct: Index of the rewarded action.

    Returns:
        ``[A]`` expected gradient with respect to the logits.
    """
    if k0_policy not in K0_POLICIES:
        raise ValueError(f"k0_policy must be one of {K0_POLICIES}, got {k0_policy!r}")
    logits = logits.to(torch.float64)
    probs = torch.softmax(logits, dim=0)  # [A]
    a = probs.numel()
    scores = torch.eye(a, dtype=torch.float64) - probs  # [A, A]: row i = ∇ log π(i)
    total = torch.zeros(a, dtype=torch.float64)
    n = n_rollouts
    for seq in itertools.product(range(a), repeat=n):
        prob = torch.prod(probs[list(seq)])
        r = torch.tensor([float(s == correct) for s in seq], dtype=torch.float64)  # [N]
        s = scores[list(seq)]  # [N, A]
        k = r.sum()
        if k > 0:
            if k0_policy == "plain":
                g = (r / k) @ s
            else:  # Eq. 10 and Alg. 1 coincide when K >= 1
                g = (r / k - 1.0 / n) @ s
        else:
            g = -s.mean(0) if k0_policy == "keep_cv" else torch.zeros(a, dtype=torch.float64)
        total += prob * g
    return total
