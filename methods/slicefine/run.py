"""``icml26 experiment=slicefine_toy`` | ``slicefine_paper`` (GLUE) | ``slicefine_paper_vtab`` (VTAB-1K)."""

from __future__ import annotations

from methods.slicefine import paper, toy

STAGES = {"toy": toy.run_toy, "glue": paper.glue_stage, "vision": paper.vision_stage}
DEMO_OVERRIDES = [
    "method.toy.arms=[head,lora,slicefine]",
    "method.toy.steps=30",
    "method.toy.seeds=[0]",
    "method.toy.encoder_layers=2",
    "method.toy.n_train=400",
    "method.toy.n_test=200",
    "method.toy.diagnostics=false",
]
HEADLINE = ("slicefine/accuracy", "lora/accuracy")
