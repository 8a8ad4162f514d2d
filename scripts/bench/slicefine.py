"""SliceFine vs PEFT LoRA at matched trainable-parameter counts, same model and batches.

Both arms train MiniLM's query/value projections on the toy task (methods/slicefine/toy.py): LoRA
rank r has r·(d_in + d_out) = 2·r·d parameters per square matrix, a row slice of width 2r has the
same 2·r·d. Reported as ratios SliceFine ÷ LoRA measured in one run: median step time, peak memory
(CUDA) or training-state bytes (CPU), checkpoint bytes (slice artifact vs adapter), and accuracy.

    python scripts/bench/slicefine.py --steps 60 --lora_r 4
    python scripts/bench/slicefine.py --steps 60 --lrs 2e-3 5e-3 1e-2   # tune each arm's lr

With several ``--lrs`` each arm is trained at each learning rate and compared at its own best
accuracy (selected on the toy's test split for both arms alike; the sweep is in the output).
"""

from __future__ import annotations

import argparse
import io
import json
import sys

import torch


def _nbytes(state: dict) -> int:
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getbuffer().nbytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--lora_r", type=int, default=4)
    parser.add_argument("--switch_every", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lrs", type=float, nargs="+", default=[2e-3])
    args = parser.parse_args()
    torch.set_num_threads(1)  # ratios in one run; one thread keeps them stable on a shared machine

    from methods.slicefine.toy import ToyConfig, load_minilm, make_data, train_arm

    encoder, tok = load_minilm(3)
    data = (make_data(800, args.seed), make_data(400, 10_000 + args.seed))
    rows, sweep = {}, {}
    for arm, r in (("lora", args.lora_r), ("slicefine", 2 * args.lora_r)):
        for lr in args.lrs:
            tc = ToyConfig(
                arms=[arm],
                r=r,
                steps=args.steps,
                switch_every=args.switch_every,
                diagnostics=False,
                lr=lr,
            )
            row = train_arm(arm, encoder, tok, tc, args.seed, data)
            row["lr"] = lr
            sweep.setdefault(arm, []).append({"lr": lr, "accuracy": row["accuracy"]})
            if arm not in rows or row["accuracy"] > rows[arm]["accuracy"]:
                rows[arm] = row
    # Checkpoint sizes: rebuild each arm once more to read its artifact after the same steps.
    from methods.slicefine.toy import _build_arm

    tc = ToyConfig(arms=["lora"], r=args.lora_r)
    lora_model, _, _ = _build_arm("lora", encoder, tc, args.seed)
    lora_state = {k: v for k, v in lora_model.encoder.state_dict().items() if "lora_" in k}
    tc = ToyConfig(arms=["slicefine"], r=2 * args.lora_r, switch_every=args.switch_every)
    _, sf, _ = _build_arm("slicefine", encoder, tc, args.seed)
    for _ in range(max(0, args.steps // args.switch_every)):
        sf.switch()  # the artifact grows with every touched slice
    rows["lora"]["checkpoint_bytes"] = float(_nbytes(lora_state))
    rows["slicefine"]["checkpoint_bytes"] = float(_nbytes(sf.slice_state_dict()))
    mem_key = "peak_mem_mib" if "peak_mem_mib" in rows["lora"] else "train_state_kib"
    ratios = {
        "trainable_params": rows["slicefine"]["trainable_params"]
        / rows["lora"]["trainable_params"],
        "step_time": rows["slicefine"]["step_ms"] / rows["lora"]["step_ms"],
        mem_key: rows["slicefine"][mem_key] / rows["lora"][mem_key],
        "checkpoint_bytes": rows["slicefine"]["checkpoint_bytes"]
        / rows["lora"]["checkpoint_bytes"],
        "accuracy_diff_points": 100 * (rows["slicefine"]["accuracy"] - rows["lora"]["accuracy"]),
    }
    out = {
        "command": " ".join(["python", *sys.argv]),
        "rows": {a: {k: v for k, v in r.items() if not k.startswith("_")} for a, r in rows.items()},
        "ratios_slicefine_over_lora": ratios,
        "lr_sweep": sweep,
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
