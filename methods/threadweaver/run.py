"""CLI entry for ThreadWeaver: the "parallel codebook spelling" toy (spec §6).

``icml26 experiment=threadweaver_toy`` trains a tiny random-init Qwen3 on sequential traces (``seq``),
on parallel traces with trie packing (``tw``) and on parallel traces without the trie (``flat``),
evaluates every arm through the fork/join orchestrator on HF ``generate`` and writes accuracy and
token latency (critical path) per arm, plus the closed-form latency of a perfect model.
"""

from __future__ import annotations

import logging
import time

from omegaconf import DictConfig, OmegaConf

from common.tracking import write_results

from .config import ThreadWeaverConfig
from .toy import run_toy

logger = logging.getLogger(__name__)

DEMO_OVERRIDES: list[str] = [
    "method.chain_len=6",
    "method.n_symbols=4",
    "method.k_values=[2,3]",
    "method.n_train=32",
    "method.n_eval=4",
    "method.sft_steps=3",
    "method.sft_batch_size=8",
    "method.budget_total=32",
    "method.hybrid_eval=false",
    "method.hidden_size=32",
    "method.arms=[seq,tw]",
]
HEADLINE: tuple[str, str] = ("tw/token_latency", "seq/token_latency")


def to_config(method_cfg: DictConfig) -> ThreadWeaverConfig:
    """Strict merge of ``cfg.method`` into :class:`ThreadWeaverConfig` (unknown keys raise)."""
    schema = OmegaConf.structured(ThreadWeaverConfig)
    return OmegaConf.to_object(OmegaConf.merge(schema, method_cfg))


def run(cfg: DictConfig) -> dict[str, float]:
    """Run the toy and write ``results.json`` / ``results.md`` into ``cfg.run_dir``."""
    tw_cfg = to_config(cfg.method)
    t0 = time.time()
    metrics, extra = run_toy(tw_cfg, seed=int(cfg.seed))
    notes = (
        "Arms: seq = sequential traces (baseline); tw = parallel traces, trie packing + "
        "parent-gather loss; flat = parallel traces, plain causal loss; tw_ar = tw model without "
        "the orchestrator (hybrid AR mode); closed_form = the serializer's own traces (a perfect "
        "model). token_latency = mean critical path (tokens); speedup_correct = mean over problems "
        "both arms solve of seq latency / arm latency. Evaluation: greedy, through the orchestrator."
    )
    return write_results(
        cfg.run_dir or ".",
        "threadweaver",
        metrics,
        cfg=cfg,
        extra=extra,
        wall_time_s=time.time() - t0,
        notes=notes,
    )
