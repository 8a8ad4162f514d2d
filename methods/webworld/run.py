"""``icml26 experiment=webworld_toy`` (CPU toy) | ``experiment=webworld_paper method.stage=<stage>``
with stage one of stage1, stage2, synth, agent, bench."""

from __future__ import annotations

from common.demo import ToyResult
from methods.webworld import paper
from methods.webworld.toy import toy_stage

STAGES = {
    "toy": toy_stage,
    "stage1": paper.stage1_stage,
    "stage2": paper.stage2_stage,
    "synth": paper.synth_stage,
    "agent": paper.agent_stage,
    "bench": paper.bench_stage,
}
DEMO_OVERRIDES = [
    "method.n_sites=6",
    "method.n_train_sites=5",
    "method.n_pages=3",
    "method.data_sizes=[4,8]",
    "method.epochs=1",
    "method.eval_trajectories=3",
    "method.max_new_tokens=12",
    "method.title_tokens=6",
    "method.episodes=2",
    "method.seeds=[0]",
    "method.model.hidden_size=32",
    "method.model.intermediate_size=64",
    "method.induction_steps=2",
]
HEADLINE = ("bon_learned/success", "greedy/success")
TOY_RESULT = ToyResult(
    method=0.592,
    baseline=0.575,
    higher_is_better=True,
    verdict="inconclusive",
    command="icml26 experiment=webworld_toy",
    note=(
        "learned lookahead is one success above greedy, inside the seed spread: the toy world model "
        "predicts the same title for every link click (docs, Diagnosis), so it cannot rank them"
    ),
    minutes=4.4,  # doc "Re-run after the issue-28 fixes": 261 s, beside a test run
)
