"""``icml26 experiment=swordsman_toy | swordsman_paper | swordsman_paper_dream`` (``method.stage``)."""

from __future__ import annotations

from . import paper, toy_run

STAGES = {"toy": toy_run.run_toy, "paper": paper.paper_stage}
DEMO_OVERRIDES: list[str] = [
    "method.toy.train_steps=40",
    "method.toy.n_eval=4",
    "method.toy.hidden_size=32",
    "method.toy.n_oracle=2",
]
HEADLINE: tuple[str, str] = ("swordsman/alignment", "fixed/alignment")
