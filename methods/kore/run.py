"""``icml26 experiment=kore_toy | kore_paper | kore_evoke`` (``method.stage=toy | paper | evoke``)."""

from __future__ import annotations

from . import paper, toy

STAGES = {"toy": toy.run_toy, "paper": paper.paper_stage, "evoke": paper.evoke_stage}
DEMO_OVERRIDES = [
    "method.toy.arms=[lora,kore]",
    "method.toy.n_old=24",
    "method.toy.n_new=8",
    "method.toy.pretrain_steps=15",
    "method.toy.pretrain_batch=32",
    "method.toy.inject_steps=8",
    "method.toy.batch_size=16",
    "method.toy.n_calib=16",
    "method.toy.n_probe=32",
    "method.toy.seeds=[0]",
]
HEADLINE = ("kore/hars", "lora/hars")
