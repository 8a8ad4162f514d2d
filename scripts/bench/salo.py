"""SALO bench: cost of the pre-generation guard and of the operator at paper sizes.

Reports (1) the wall time of the guard's extra work (a forward with hidden states + volume + SALO) relative
to a plain forward of the same prompts on a tiny Llama, (2) the SALO operator's parameter count for the
paper's hidden sizes (official ``salo/model.py``: ≈ 6.9M for D = 3584, ≈ 7.9M for D = 4096), and (3) its CPU time per
prompt on a paper-sized volume (10 layers × 64 tokens × D).
Run: ``python scripts/bench/salo.py`` (CPU, about a minute; timings depend on machine load).
"""

from __future__ import annotations

import sys
import time

import torch

from common.tiny import tiny_causal_lm
from methods.salo import SALO, build_chat, collect_volumes, score_detector
from methods.salo.toy import ToyWorld, toy_tokenizer


def _best(fn, reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    torch.set_num_threads(1)
    print("command:", " ".join(["python", *sys.argv]))
    model, tok = tiny_causal_lm("llama", num_hidden_layers=4, seed=0, tokenizer=toy_tokenizer())
    model.eval()
    world = ToyWorld(0)
    prompts = [world.prompt(i % 2 == 1).text for i in range(32)]
    det = SALO(model.config.hidden_size, n_filters=64).eval()
    ids = [build_chat(tok, p) for p in prompts]
    t_max = max(len(r) for r in ids)
    x = torch.full((len(ids), t_max), tok.pad_token_id)
    m = torch.zeros(len(ids), t_max, dtype=torch.long)
    for i, r in enumerate(ids):
        x[i, : len(r)], m[i, : len(r)] = torch.tensor(r), 1

    with torch.no_grad():
        plain = _best(lambda: model(input_ids=x, attention_mask=m))

        def guard():
            v, mask = collect_volumes(model, tok, prompts, (1, 4), batch_size=32)
            score_detector(det, v, mask)

        guarded = _best(guard)
    print(f"tiny Llama (4 layers, D=64), 32 prompts: plain forward {plain * 1e3:.1f} ms, "
          f"guard (templating + hidden-state forward + SALO) {guarded * 1e3:.1f} ms, "
          f"ratio {guarded / plain:.2f}")  # fmt: skip
    print(
        "| D | SALO params (F=64, kernels (3,{2,3,5})) | CPU ms / prompt, 10 layers x 64 tokens |"
    )
    print("|---|---|---|")
    for d in (3584, 4096):
        op = SALO(d, n_filters=64).eval()
        n_par = sum(p.numel() for p in op.parameters())
        vol = torch.randn(1, 10, 64, d)
        with torch.no_grad():
            t = _best(lambda op=op, vol=vol: op(vol), reps=2)
        print(f"| {d} | {n_par / 1e6:.2f}M | {t * 1e3:.0f} |")


if __name__ == "__main__":
    main()
