"""``icml26 experiment=georl_toy`` (toy G1) | ``experiment=georl_paper`` (GeoRLTrainer on a VLM)."""

from __future__ import annotations

from common.demo import ToyResult
from methods.georl import paper, toy

STAGES = {"toy": toy.run_toy, "paper": paper.paper_stage}
DEMO_OVERRIDES: list[str] = [
    "method.toy.n_images=60",
    "method.toy.warm_steps=400",
    "method.toy.rl_steps=150",
    "method.toy.arms=[sft,grounding,georl]",  # skips loading MiniLM
]
HEADLINE: tuple[str, str] = ("georl/group_coverage", "sft/group_coverage")
TOY_RESULT = ToyResult(
    method=0.660,
    baseline=0.381,
    higher_is_better=True,
    verdict="effect",
    command="icml26 experiment=georl_toy",
    minutes=5.3,  # doc "Toy results": wall time 316 s, shared (load ~16)
)
