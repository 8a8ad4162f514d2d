"""``icml26 experiment=mcce_toy`` (``stage=toy``) and ``experiment=mcce_paper`` (``stage=paper``)."""

from __future__ import annotations

from common.demo import ToyResult

from .experiments import run_paper, run_toy

STAGES = {"toy": run_toy, "paper": run_paper}
DEMO_OVERRIDES: list[str] = [
    "method.seeds=[0]",
    "method.arms=[coevolve_frozen,coevolve_dpo]",
    "method.warmup_steps=5",
    "method.warmup_molecules=300",
    "method.warmup_pairs=64",
    "method.search.budget=44",
    "method.search.n_pairs_max=8",
    "method.dpo.num_train_epochs=1",
    "method.dpo.per_device_train_batch_size=4",
    "method.search.pop_size=8",
    "method.local_max_new_tokens=32",
]
HEADLINE: tuple[str, str] = ("coevolve_dpo/hypervolume", "coevolve_frozen/hypervolume")
TOY_RESULT = ToyResult(
    method=0.2589,
    baseline=0.2513,
    higher_is_better=True,
    verdict="effect",
    command="icml26 experiment=mcce_toy",
)
