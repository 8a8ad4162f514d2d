"""``icml26 experiment=maxrl_toy | maxrl_maze_toy | maxrl_paper method.stage=<train|eval|compare>``."""

from __future__ import annotations

from common.demo import ToyResult

from . import paper, toy

STAGES = {
    "toy": toy.run_toy,
    "maze": toy.run_maze,
    "train": paper.train_stage,
    "eval": paper.eval_stage,
    "compare": paper.compare_stage,
}
DEMO_OVERRIDES: list[str] = [
    "method.n_rollouts=[16,64]",
    "method.t1.num_classes=100",
    "method.t1.n_train=5000",
    "method.t1.n_val=1000",
    "method.t1.steps=120",
    "method.t1.eval_every=40",
]
HEADLINE: tuple[str, str] = ("maxrl/pass@1", "grpo/pass@1")
TOY_RESULT = ToyResult(
    method=0.596,
    baseline=0.003,
    higher_is_better=True,
    verdict="effect",
    command="icml26 experiment=maxrl_toy",
    minutes=3.0,  # doc "Toy T1": 552 s at load ~16, about 3 minutes when idle
)
