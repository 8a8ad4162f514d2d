"""WebWorld: the simulator's sliding window bounds the context (official demo loop), tiny model.

Rolls a random-init tiny Qwen2 world model for S steps with ``window=W`` (method) and ``window=None``
(full history, baseline): prompt length (tokens) at the last step and mean wall time per step.
"""

from __future__ import annotations

import time

from common.generation import HFGenerator
from common.tiny import tiny_causal_lm
from methods.webworld.simulator import WebWorldSimulator
from scripts.bench._harness import row

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


def run(quick: bool = False) -> dict:
    steps, window = (4, 2) if quick else (30, 5)
    model, tok = tiny_causal_lm("qwen2", seed=0, max_position_embeddings=8192)
    gen = HFGenerator(model, tok)
    n_full, t_full = _roll(gen, tok, None, steps, 8)
    n_win, t_win = _roll(gen, tok, window, steps, 8)
    return {
        "title": "WebWorld sliding window vs full history",
        "command": "python -m scripts.bench webworld",
        "rows": [
            row(f"prompt tokens at step {steps}", n_win, n_full, "", max_ratio=1.0),
            row("s / step", t_win, t_full, "one roll each"),
        ],
        "notes": f"window={window}, {steps} steps, 8 new tokens per step. Threshold ≤ 1× (ours): the "
        "window must not lengthen the prompt.",
    }
