"""``icml26 experiment=mcce_toy`` (``stage=toy``) and ``experiment=mcce_paper`` (``stage=paper``)."""

from __future__ import annotations

from common.demo import ToyResult

from .paper import run_paper
from .toy import run_toy

STAGES = {"toy": run_toy, "paper": run_paper}
DEMO_OVERRIDES: list[str] = [
    "method.seeds=[0]",
    "method.arms=[coevolve_frozen,coevolve_dpo]",
    "method.warmup_steps=80",  # a local model good enough for DPO to steer
    "method.warmup_molecules=2000",
    "method.warmup_pairs=256",
    "method.search.budget=240",  # the full toy's budget: DPO rounds need it
    "method.search.n_pairs_max=32",
    "method.dpo.num_train_epochs=2",
    "method.dpo.per_device_train_batch_size=8",
    "method.search.pop_size=16",
    "method.local_max_new_tokens=64",
]
HEADLINE: tuple[str, str] = ("coevolve_dpo/hypervolume", "coevolve_frozen/hypervolume")
TOY_RESULT = ToyResult(
    method=0.2589,
    baseline=0.2513,
    higher_is_better=True,
    verdict="effect",
    command="icml26 experiment=mcce_toy",
    minutes=1.8,  # doc "Toy results": re-run on the idle machine, 106 s wall
)
