"""``icml26 experiment=sv_features_toy | sv_features_paper | sv_features_gpt2_ioi | sv_features_pythia``."""

from __future__ import annotations

from common.demo import ToyResult

from . import paper, toy

STAGES = {
    "toy": toy.toy_stage,
    "synthetic": toy.toy_stage,
    "ioi": paper.ioi_stage,
    "checkpoints": paper.checkpoints_stage,
}
DEMO_OVERRIDES = [
    "method.toys=[single,closed_form]",
    "method.single.steps=150",
    "method.single.batch=128",
    "method.single.lr=0.02",
    "method.single.n_keys=4",
    "method.single.feature_prob=0.2",
    "method.closed_form.samples=5000",
    "method.log_every=150",
    "method.plots=false",
]
HEADLINE = ("single/align_top", "single_no_attn/align_top")
TOY_RESULT = ToyResult(
    method=0.992,
    baseline=0.401,
    higher_is_better=True,
    verdict="effect",
    command="icml26 experiment=sv_features_toy method.toys=[single]",
    minutes=2.4,  # doc "Results (toys)", row A (toy preset): 146 s, load ~14
)
