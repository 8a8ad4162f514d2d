"""SALO: cost of the pre-generation guard vs a plain forward, and the operator's size at paper widths.

(1) Wall time of the guard (templating + a forward with hidden states + volume + SALO) vs a plain
forward of the same 32 prompts on a tiny 4-layer Llama; (2) the SALO operator's parameter count for
D = 3584 / 4096 against the official ``salo/model.py`` counts (≈ 6.9M / ≈ 7.9M).
"""

from __future__ import annotations

import torch

from common.tiny import tiny_causal_lm
from methods.salo import SALO, build_chat, collect_volumes, score_detector
from methods.salo.toy_world import ToyWorld, toy_tokenizer
from scripts.bench._harness import row, spread_ratio, time_pair

OFFICIAL_PARAMS = {3584: 6.9e6, 4096: 7.9e6}


def run(quick: bool = False) -> dict:
    reps = 3 if quick else 7
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

    def plain():
        with torch.no_grad():
            model(input_ids=x, attention_mask=m)

    def guard():
        with torch.no_grad():
            v, mask = collect_volumes(model, tok, prompts, (1, 4), batch_size=32)
            score_detector(det, v, mask)

    g, p, _, q1, q3 = time_pair(guard, plain, reps)
    rows = [row("guard vs plain forward (s), 32 prompts, tiny Llama", g, p, spread_ratio(q1, q3))]
    for d in (3584, 4096):
        n_par = sum(t.numel() for t in SALO(d, n_filters=64).parameters())
        rows.append(
            row(
                f"SALO params, D={d} (vs official)",
                n_par,
                OFFICIAL_PARAMS[d],
                "",
                max_ratio=1.05,
                min_ratio=0.95,
            )
        )
    return {
        "title": "SALO guard cost and operator size",
        "command": "python -m scripts.bench salo",
        "rows": rows,
        "notes": "The guard ratio on a tiny model is an upper bound (templating and the volume "
        "dominate; at 7B the shared forward dominates). Param-count threshold: within 5% of the "
        "official counts (ours; they are quoted to two digits).",
    }
