"""``icml26 experiment=kmkc_toy`` (fact-world toy) | ``experiment=kmkc_paper`` (the paper pipeline)."""

from __future__ import annotations

from common.demo import ToyResult

from . import paper, toy

STAGES = {
    "toy": toy.run_toy,
    "profile": paper.profile_stage,
    "sft": paper.sft_stage,
    "cdkc": paper.cdkc_stage,
    "eval": paper.eval_stage,
    "paper": paper.paper_stage,
}
DEMO_OVERRIDES = [
    "method.toy.n_per_tier=12",
    "method.toy.reps_seen=6",
    "method.toy.pretrain_steps=40",
    "method.toy.batch_size=16",
    "method.toy.k=4",
    "method.toy.n_bins=4",
    "method.toy.sft_steps=4",
    "method.toy.seeds=[0]",
    "method.arms=[vanilla_sft,cgke]",  # the GRPO/CDKC arms are tested in tests/methods/test_kmkc.py
]
HEADLINE = ("cgke/acc", "vanilla_sft/acc")
TOY_RESULT = ToyResult(
    method=0.926,
    baseline=0.919,
    higher_is_better=True,
    verdict="inconclusive",
    command="icml26 experiment=kmkc_toy 'method.toy.seeds=[0,1,2]'",
    note=(
        "CGKE ties uniform SFT at equal budget (paired Δ −0.001 [−0.064, +0.063], 5 seeds): its "
        "allocation gains +0.051 [+0.034, +0.069], its formats cost as much on the trained "
        "template and gain +0.196 on tier C in a held-out one (doc: Diagnosis)"
    ),
    minutes=2.9,  # doc "Current numbers": 174 s wall on the idle 2-core machine
)
