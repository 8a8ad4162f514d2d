"""``icml26 experiment=kore_toy | kore_paper | kore_evoke`` (``method.stage=toy | paper | evoke``)."""

from __future__ import annotations

from common.demo import ToyResult

from . import paper, toy

STAGES = {"toy": toy.run_toy, "paper": paper.paper_stage, "evoke": paper.evoke_stage}
DEMO_OVERRIDES = [
    "method.toy.arms=[lora,kore]",
    "method.toy.n_old=24",
    "method.toy.n_new=8",
    "method.toy.pretrain_steps=150",
    "method.toy.pretrain_batch=64",
    "method.toy.inject_steps=40",
    "method.toy.batch_size=16",
    "method.toy.n_calib=16",
    "method.toy.n_probe=32",
    "method.toy.seeds=[0]",
]
HEADLINE = ("kore/hars", "lora/hars")
TOY_RESULT = ToyResult(
    method=93.0,
    baseline=51.0,
    higher_is_better=True,
    verdict="effect",
    command="icml26 experiment=kore_toy 'method.toy.seeds=[0,1,2]'",
    minutes=1.2,  # doc "Toy results": 74 s wall on the idle 2-core machine
)
