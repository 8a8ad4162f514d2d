"""Bench: MaxRLTrainer vs plain trl.GRPOTrainer, same tiny model, data and seed (CPU).

Measures the wall time of ``trainer.train()`` for a few steps (trainer construction excluded),
alternating the two trainers over several repeats, and prints the median overhead ratio. The
MaxRL hook adds one reshape and one [B, N] advantage computation per generation batch, so the
goal is a ratio <= 1.05.

    python scripts/bench/maxrl.py --steps 4 --repeats 5
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from common.rl import cpu_grpo_kwargs  # noqa: E402
from common.tiny import tiny_causal_lm  # noqa: E402
from methods.maxrl import MaxRLConfig, MaxRLTrainer  # noqa: E402


def _reward(completions, **kwargs):
    return [float(len(set(c)) % 2) for c in completions]


def _time(cls, cfg_cls, model, tok, steps: int, out: str) -> float:
    args = cfg_cls(
        **cpu_grpo_kwargs(
            output_dir=out,
            max_steps=steps,
            per_device_train_batch_size=16,
            num_generations=4,
            max_completion_length=16,
            loss_type="dapo",
        )
    )
    data = Dataset.from_dict({"prompt": [f"{i}+{i}=" for i in range(64)]})
    trainer = cls(
        model=copy.deepcopy(model),
        reward_funcs=_reward,
        args=args,
        train_dataset=data,
        processing_class=tok,
    )
    start = time.perf_counter()
    trainer.train()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    a = parser.parse_args()
    torch.set_num_threads(a.threads)
    model, tok = tiny_causal_lm("qwen2", seed=0)
    grpo, maxrl = [], []
    _time(GRPOTrainer, GRPOConfig, model, tok, 1, "/tmp/bench_maxrl_warm")  # warm-up
    for _ in range(a.repeats):
        grpo.append(_time(GRPOTrainer, GRPOConfig, model, tok, a.steps, "/tmp/bench_maxrl_g"))
        maxrl.append(_time(MaxRLTrainer, MaxRLConfig, model, tok, a.steps, "/tmp/bench_maxrl_m"))
    g, m = statistics.median(grpo), statistics.median(maxrl)
    print("| trainer | median s/step | steps x repeats |")
    print("|---|---|---|")
    print(f"| GRPOTrainer (trl) | {g:.4f} | {a.steps} x {a.repeats} |")
    print(f"| MaxRLTrainer | {m:.4f} | {a.steps} x {a.repeats} |")
    print(f"overhead ratio MaxRL / GRPO = {m / g:.3f}")


if __name__ == "__main__":
    main()
