"""EpiCache bench: peak KV bytes and per-turn latency vs history length, EpiCache vs full KV.

Both arms use the same block-wise prefill loop and the same greedy decoder on a tiny Qwen2
(hidden 64, 2 layers, GQA 4/2); full KV is the same loop with a budget >= N (nothing evicted).
Peak KV bytes are the largest physical K+V held at any point of prefill (slots × bytes per slot).

    python scripts/bench/epicache.py --sizes 1024 2048 4096 8192 --out outputs/bench/epicache
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from common.tiny import tiny_causal_lm  # noqa: E402
from methods.epicache import blockwise_prefill, greedy_decode, peak_tokens_per_head  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    ap.add_argument("--budget", type=int, default=256)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=8)
    ap.add_argument("--out", default="outputs/bench/epicache")
    args = ap.parse_args()
    torch.manual_seed(0)
    model, _ = tiny_causal_lm("qwen2", seed=0, max_position_embeddings=max(args.sizes) + 1024)
    cfg = model.config
    slot_bytes = 2 * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads) * 4
    slot_bytes *= cfg.num_hidden_layers  # K+V, fp32, all layers, per token slot per head group
    g = torch.Generator().manual_seed(0)
    rows = []
    for n in args.sizes:
        ctx = torch.randint(5, 500, (1, n), generator=g)
        prompt = torch.randint(5, 500, (1, args.prompt), generator=g)
        qs = [torch.randint(5, 500, (1, 8), generator=g) for _ in range(args.turns)]
        row = {"n_tokens": n}
        for arm, budget, block in (
            ("epicache", args.budget, args.block),
            ("full_kv", n, min(n, 1024)),
        ):
            t0 = time.perf_counter()
            cache = blockwise_prefill(model, None, ctx, prompt, budget, block_size=block)
            row[f"{arm}/prefill_s"] = time.perf_counter() - t0
            peak = peak_tokens_per_head(cache) if arm == "epicache" else n
            row[f"{arm}/peak_kv_bytes"] = float(peak * slot_bytes)
            row[f"{arm}/stored_kv_bytes"] = float(cache.nbytes())
            t0 = time.perf_counter()
            for q in qs:
                greedy_decode(model, cache, q, max_new_tokens=args.new_tokens)
            row[f"{arm}/turn_latency_s"] = (time.perf_counter() - t0) / args.turns
        row["peak_mem_ratio_full_over_epicache"] = (
            row["full_kv/peak_kv_bytes"] / row["epicache/peak_kv_bytes"]
        )
        row["latency_ratio_full_over_epicache"] = (
            row["full_kv/turn_latency_s"] / row["epicache/turn_latency_s"]
        )
        rows.append(row)
        print(json.dumps(row))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    x = [r["n_tokens"] for r in rows]
    for arm in ("epicache", "full_kv"):
        axes[0].plot(x, [r[f"{arm}/peak_kv_bytes"] / 2**20 for r in rows], "o-", label=arm)
        axes[1].plot(x, [r[f"{arm}/turn_latency_s"] * 1e3 for r in rows], "o-", label=arm)
    axes[0].set(
        xlabel="history length (tokens)", ylabel="peak KV (MiB)", xscale="log", yscale="log"
    )
    axes[1].set(xlabel="history length (tokens)", ylabel="per-turn latency (ms)", xscale="log")
    for ax in axes:
        ax.legend()
    fig.suptitle(f"EpiCache (M={args.budget}, block={args.block}) vs full KV, tiny Qwen2, CPU")
    fig.tight_layout()
    fig.savefig(out / "epicache_cost.png", dpi=120)
    print(f"wrote {out / 'bench.json'} and {out / 'epicache_cost.png'}")


if __name__ == "__main__":
    main()
