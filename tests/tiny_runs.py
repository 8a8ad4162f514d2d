"""Each method's toy shrunk to seconds: the quick tier's one end-to-end run per method.

``TINY_OVERRIDES[slug]`` goes on top of ``experiment=<slug>_toy`` and the method's ``DEMO_OVERRIDES``
(``tests/test_contract.py::test_tiny_run_writes_results``). Only sizes shrink (steps, samples, seeds,
arms kept to the ``HEADLINE`` pair): the run goes through the same stage code as the toy and must
still write both ``HEADLINE`` metrics. The demo-size run itself is ``test_demo_run_writes_results``
(``make test-all``).

    python -m tests.tiny_runs maxrl [extra overrides ...]          # time the tiny run (wall, CPU s)
    python -m tests.tiny_runs --demo maxrl [extra overrides ...]   # time the demo size instead
"""

from __future__ import annotations

TINY_OVERRIDES: dict[str, list[str]] = {
    "agentxray": [],
    "apo": [],
    "autoqra": [
        "method.toy.pretrain_steps=20",
        "method.toy.hf_steps=2",
        "method.toy.final_steps=4",
    ],
    "epicache": [
        "method.train_steps=20",
        "method.train_induction_steps=10",
        "method.n_questions=2",
    ],
    "georl": [],
    "instruction_selection": [],
    "kmkc": [],
    "kore": [],
    "llminertia": [],
    "maxrl": [],
    "mcce": [
        "method.warmup_steps=5",
        "method.warmup_molecules=200",
        "method.warmup_pairs=32",
        "method.search.budget=48",
        "method.search.n_pairs_max=8",
        "method.dpo.num_train_epochs=1",
        "method.local_max_new_tokens=24",
    ],
    "sacopt": [],
    "salo": [],
    "slicefine": ["method.toy.steps=5", "method.toy.n_train=64", "method.toy.n_test=32"],
    "sv_features": [],
    "swordsman": ["method.toy.train_steps=10", "method.toy.n_eval=2"],
    "threadweaver": ["method.toy.n_train=16", "method.toy.sft_steps=5", "method.toy.n_eval=2"],
    "weasel": [],
    "webworld": [],
}


def main(argv: list[str]) -> None:
    import math
    import os
    import tempfile
    import time

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("ICML26_PROGRESS", "0")
    from common.registry import compose, get_method, run_method
    from common.threads import torch_threads

    demo = argv[:1] == ["--demo"]
    slug, extra = argv[int(demo)], argv[int(demo) + 1 :]
    module = get_method(slug)
    tiny = [] if demo else TINY_OVERRIDES[slug]
    overrides = [f"experiment={slug}_toy", *module.DEMO_OVERRIDES, *tiny, *extra]
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = compose(overrides, run_dir=run_dir)
        t0, c0 = time.perf_counter(), time.process_time()
        with torch_threads(1):
            metrics = run_method(cfg)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    key, base = module.HEADLINE
    ok = all(k in metrics and math.isfinite(metrics[k]) for k in (key, base))
    print(
        f"{slug}: wall {wall:.1f} s, cpu {cpu:.1f} s; {key}={metrics.get(key)} "
        f"{base}={metrics.get(base)}; headline keys {'present' if ok else 'MISSING'}"
    )


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
