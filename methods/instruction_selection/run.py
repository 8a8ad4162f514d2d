"""``icml26 experiment=instruction_selection_toy`` | ``instruction_selection_paper
method.stage=<select|finetune>`` (dispatch only)."""

from __future__ import annotations

from common.demo import ToyResult

from . import paper, toy

STAGES = {"toy": toy.run_toy, "select": paper.select_stage, "finetune": paper.finetune_stage}
DEMO_OVERRIDES: list[str] = [
    "method.pool_size=200",
    "method.n_queries=4",
    "method.n_test=20",
    "method.budgets=[30]",
    "method.random_seeds=[0]",
    "method.pretrain_steps=0",
    "method.train_steps=5",
    "method.warmup_n=16",
    "method.warmup_epochs=1",
    "method.n_quantiles=0",
    "method.representations=[rds,less]",
    "method.selectors=[rr]",
]
HEADLINE: tuple[str, str] = ("less_rr/loss@30", "random/loss@30")
TOY_RESULT = ToyResult(
    method=3.693,
    baseline=3.971,
    higher_is_better=False,
    verdict="inconclusive",
    command="icml26 experiment=instruction_selection_toy",
    note=(
        "one seed, both arms above zero-shot; paired over 5 seeds at B = 120 (fixed epochs) no "
        "representation beats random, and the toy model learns no relevance order for a distance to "
        "predict (doc: Diagnosis)"
    ),
    minutes=4.2,  # doc "Re-run on 2026-12-07": 253 s on the idle machine
)
