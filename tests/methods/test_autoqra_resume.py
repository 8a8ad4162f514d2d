"""AutoQRA kill -9 / resume (issue 32 point 2): real child processes, exact counts, settings refused.

A child process runs a small proxy search (both stages) on a checkpoint folder and SIGKILLs itself at
the start of evaluation call N+1, for several N (at the first high-fidelity promotion, inside a
generation, at Stage 2's first and at its last BO evaluation). A fresh process resumes every
folder. The resumed results must equal an uninterrupted run's, the two processes together must make
exactly the uninterrupted run's evaluation calls (none repeated, none lost, same order) and the
reported ``n_evals`` must equal the uninterrupted run's. A resume with another seed, budget, search
knob or evaluator setting is refused with a message naming the key.

Run as a script, this file is the child (``kill`` or ``resume`` mode).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

L, SEED = 6, 0
# The surrogate never fits here (min 100 pairs): a fit's first torch optimiser costs each child
# seconds of imports. Its replay across a resume is checked in-process, in test_autoqra.py
# (test_checkpoint_resume_is_exact_in_both_stages, official per-pair refits).
EVO = dict(pop=8, gens=3, promote_k=3, k_neighbors=2, surrogate_min_samples=100)
BO = dict(alpha=0.6, bo_iters=3, k_bo=3)


def _problem(seed: int = SEED, budget_scale: float = 1.0, noise: float = 0.02):
    from methods.autoqra import Importance, MemoryModel, ProxyEvaluator, SearchSpace

    rng = np.random.default_rng(7)
    space = SearchSpace((2, 3, 4, 8), (4, 8, 16), L)
    mem = MemoryModel(rng.uniform(5e5, 2e6, L), rng.uniform(2e3, 8e3, L), group_size=64)
    imp = Importance(rng.random(L), rng.random(L))
    budget = mem.budget_from_reference(4, 8) * budget_scale
    return space, mem, imp, budget, ProxyEvaluator(space, mem, imp, budget, noise=noise, seed=7)


class CountingEvaluator:
    """Logs every call (fsync'd) to ``log``; with ``kill_at`` SIGKILLs its process at call kill_at+1."""

    def __init__(self, inner, log: Path, kill_at: int | None = None):
        self.inner, self.log, self.kill_at, self.n = inner, Path(log), kill_at, 0

    def settings(self) -> dict:  # transparent: the folder is bound to the wrapped evaluator
        from methods.autoqra.state import evaluator_settings

        return evaluator_settings(self.inner)

    def evaluate(self, cfg, fidelity):
        if self.kill_at is not None and self.n == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        with open(self.log, "a") as fh:
            fh.write(f"{cfg.key()}:{fidelity}\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.n += 1
        return self.inner.evaluate(cfg, fidelity)


def _search(folder: Path | None, log: Path, kill_at: int | None = None, seed: int = SEED, **kw):
    from methods.autoqra import AutoQRA, EvolutionConfig

    space, mem, imp, budget, ev = _problem(seed=seed, **kw)
    ev = CountingEvaluator(ev, log, kill_at)
    return AutoQRA(space, mem, imp, ev, budget, EvolutionConfig(**EVO), seed=seed, **BO).run(folder)


def _summary(stage1, sel) -> dict:
    return {
        "records": [asdict(r) for r in stage1.records],
        "pareto": [asdict(r) for r in stage1.pareto],
        "hv": stage1.hv_history,
        "ops": stage1.op_counts,
        "n_evals": stage1.n_evals,
        "selection": asdict(sel),
    }


def _child(argv: list[str]) -> None:
    import torch

    torch.set_num_threads(1)
    if argv[0] == "kill":
        folder, n = Path(argv[1]), int(argv[2])
        _search(folder, folder.parent / f"{folder.name}.calls1", kill_at=n)
        raise SystemExit("the search finished without being killed")
    out = {}
    for folder in map(Path, argv[2:]):
        out[folder.name] = _summary(*_search(folder, folder.parent / f"{folder.name}.calls2"))
    Path(argv[1]).write_text(json.dumps(out))


def _calls(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _files(folder: Path) -> dict[str, str]:
    names = ("phase2_pareto.json", "phase3_selected.json", "phase3_history.json")
    return {n: (folder / n).read_text() for n in names}


@pytest.mark.slow
def test_kill9_at_any_evaluation_then_resume_is_exact(tmp_path):
    from common.threads import torch_threads

    with torch_threads(1):  # the reference run, uninterrupted, in this process
        ref = json.loads(json.dumps(_summary(*_search(tmp_path / "ref", tmp_path / "ref.calls2"))))
    ref_calls = _calls(tmp_path / "ref.calls2")
    n1 = ref["n_evals"]["low"] + ref["n_evals"]["high"]
    n_bo = sum("phigh" in h for h in ref["selection"]["history"])
    assert len(ref_calls) == n1 + n_bo and n_bo >= 2  # Stage 2 ran and evaluated
    assert EVO["promote_k"] < n1 - EVO["pop"]  # at least one generation after the initial one
    # the first HF promotion, mid generation, the first and the last BO call
    kills = sorted({EVO["pop"], (EVO["pop"] + n1) // 2, n1, n1 + n_bo - 1})
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    me = str(Path(__file__).resolve())
    kids = [
        subprocess.Popen([sys.executable, me, "kill", str(tmp_path / f"k{n}"), str(n)], env=env)
        for n in kills
    ]  # started together: their imports overlap
    for n, kid in zip(kills, kids):
        assert kid.wait(timeout=120) == -signal.SIGKILL, f"child for N={n} was not killed"
        assert len(_calls(tmp_path / f"k{n}.calls1")) == n
    out = tmp_path / "resumed.json"
    folders = [str(tmp_path / f"k{n}") for n in kills]
    subprocess.run([sys.executable, me, "resume", str(out), *folders], env=env, check=True)
    resumed = json.loads(out.read_text())
    for n in kills:
        got = resumed[f"k{n}"]
        first, second = _calls(tmp_path / f"k{n}.calls1"), _calls(tmp_path / f"k{n}.calls2")
        assert first + second == ref_calls, f"N={n}: evaluations repeated, lost or reordered"
        assert got["n_evals"] == ref["n_evals"], f"N={n}: n_evals {got['n_evals']}"
        assert got == ref, f"N={n}: resumed result differs from the uninterrupted run"
        assert _files(tmp_path / f"k{n}") == _files(tmp_path / "ref")


def test_resume_with_other_settings_is_refused_naming_the_key(tmp_path):
    import pytest

    from common.checkpoint import CheckpointMismatch
    from methods.autoqra import AutoQRA, EvolutionConfig, MultiFidelityEvolution

    folder, log = tmp_path / "ck", tmp_path / "calls"
    _search(folder, log)
    n_done = len(_calls(log))
    cases = [
        (dict(seed=1), "seed: folder has 0, this run has 1"),
        (dict(budget_scale=1.1), "budget: folder has"),
        (dict(noise=0.05), "evaluator.noise: folder has 0.02, this run has 0.05"),
    ]
    for kw, msg in cases:
        with pytest.raises(CheckpointMismatch, match=msg):
            _search(folder, log, **kw)
    space, mem, imp, budget, ev = _problem()
    for evo, bo, msg in (
        ({**EVO, "pop": 9}, BO, "evolution.pop: folder has 8, this run has 9"),
        (EVO, {**BO, "alpha": 0.5}, "alpha: folder has 0.6, this run has 0.5"),
    ):
        with pytest.raises(CheckpointMismatch, match=msg):
            AutoQRA(space, mem, imp, ev, budget, EvolutionConfig(**evo), seed=SEED, **bo).run(
                folder
            )
    ck = folder / "phase2_checkpoint.json"
    with pytest.raises(CheckpointMismatch, match="seed: folder has 0, this run has 2"):
        MultiFidelityEvolution(space, mem, imp, ev, budget, EvolutionConfig(**EVO), 2, ck)
    assert len(_calls(log)) == n_done  # nothing was evaluated by a refused run
    _search(folder, log)  # the same settings still resume (everything cached)
    assert len(_calls(log)) == n_done


@pytest.mark.slow  # two CLI subprocess runs (about 8 s): make test-all
def test_cli_toy_honours_checkpoint_dir_and_refuses_another_seed(tmp_path):
    import pytest

    from common.checkpoint import CheckpointMismatch
    from common.registry import compose, run_method
    from methods.autoqra.run import DEMO_OVERRIDES

    ck = tmp_path / "ck"
    args = ["experiment=autoqra_toy", *DEMO_OVERRIDES, f"method.checkpoint_dir={ck}"]
    res = run_method(compose(args, run_dir=tmp_path / "run0"))
    settings = json.loads((ck / "settings.json").read_text())
    assert settings["seed"] == 0 and (ck / "phase2_checkpoint.json").exists()
    assert not (tmp_path / "run0" / "search").exists()
    cache = json.loads((ck / "phase2_checkpoint.cache.json").read_text())
    assert res["search/n_lf"] == sum(k.endswith(":low") and not k.startswith("bo:") for k in cache)
    with pytest.raises(CheckpointMismatch, match="seed: folder has 0, this run has 1"):
        run_method(compose([*args, "seed=1"], run_dir=tmp_path / "run1"))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    _child(sys.argv[1:])
