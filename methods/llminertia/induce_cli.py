"""Command line for the paper-scale induction runs.

``python -m methods.llminertia.induce_cli MODEL CORPUS OUT_DIR [DEEPSPEED_JSON] [--max-steps N]``
continues pre-training ``MODEL`` (hub id or path) on a repo-format co-occurrence corpus with the
repo's hyper-parameters (:class:`InductionConfig` defaults: lr 1e-5, 61 epochs, batch 8 x 8,
cutoff 256, cosine, warmup 0.1, a checkpoint every 10 steps, bf16). Launch it with
``accelerate launch`` for multi-GPU / DeepSpeed ZeRO-3.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .induction_train import InductionConfig, continued_pretrain
from .paper_data import load_cooccurrence_corpus


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parses the command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("corpus")
    ap.add_argument("output_dir")
    ap.add_argument("deepspeed", nargs="?", default=None)
    ap.add_argument("--max-steps", type=int, default=-1)
    ap.add_argument("--no-bf16", action="store_true")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Runs one induction job."""
    a = parse_args(argv)
    cfg = InductionConfig(
        output_dir=a.output_dir, deepspeed=a.deepspeed, max_steps=a.max_steps, bf16=not a.no_bf16
    )
    continued_pretrain(a.model, None, load_cooccurrence_corpus(a.corpus), cfg)


if __name__ == "__main__":
    main()
