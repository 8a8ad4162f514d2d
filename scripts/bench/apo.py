"""Bench: the cost of APO over GRPO, measured within one run on CPU (not a test).

Two ratios:

1. Loss only: forward + backward of ``apo_policy_loss`` vs ``grpo_clipped_loss``, both starting from
   the same policy logits [B, T, V] (log-softmax included in both), so the ratio is the price
   of the K-wide gather and the anchor term.
2. Trainer: ``APOTrainer.train()`` vs ``trl.GRPOTrainer.train()`` for a few steps on a tiny Qwen2,
   same data and seed. The ratio includes APO's extra teacher-forced reference pass and the
   full-vocab log-softmax. With a tiny model it is an upper bound: generation, which both trainers
   pay, dominates at scale.

    python scripts/bench/apo.py --B 8 --T 256 --V 8192 --steps 3 --repeats 3
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from methods.apo import apo_policy_loss, grpo_clipped_loss, topk_from_logits  # noqa: E402


def _loss_times(b: int, t: int, v: int, k: int, repeats: int) -> tuple[float, float]:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(b, t, v, generator=g)
    ids, lp = topk_from_logits(logits + 0.5 * torch.randn(b, t, v, generator=g), k)
    sampled = torch.randint(0, v, (b, t), generator=g)
    adv = torch.randn(b, generator=g)
    mask = torch.ones(b, t)
    old = torch.log_softmax(logits, -1).gather(-1, sampled[..., None]).squeeze(-1)

    def apo():
        z = logits.clone().requires_grad_(True)
        loss, _ = apo_policy_loss(torch.log_softmax(z, -1), old, sampled, adv, mask, ids, lp)
        loss.backward()

    def grpo():
        z = logits.clone().requires_grad_(True)
        logp = torch.log_softmax(z, -1).gather(-1, sampled[..., None]).squeeze(-1)
        grpo_clipped_loss(logp, old, adv, mask).backward()

    times = {"apo": [], "grpo": []}
    for _ in range(repeats):
        for name, fn in (("grpo", grpo), ("apo", apo)):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return statistics.median(times["apo"]), statistics.median(times["grpo"])


def _trainer_times(steps: int, repeats: int) -> tuple[float, float]:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from common.rl import cpu_grpo_kwargs
    from common.tiny import tiny_causal_lm
    from methods.apo import APOConfig, APOTrainer

    model, tok = tiny_causal_lm(seed=0)
    data = Dataset.from_dict({"prompt": ["1+1=", "2+3=", "hello", "abc"] * 4})

    def reward(completions, **kw):
        return [len(set(c)) / 10.0 for c in completions]

    def once(trainer_cls, cfg_cls):
        torch.manual_seed(0)
        kw = cpu_grpo_kwargs(
            output_dir="/tmp/apo_bench", max_steps=steps, per_device_train_batch_size=16,
            num_generations=4, max_completion_length=32,
        )  # fmt: skip
        tr = trainer_cls(
            model=copy.deepcopy(model), reward_funcs=reward, args=cfg_cls(**kw),
            train_dataset=data, processing_class=tok,
        )  # fmt: skip
        start = time.perf_counter()
        tr.train()
        return time.perf_counter() - start

    times = {"apo": [], "grpo": []}
    for _ in range(repeats):
        times["grpo"].append(once(GRPOTrainer, GRPOConfig))
        times["apo"].append(once(APOTrainer, APOConfig))
    return statistics.median(times["apo"]), statistics.median(times["grpo"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--B", type=int, default=8)
    p.add_argument("--T", type=int, default=256)
    p.add_argument("--V", type=int, default=8192)
    p.add_argument("--K", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-trainer", action="store_true")
    a = p.parse_args()
    torch.manual_seed(0)
    print("command: python " + " ".join(sys.argv))
    apo_s, grpo_s = _loss_times(a.B, a.T, a.V, a.K, a.repeats)
    print("| measurement | apo (s) | grpo (s) | apo / grpo |")
    print("|---|---|---|---|")
    print(
        f"| loss fwd+bwd, B={a.B} T={a.T} V={a.V} K={a.K} | {apo_s:.4f} | {grpo_s:.4f} | "
        f"{apo_s / grpo_s:.2f} |"
    )
    if not a.skip_trainer:
        apo_t, grpo_t = _trainer_times(a.steps, a.repeats)
        print(
            f"| trainer.train(), tiny Qwen2, {a.steps} steps, 16 completions x 32 tokens | "
            f"{apo_t:.2f} | {grpo_t:.2f} | {apo_t / grpo_t:.2f} |"
        )


if __name__ == "__main__":
    main()
