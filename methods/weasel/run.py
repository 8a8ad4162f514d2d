"""``icml26 experiment=weasel_toy`` | ``weasel_paper method.stage=<select|sft>`` (dispatch only)."""

from __future__ import annotations

from common.demo import ToyResult

from . import paper, toy

STAGES = {"toy": toy.run_toy, "select": paper.select_stage, "sft": paper.sft_stage}
DEMO_OVERRIDES: list[str] = [
    "method.arms=[random,weasel]",
    "method.seeds=[0]",
    "method.n_train_traj=6",
    "method.n_test_steps=8",
    "method.epochs=1",
    "method.scorer=jaccard",
    "method.induction_steps=0",
]
HEADLINE: tuple[str, str] = ("weasel/ood_name_acc", "random/ood_name_acc")
TOY_RESULT = ToyResult(
    method=0.189,
    baseline=0.239,
    higher_is_better=True,
    verdict="negative",
    command="icml26 experiment=weasel_toy",
    note="the Weasel subset does not beat the random one out of domain (0.189 vs 0.239, 3 seeds)",
    minutes=8.1,  # doc "New run (3 seeds)": 484 s on the idle machine
)
