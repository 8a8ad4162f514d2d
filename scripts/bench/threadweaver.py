"""ThreadWeaver bench: trie packing cost and the closed-form critical-path speedup of the toy format.

Ratios measured within one run (no absolute seconds are claimed):
  * packed_tokens / sum_unit_tokens: memory of one trie vs. feeding every request separately;
  * t_packed / t_separate: one packed forward vs. one forward per unit (tiny Qwen3, CPU);
  * seq_latency / tw_latency: critical path of the canonical sequential vs. parallel trace.

    python scripts/bench/threadweaver.py
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from methods.threadweaver import (
    TrieCollator,
    build_packed,
    extract_units,
    packed_forward,
    parallel_stats,
    tag_ids,
)  # noqa: E402,E501
from methods.threadweaver.config import ThreadWeaverConfig  # noqa: E402
from methods.threadweaver.toy import _toy_model, make_codebook, toy_tokenizer, toy_trajectory  # noqa: E402


def main() -> None:
    torch.manual_seed(0)
    print("command: python scripts/bench/threadweaver.py")
    print(
        "| K | T | seq latency | tw latency | speedup | tw latency (N: one token) | speedup "
        "(N: one token) | packed/sum(units) | t_packed/t_separate |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for t_len in (16, 64):
        tok = toy_tokenizer(n_symbols=8, chain_len=t_len)
        tok1 = toy_tokenizer(n_symbols=8, chain_len=t_len, num_colon=True)
        ids = tag_ids(tok)
        cb = make_codebook(8, t_len, 0)
        model = _toy_model(ThreadWeaverConfig(), len(tok), 0).eval()

        def enc(s, tok=tok):
            return tok(s, add_special_tokens=False)["input_ids"]

        for k in (2, 4, 6):
            syms = list(range(k))
            prompt = [tok.bos_token_id, *enc("Q: " + " ".join(f"s{s}" for s in syms) + "\n")]
            lat = {}
            for form in ("seq", "par"):
                resp, units = extract_units(
                    prompt, toy_trajectory(syms, cb, form), enc, tok.eos_token_id
                )
                lat[form] = parallel_stats(resp, ids).longest
            p1 = [tok1.bos_token_id, *tok1("Q: " + " ".join(f"s{s}" for s in syms) + "\n",
                                            add_special_tokens=False)["input_ids"]]  # fmt: skip
            r1, _ = extract_units(p1, toy_trajectory(syms, cb, "par"),
                                  lambda s, t=tok1: t(s, add_special_tokens=False)["input_ids"],
                                  tok1.eos_token_id)  # fmt: skip
            lat["par1"] = parallel_stats(r1, tag_ids(tok1)).longest
            packed = build_packed(units)
            batch = TrieCollator(tok.pad_token_id)([packed])
            with torch.no_grad():
                t0 = time.perf_counter()
                for _ in range(5):
                    packed_forward(model, batch)
                t1 = time.perf_counter()
                for _ in range(5):
                    for u in units:
                        model(torch.tensor([u.ids]))
                t2 = time.perf_counter()
            ratio_tok = len(packed) / sum(len(u.ids) for u in units)
            print(f"| {k} | {t_len} | {lat['seq']} | {lat['par']} | {lat['seq'] / lat['par']:.2f}x | "
                  f"{lat['par1']} | {lat['seq'] / lat['par1']:.2f}x | "
                  f"{ratio_tok:.2f} | {(t1 - t0) / (t2 - t1):.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
