"""Bench: the simulator's sliding window bounds the context (official demo loop), CPU, tiny model.

Rolls a random-init tiny Qwen2 world model for ``--steps`` steps with ``window=None`` (full history)
and ``window=W`` and reports the prompt length (tokens) at the last step and the mean wall time per
step. With a window the prompt length stays bounded, while the full history grows linearly.

    python scripts/bench/webworld.py --steps 30 --window 5
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from common.generation import HFGenerator  # noqa: E402
from common.tiny import tiny_causal_lm  # noqa: E402
from methods.webworld.simulator import WebWorldSimulator  # noqa: E402

S0 = "RootWebArea 'home', focused\n\t[12] link 'news', clickable\n\t[13] textbox 'search', value=''"


def _roll(gen, tok, window, steps: int, max_tokens: int) -> tuple[int, float]:
    sim = WebWorldSimulator(gen, window=window, temperature=0.0, max_tokens=max_tokens)
    sim.reset(S0)
    t0 = time.perf_counter()
    n_prompt = 0
    for _ in range(steps):
        text = tok.apply_chat_template(sim.prompt("click('12')"), tokenize=False)
        n_prompt = len(tok(text, add_special_tokens=False)["input_ids"])
        sim.step("click('12')")
    return n_prompt, (time.perf_counter() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, tok = tiny_causal_lm("qwen2", seed=0, max_position_embeddings=8192)
    gen = HFGenerator(model, tok)
    print("| context | prompt tokens at last step | s / step |")
    print("|---|---|---|")
    for w in (None, args.window):
        n, dt = _roll(gen, tok, w, args.steps, args.max_tokens)
        print(f"| {'full' if w is None else f'window={w}'} | {n} | {dt:.3f} |")


if __name__ == "__main__":
    main()
