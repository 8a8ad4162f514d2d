"""``icml26 experiment=agentxray_toy`` (``stage=toy``) and ``experiment=agentxray_paper`` (``stage=paper``)."""

from __future__ import annotations

from common.demo import ToyResult

from .paper import run_paper
from .toy import run_toy

STAGES = {"toy": run_toy, "paper": run_paper}
DEMO_OVERRIDES: list[str] = [
    "method.arms=[red_black,no_coloring]",
    "method.iterations=[20]",
    "method.seeds=[0]",
    "method.noise=[0.0]",
    "method.n_test=4",
]
HEADLINE: tuple[str, str] = ("red_black_n20/test_sfe", "no_coloring_n20/test_sfe")
TOY_RESULT = ToyResult(
    method=0.429,
    baseline=0.271,
    higher_is_better=True,
    verdict="effect",
    command="icml26 experiment=agentxray_toy",
    minutes=1.8,  # doc toy results: 110 s of run time, shared 2-core machine
)
