"""``icml26 experiment=swordsman_toy | swordsman_paper | swordsman_paper_dream`` (``method.stage``)."""

from __future__ import annotations

from common.demo import ToyResult

from . import paper, toy

STAGES = {"toy": toy.run_toy, "paper": paper.paper_stage}
DEMO_OVERRIDES: list[str] = [
    "method.toy.train_steps=150",  # enough for the tiny MDM to show boundary alignment
    "method.toy.n_eval=4",
    "method.toy.hidden_size=32",
    "method.toy.n_oracle=2",
]
HEADLINE: tuple[str, str] = ("swordsman/alignment", "fixed/alignment")
TOY_RESULT = ToyResult(
    method=0.988,
    baseline=0.000,
    higher_is_better=True,
    verdict="effect",
    command="icml26 experiment=swordsman_toy method.toy.n_eval=60 method.toy.n_oracle=60",
    minutes=14.0,  # doc "Results (CPU toy)": wall time 842 s, shared (load ~17-20)
)
