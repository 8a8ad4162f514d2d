"""Bench: Swordsman vs fixed blocks (Fast-dLLM) on the toy models, as ratios.

Decodes the same prompts with Swordsman (entropy blocks <= B + dynamic threshold 0.9 -> 0.7) and with
fixed blocks of B at τ = 0.9, arms interleaved per prompt so machine-load drift hits both equally, on two
toy models: the exact grammar posterior (``GrammarPosteriorLM``, the perfectly trained denoiser) and a
tiny BERT masked-diffusion LM trained for ``--train_steps`` steps. Reports tokens per model call (NFE)
and wall time per sample, and Swordsman / fixed ratios.

    python scripts/bench/swordsman.py --train_steps 300 --n 40
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from methods.swordsman import (  # noqa: E402
    HFMaskedLMAdapter,
    PhraseGrammar,
    SwordsmanConfig,
    fixed_block_generate,
    swordsman_generate,
    tiny_mdm,
    train_mdm,
)
from methods.swordsman.toy import EOS, MASK, GrammarPosteriorLM  # noqa: E402


def bench(adapter, prompts, gen: int, block: int) -> dict[str, tuple[float, float]]:
    """{arm: (tokens per NFE, ms per sample)} for Swordsman and fixed blocks."""
    cfg = SwordsmanConfig(gen_length=gen, max_block_len=block)  # τ 0.9 -> 0.7, γ = 1
    stats = {"swordsman": [0, 0.0], "fixed": [0, 0.0]}
    for x in prompts:
        t = time.perf_counter()
        r = swordsman_generate(adapter, x, cfg)
        stats["swordsman"][0] += r.nfe
        stats["swordsman"][1] += time.perf_counter() - t
        t = time.perf_counter()
        r = fixed_block_generate(adapter, x, gen, block, cfg.tau_max)
        stats["fixed"][0] += r.nfe
        stats["fixed"][1] += time.perf_counter() - t
    n = len(prompts)
    return {k: (gen * n / v[0], 1000 * v[1] / n) for k, v in stats.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--train_steps", type=int, default=300)
    p.add_argument("--n", type=int, default=40, help="prompts")
    p.add_argument("--block", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(1)
    grammar = PhraseGrammar(gen_length=32, max_phrases=6)
    rng = random.Random(a.seed + 1)
    prompts = [torch.tensor([grammar.sample(rng)[0]]) for _ in range(a.n)]
    models = {"exact posterior": GrammarPosteriorLM(grammar)}
    if a.train_steps > 0:
        mdm = tiny_mdm(grammar.vocab_size, seed=a.seed)
        train_mdm(mdm, grammar, steps=a.train_steps, batch_size=32, lr=3e-3, seed=a.seed)
        models[f"tiny MDM ({a.train_steps} steps)"] = mdm
    print("command:", " ".join(["python", *sys.argv]))
    print("| model | arm | tokens/NFE | ms/sample |")
    print("|---|---|---|---|")
    ratios = []
    for name, model in models.items():
        res = bench(HFMaskedLMAdapter(model, MASK, {EOS}), prompts, 32, a.block)
        for arm, (tpn, ms) in res.items():
            print(f"| {name} | {arm} | {tpn:.3f} | {ms:.1f} |")
        (ts, ms_s), (tf, ms_f) = res["swordsman"], res["fixed"]
        ratios.append(f"{name}: tokens/NFE x{ts / tf:.3f}, wall time x{ms_s / ms_f:.3f}")
    print("Swordsman / fixed ratios:")
    for r in ratios:
        print("  " + r)


if __name__ == "__main__":
    main()
