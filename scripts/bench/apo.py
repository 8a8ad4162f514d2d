"""APO loss vs GRPO loss from the same policy logits: peak memory and time (issue 33 point 3).

Both start from the same leaf logits [B, T, V] (fp32, allocated before the measurement, so not
counted) and run forward + backward of the loss:

* GRPO: TRL's ``selective_log_softmax`` at the sampled tokens (what ``trl.GRPOTrainer`` uses) and the
  clipped surrogate ``grpo_clipped_loss``;
* APO: ``policy_logps_at`` (the sampled token + the reference Top-K through the same TRL function)
  and ``apo_policy_loss(..., gathered=True)``, as ``APOTrainer`` computes it;
* APO dense (before issue 33): ``log_softmax`` over the full vocabulary of every position, then the
  loss (informative row).

Peak memory: the torch profiler's memory timeline (tensor allocations during the call, see
``_harness.peak_memory``). Threshold: APO ≤ 1.25× GRPO at V = 151,936, B·T = 4×512. The trainer-level
APO vs GRPO ratio is in the ``rl_trainers`` bench.
"""

from __future__ import annotations

import torch
from trl.trainer.utils import selective_log_softmax

from methods.apo import apo_policy_loss, grpo_clipped_loss
from methods.apo.loss import policy_logps_at
from scripts.bench._harness import peak_memory, row, spread_ratio, time_pair


def run(quick: bool = False) -> dict:
    b, t, v, k, reps = (2, 16, 2048, 8, 1) if quick else (4, 512, 151_936, 8, 3)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(b, t, v, generator=g)
    ids = torch.randint(0, v, (b, t, k), generator=g)
    ref_lp = torch.log_softmax(torch.randn(b, t, k, generator=g), -1) - 1.0
    sampled = torch.randint(0, v, (b, t), generator=g)
    adv = torch.randn(b, generator=g)
    mask = torch.ones(b, t)
    with torch.no_grad():
        old = selective_log_softmax(logits, sampled) - 0.01

    def grpo():
        z = logits.detach().requires_grad_(True)
        grpo_clipped_loss(selective_log_softmax(z, sampled), old, adv, mask).backward()

    def apo():
        z = logits.detach().requires_grad_(True)
        ls, lk = policy_logps_at(z, sampled, ids)
        apo_policy_loss(lk, old, sampled, adv, mask, ids, ref_lp, gathered=True, logp_sampled=ls)[
            0
        ].backward()

    def apo_dense():
        z = logits.detach().requires_grad_(True)
        apo_policy_loss(torch.log_softmax(z, -1), old, sampled, adv, mask, ids, ref_lp)[
            0
        ].backward()

    mem = {
        name: peak_memory(fn) for name, fn in (("grpo", grpo), ("apo", apo), ("dense", apo_dense))
    }
    ta, tg, _, q1, q3 = time_pair(apo, grpo, reps)
    td, tg2, _, d1, d3 = time_pair(apo_dense, grpo, max(1, reps - 1))
    mib = 2**20
    size = f"B={b}, T={t}, V={v}, K={k}"
    return {
        "title": "APO loss vs GRPO loss (memory, time)",
        "command": "python -m scripts.bench apo",
        "rows": [
            row(
                f"peak loss MiB, {size}",
                mem["apo"] / mib,
                mem["grpo"] / mib,
                "one profiled call",
                1.25,
            ),
            row(f"loss fwd+bwd s, {size}", ta, tg, spread_ratio(q1, q3)),
            row(
                f"before: dense log-softmax peak MiB, {size}",
                mem["dense"] / mib,
                mem["grpo"] / mib,
                "one profiled call",
            ),
            row(f"before: dense log-softmax s, {size}", td, tg2, spread_ratio(d1, d3)),
        ],
        "notes": f"The logits themselves ({b * t * v * 4 / mib:.0f} MiB fp32) exist before the call "
        "and are not counted; the gradient w.r.t. them is (both losses must produce it).",
    }
