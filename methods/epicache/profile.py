"""One-off layer-sensitivity profiling (spec §3.6, §7): ``python -m methods.epicache.profile``.

Writes ``{"model": ..., "sigma": [...], "block": ..., "sink": ..., "overlap": ...}``; pass the file as
``method.sensitivity_path`` so that layer budgets follow s_l = 1 − σ_l.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import torch

from common.models import load_model, load_tokenizer
from methods.epicache.budget import profile_layer_sensitivity

logger = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True, help="hub id, local path or tiny-* spec")
    ap.add_argument(
        "--text-file", required=True, help="one long sample (official: BookSum, 16K tokens)"
    )
    ap.add_argument("--max-tokens", type=int, default=16384)
    ap.add_argument("--block", type=int, default=4096)
    ap.add_argument("--sink", type=int, default=128)
    ap.add_argument("--overlap", type=float, default=0.5)
    ap.add_argument("--window", type=int, default=None, help="official code: 100 (windowed cosine)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    model, tok = load_model(args.model), load_tokenizer(args.model)
    text = Path(args.text_file).read_text()
    ids = tok(text, return_tensors="pt", add_special_tokens=False).input_ids[:, : args.max_tokens]
    sigma = profile_layer_sensitivity(
        model, ids.to(model.device), args.block, args.sink, args.overlap, args.window
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "model": args.model,
                "sigma": sigma.tolist(),
                "block": args.block,
                "sink": args.sink,
                "overlap": args.overlap,
                "window": args.window,
                "n_tokens": int(ids.shape[1]),
            },
            indent=1,
        )
    )
    logger.info("sensitivity profile of %s written to %s", args.model, out)
    return out


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    logging.basicConfig(level=logging.INFO)
    main()
