"""``icml26 experiment=llminertia_toy | llminertia_paper | llminertia_induce`` (``method.stage``)."""

from __future__ import annotations

from common.demo import ToyResult

from . import paper, toy

STAGES = {
    "toy": toy.trained_stage,
    "sim": toy.sim_stage,
    "paper": paper.paper_stage,
    "induce": paper.induce_stage,
}
DEMO_OVERRIDES: list[str] = [
    "method.stage=sim",
    "method.ratios=[0.0,0.5,1.0]",
    "method.n_test_templates=2",
]
HEADLINE: tuple[str, str] = ("llminertia/wrong_yes_max_ratio", "plain/wrong_yes_max_ratio")
TOY_RESULT = ToyResult(
    method=0.063,
    baseline=0.875,
    higher_is_better=False,
    verdict="effect",
    command="icml26 experiment=llminertia_toy method.stage=sim",
    note="simulated inert LLM: the mechanism only, the gain's size is an assumption",
    minutes=1.0,  # doc "simulated inert LLM": ~60 s wall with imports, loaded
)
