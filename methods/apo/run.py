"""``icml26 experiment=apo_toy`` (bandit toy A1) | ``experiment=apo_paper [method.stage=train|eval]``."""

from __future__ import annotations

from common.demo import ToyResult

from . import paper, toy

STAGES = {
    "toy": toy.run_toy,
    "train": paper.train_stage,
    "eval": paper.eval_stage,
    "paper": paper.paper_stage,
}
DEMO_OVERRIDES: list[str] = [
    "method.seeds=[0]",
    "method.toy.steps=40",
    "method.toy.eval_every=20",
    "method.extra_arms=[]",
]
HEADLINE: tuple[str, str] = ("apo/hard/pass@64", "grpo/hard/pass@64")
TOY_RESULT = ToyResult(
    method=0.196,
    baseline=0.200,
    higher_is_better=True,
    verdict="negative",
    command="icml26 experiment=apo_toy",
    note=(
        "APO (anchor ratio to π_ref) vs GRPO, hard Pass@64: paired Δ −0.006 [−0.007, −0.004] over "
        "10 seeds; its pull ∝ π of the dying action (doc: Diagnosis; the π_old reading gains +0.039)"
    ),
    minutes=2.1,  # doc "Results: toy A1": wall time 128 s, shared 2-core box
)
