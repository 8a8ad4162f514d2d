"""``icml26 experiment=autoqra_toy`` (CPU toy) | ``experiment=autoqra_paper`` (the paper stage, GPU)."""

from __future__ import annotations

from common.demo import ToyResult

from .paper import paper_stage
from .toy import toy_stage

STAGES = {"toy": toy_stage, "paper": paper_stage}
DEMO_OVERRIDES: list[str] = [
    "method.toy.num_layers=4",
    "method.toy.pretrain_steps=200",  # the blocks must hold knowledge to lose
    "method.toy.n_train=256",
    "method.toy.n_heldout=128",
    "method.toy.lf_steps=3",
    "method.toy.hf_steps=8",
    "method.toy.final_steps=20",
    "method.toy.random_search=false",
    "method.toy.arms=[uniform4,autoqra]",
    "method.toy.final_seeds=[0]",
    "method.toy.outlier_blocks=[1]",
    "method.pop=4",
    "method.gens=1",
    "method.promote_k=1",
    "method.k_neighbors=1",
    "method.bo_iters=1",
]
HEADLINE: tuple[str, str] = ("autoqra/ce", "uniform4/ce")
TOY_RESULT = ToyResult(
    method=2.498,
    baseline=2.624,
    higher_is_better=False,
    verdict="effect",
    command="icml26 experiment=autoqra_toy",
    minutes=1.2,  # doc "Re-measured 2026-12-07": idle, 42 s and again 74 s
)
