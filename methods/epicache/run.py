"""``icml26 experiment=epicache_toy | epicache_paper method.stage=<profile|eval>`` (dispatch only)."""

from __future__ import annotations

from common.demo import ToyResult

from . import paper, toy

STAGES = {
    "toy": toy.run_toy,
    "profile": paper.profile_stage,
    "eval": paper.eval_stage,
}
DEMO_OVERRIDES: list[str] = [
    "method.train_steps=200",  # a toy LM that answers from its cache (150 is not enough)
    "method.train_induction_steps=100",
    "method.n_eval=1",
    "method.n_init=1",
    "method.n_questions=8",
    "method.block_size=96",
    "method.cache_model=false",
]
HEADLINE: tuple[str, str] = ("epicache/accuracy", "snapkv_block/accuracy")
TOY_RESULT = ToyResult(
    method=0.952,
    baseline=0.710,
    higher_is_better=True,
    verdict="effect",
    command="icml26 experiment=epicache_toy seed=0",
    minutes=13.7,  # doc "Re-run after the fidelity fixes": seed 0, 824 s (shared)
)
ARMS = toy.ARMS
