"""Bench: Swordsman vs fixed blocks (Fast-dLLM) on the toy masked-diffusion LM.

Reports tokens per model call and wall time per sample of Swordsman (adaptive blocks + dynamic threshold)
divided by the fixed-block baseline, measured in one process on the same prompts (ratios, not seconds).

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
from methods.swordsman.toy import EOS, MASK  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--train_steps", type=int, default=300)
    p.add_argument("--n", type=int, default=40, help="prompts")
    p.add_argument("--block", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(1)
    grammar = PhraseGrammar(gen_length=32, max_phrases=6)
    model = tiny_mdm(grammar.vocab_size, seed=a.seed)
    train_mdm(model, grammar, steps=a.train_steps, batch_size=32, lr=3e-3, seed=a.seed)
    ad = HFMaskedLMAdapter(model, MASK, {EOS})
    rng = random.Random(a.seed + 1)
    prompts = [torch.tensor([grammar.sample(rng)[0]]) for _ in range(a.n)]
    cfg = SwordsmanConfig(gen_length=32, max_block_len=a.block)
    stats = {"swordsman": [0, 0.0], "fixed": [0, 0.0]}
    for x in prompts:  # interleave arms so machine-load drift hits both equally
        t = time.perf_counter()
        r = swordsman_generate(ad, x, cfg)
        stats["swordsman"][0] += r.nfe
        stats["swordsman"][1] += time.perf_counter() - t
        t = time.perf_counter()
        r = fixed_block_generate(ad, x, 32, a.block, cfg.tau_max)
        stats["fixed"][0] += r.nfe
        stats["fixed"][1] += time.perf_counter() - t
    tpn = {k: 32 * a.n / v[0] for k, v in stats.items()}
    print("command:", " ".join([sys.executable.split("/")[-1], *sys.argv]))
    print("| arm | tokens/NFE | ms/sample |")
    print("|---|---|---|")
    for k, (_, sec) in stats.items():
        print(f"| {k} | {tpn[k]:.3f} | {1000 * sec / a.n:.1f} |")
    print(
        f"ratio swordsman/fixed: tokens/NFE {tpn['swordsman'] / tpn['fixed']:.3f}, "
        f"wall time {stats['swordsman'][1] / stats['fixed'][1]:.3f}"
    )


if __name__ == "__main__":
    main()
