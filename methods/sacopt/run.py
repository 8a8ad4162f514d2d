"""``icml26 experiment=sacopt_toy`` (CPU toy) | ``experiment=sacopt_paper`` (the paper stage)."""

from __future__ import annotations

from common.demo import ToyResult
from methods.sacopt.paper import paper_stage
from methods.sacopt.toy import toy_stage

STAGES = {"toy": toy_stage, "paper": paper_stage}
DEMO_OVERRIDES: list[str] = [
    "method.n_problems=6",
    "method.arms=[single_pass,debug_only,sacopt_judge]",  # skips loading MiniLM
    "method.detection_problems=0",
]
HEADLINE: tuple[str, str] = ("sacopt_judge/accuracy", "single_pass/accuracy")
TOY_RESULT = ToyResult(
    method=0.935,
    baseline=0.225,
    higher_is_better=True,
    verdict="effect",
    command="icml26 experiment=sacopt_toy",
    minutes=3.0,  # doc toy run: 1015 s at load ~16, "idle needs roughly 2-3 minutes"
)
