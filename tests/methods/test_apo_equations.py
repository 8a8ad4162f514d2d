"""APO's per-token loss against an independent, element-by-element closed form.

Written for issue 32 point 4: with an asymmetric clip range (ε_low ≠ ε_high) and ratios spread over
every clipping regime, a swapped clip bound, a wrong min/max, a sign of the anchor term or a wrong
anchor normalisation changes some token's loss. The reference below is plain Python over scalars
(loops over the Top-K slots), so it shares no tensor code with ``methods.apo``.
"""

from __future__ import annotations

import math

import pytest
import torch

from methods.apo import apo_per_token_loss
from methods.apo.topk import topk_from_logits

B, T, V, K = 2, 48, 7, 3
EPS_LOW, EPS_HIGH, DUAL, LAM, BETA = 0.1, 0.35, 2.5, 1.05, 0.4


def _case():
    g = torch.Generator().manual_seed(3)
    logits = 1.5 * torch.randn(B, T, V, generator=g, dtype=torch.float64)
    ref_logits = logits + 0.8 * torch.randn(B, T, V, generator=g, dtype=torch.float64)
    logp = torch.log_softmax(logits, -1)
    sampled = torch.randint(0, V, (B, T), generator=g)
    # log-ratios spread over [-1.3, 1.3]: every clip regime is visited
    log_ratio = torch.linspace(-1.3, 1.3, T, dtype=torch.float64).expand(B, T)
    old_logp = logp.gather(-1, sampled[..., None]).squeeze(-1) - log_ratio
    ids, lp_ref = topk_from_logits(ref_logits, K)
    adv = torch.tensor([-0.7, 0.9], dtype=torch.float64)
    return logp, old_logp, sampled, ids, lp_ref, adv


def _expected(logp, old_logp, sampled, ids, lp_ref, adv, clip_mode):
    """ℓ per token from scalars: r, r_anchor over S = TopK \\ {y}, ρ, clip, dual clip."""
    out = torch.zeros(B, T, dtype=torch.float64)
    lo, hi = 1 - EPS_LOW, 1 + EPS_HIGH
    for b in range(B):
        a = float(adv[b])
        for t in range(T):
            y = int(sampled[b, t])
            r = math.exp(float(logp[b, t, y]) - float(old_logp[b, t]))
            slots = [k for k in range(K) if int(ids[b, t, k]) != y]
            num = sum(math.exp(float(logp[b, t, int(ids[b, t, k])])) for k in slots)
            z = sum(math.exp(float(lp_ref[b, t, k])) for k in slots)
            r_anchor = num / z
            if a >= 0:  # plain clipped surrogate: ℓ = −A·min(r, clip(r))
                out[b, t] = -a * min(r, min(max(r, lo), hi))
                continue
            rho = LAM * r - BETA * r_anchor
            if clip_mode == "rectified":
                rho_c = min(max(rho, lo), hi)
            else:  # token_only: λ·clip(r) − β·r_anchor
                rho_c = LAM * min(max(r, lo), hi) - BETA * r_anchor
            loss = -a * max(rho, rho_c)  # −min(Aρ, Aρ_c) with A < 0
            out[b, t] = min(loss, -a * DUAL)
    return out


@pytest.mark.parametrize("clip_mode", ["rectified", "token_only"])
def test_per_token_loss_equals_scalar_closed_form_with_asymmetric_clip(clip_mode):
    logp, old_logp, sampled, ids, lp_ref, adv = _case()
    mask = torch.ones(B, T, dtype=torch.float64)
    per_token, stats = apo_per_token_loss(
        logp, old_logp, sampled, adv, mask, ids, lp_ref, lam=LAM, beta=BETA,
        eps_low=EPS_LOW, eps_high=EPS_HIGH, dual_clip=DUAL, clip_mode=clip_mode,
    )  # fmt: skip
    expected = _expected(logp, old_logp, sampled, ids, lp_ref, adv, clip_mode)
    torch.testing.assert_close(per_token, expected, rtol=1e-12, atol=1e-12)
    # the case is informative: both clip bounds and the dual clip are hit
    assert stats["clip_low_frac"] > 0 and stats["clip_high_frac"] > 0
    assert stats["dual_clip_frac"] > 0


def test_clip_bounds_are_not_interchangeable():
    """The same inputs with ε_low and ε_high swapped give a different loss (so the test above
    distinguishes them)."""
    logp, old_logp, sampled, ids, lp_ref, adv = _case()
    mask = torch.ones(B, T, dtype=torch.float64)
    kw = dict(lam=LAM, beta=BETA, dual_clip=DUAL)
    a, _ = apo_per_token_loss(
        logp, old_logp, sampled, adv, mask, ids, lp_ref, eps_low=EPS_LOW, eps_high=EPS_HIGH, **kw
    )
    b, _ = apo_per_token_loss(
        logp, old_logp, sampled, adv, mask, ids, lp_ref, eps_low=EPS_HIGH, eps_high=EPS_LOW, **kw
    )
    assert (a - b).abs().max() > 1e-3
