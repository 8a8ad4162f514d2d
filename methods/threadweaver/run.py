"""``icml26 experiment=threadweaver_toy | threadweaver_paper method.stage=<synth|self_train|sft|rl|eval>``.

The toy trains a tiny random-init Qwen3 on sequential traces (``seq``), on parallel traces with trie
packing (``tw``) and on parallel traces without the trie (``flat``), evaluates every arm through the
fork/join orchestrator on HF ``generate`` and writes accuracy and token latency (critical path) per
arm, plus the closed-form latency of a perfect model. The paper stages are in :mod:`.paper`.
"""

from __future__ import annotations

from common.demo import ToyResult

from . import paper, paper_data
from .toy import toy_stage

STAGES = {
    "toy": toy_stage,
    "synth": paper_data.synth_stage,
    "self_train": paper_data.self_train_stage,
    "sft": paper.sft_stage,
    "rl": paper.rl_stage,
    "eval": paper.eval_stage,
}
DEMO_OVERRIDES: list[str] = [
    "method.toy.chain_len=10",
    "method.toy.n_symbols=8",
    "method.toy.k_values=[5]",  # parallel threads must outweigh the outline overhead
    "method.toy.n_train=100",
    "method.toy.n_eval=4",
    "method.toy.sft_steps=100",
    "method.toy.sft_batch_size=8",
    "method.toy.budget_total=400",  # room for the whole trace
    "method.toy.hybrid_eval=false",
    "method.toy.hidden_size=32",
    "method.toy.arms=[seq,tw]",
]
HEADLINE: tuple[str, str] = ("tw/token_latency", "seq/token_latency")
TOY_RESULT = ToyResult(
    method=69.84,
    baseline=95.83,
    higher_is_better=False,
    verdict="effect",
    command="icml26 experiment=threadweaver_toy",
    minutes=8.3,  # doc "Toy results": wall time 498 s (shared, load 9-20)
)
