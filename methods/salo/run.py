"""``icml26 experiment=salo_toy | salo_paper[_qwen|_llama|_mistral]`` (dispatch only)."""

from __future__ import annotations

from common.demo import ToyResult

from . import paper, toy

STAGES = {"toy": toy.run_toy, "paper": paper.paper_stage}
DEMO_OVERRIDES: list[str] = [
    "method.toy.lm_steps=2",
    "method.toy.lm_batch_size=8",
    "method.toy.hidden_size=32",
    "method.toy.n_filters=4",
    "method.toy.n_train=24",
    "method.toy.n_test=12",
    "method.toy.n_calib=24",
    "method.toy.haystack_len=16",
    "method.toy.n_gcg=2",
    "method.toy.gcg_steps=2",
    "method.epochs=1",
]
HEADLINE: tuple[str, str] = ("salo_max/prefill", "refusal_score/prefill")
TOY_RESULT = ToyResult(
    method=1.00,
    baseline=0.00,
    higher_is_better=True,
    verdict="effect",
    command="icml26 experiment=salo_toy",
    minutes=13.2,  # doc toy results: wall time 793 s, shared (load ~19)
)
