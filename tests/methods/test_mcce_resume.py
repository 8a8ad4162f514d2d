"""Lossless resume of the MCCE loop (issue 32 point 2).

A real child process runs a small search and SIGKILLs itself at the start of its (N+1)-th oracle or
LLM call; a fresh process resumes from the checkpoint folder. The final result (archive, population,
memory, logs, metrics, local weights) must equal an uninterrupted run's, and the calls executed over
all processes, in order, must be the uninterrupted run's calls (none repeated, none lost). The
counter file is appended by the real oracle and the real chat models just before they run, so a
replayed call never reaches it.

Run as a script, this file is the child: ``python test_mcce_resume.py SPEC_JSON``.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------ the child
class _Counter:
    """Appends one line per executed call; kills the process at the start of call ``kill_at + 1``."""

    def __init__(self, path: str, kill_at: int | None) -> None:
        # private: not part of the chat model's identity (the folder's settings)
        self._path, self._kill_at = path, kill_at

    def before(self, label: str) -> None:
        n = len(Path(self._path).read_text().splitlines()) if os.path.exists(self._path) else 0
        if self._kill_at is not None and n == self._kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        with open(self._path, "a") as fh:
            fh.write(label + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj).encode()).hexdigest()[:12]


class _CountedChat:
    """A chat model that reports each call to the counter before delegating."""

    def __init__(self, inner, counter: _Counter, name: str) -> None:
        self.inner, self.counter, self.name = inner, counter, name

    def chat(self, messages, **kw):
        return self.chat_batch([messages], **kw)[0]

    def chat_batch(self, batch, **kw):
        self.counter.before(f"llm {self.name} {_digest(batch)}")
        if callable(getattr(self.inner, "chat_batch", None)):
            return self.inner.chat_batch(batch)
        return [self.inner(m) for m in batch]  # a SelfiesExplorer answers one conversation


def _search(spec: dict) -> dict:
    """The small search of ``spec``; returns everything a resume must reproduce."""
    import random

    import numpy as np

    from methods.mcce import (
        MCCEConfig,
        MCCEOptimizer,
        SelfiesExplorer,
        load_seed_smiles,
        toy_problem,
    )

    counter = _Counter(spec["counter"], spec.get("kill_at"))
    seed = spec["seed"]
    random.seed(seed)
    np.random.seed(seed)
    problem = toy_problem()
    evaluate = problem.evaluate

    def counted_evaluate(values):
        counter.before(f"oracle {_digest(list(values))}")
        return evaluate(values)

    problem.evaluate = counted_evaluate  # type: ignore[method-assign]
    api = _CountedChat(SelfiesExplorer(seed=100 + seed), counter, "api")
    model = None
    if spec["local"] == "explorer":
        local = _CountedChat(SelfiesExplorer(seed=200 + seed), counter, "local")
        mode = "coevolve_frozen"
    else:
        local, model = _tiny_local(seed, counter)
        mode = "coevolve_dpo"
    cfg = MCCEConfig(
        mode=mode,
        pop_size=8,
        budget=spec["budget"],
        experience_prob=0.0,
        prompt_style="compact",
        response_sep="",
        min_archive_for_training=4,
        n_pairs_max=8,
        seed=seed,
    )
    res = MCCEOptimizer(
        problem, api, local, cfg, load_seed_smiles()[:12], checkpoint_dir=spec["folder"]
    ).run()
    out = {
        "archive": [(c.value, c.total, c.origin, c.generation) for c in res.archive.items],
        "population": [c.value for c in res.population],
        "memory": [(r["prompt"], r["response"]) for r in res.memory.records],
        "history": res.history,
        "train_log": res.train_log,
        "metrics": res.metrics,
        "n_evaluations": res.archive.n_evaluations,
    }
    if model is not None:
        out["weights"] = hashlib.sha256(
            b"".join(p.detach().numpy().tobytes() for p in model.parameters())
        ).hexdigest()
    return out


def _tiny_local(seed: int, counter: _Counter):
    """A TinyLMChat (torch Generator + global torch RNG) and a stand-in training round that draws
    from the global torch and numpy generators, so a resume that restored either wrongly, or lost
    the trained weights, ends elsewhere. TRL is replaced (start-up cost); the journal is not."""
    import types

    import numpy as np
    import selfies as sf
    import torch

    torch.set_num_threads(1)
    fake = types.ModuleType("methods.mcce.train")

    class StandInConfig:
        min_pairs = 2

        def to_dict(self):
            return {"noise": 0.05}

    def run_dpo_round(policy, ref, tok, ds, args):
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(0.05 * torch.randn_like(p))
        return {"dpo/pairs": float(len(ds)), "draw": float(np.random.rand())}

    fake.ROUND_CONFIGS = {"coevolve_dpo": StandInConfig}
    fake.round_args = lambda cls, *a, **k: cls()
    fake.run_dpo_round = fake.run_sft_round = run_dpo_round
    sys.modules["methods.mcce.train"] = fake
    from methods.mcce import TinyLMChat, build_selfies_tokenizer, load_seed_smiles, tiny_gpt
    from methods.mcce.toy_world import selfies_vocab

    tok = build_selfies_tokenizer(selfies_vocab([sf.encoder(s) for s in load_seed_smiles()]))
    model = tiny_gpt(len(tok), tok.pad_token_id, tok.eos_token_id, n_positions=128, seed=0)
    chat = TinyLMChat(model, tok, max_new_tokens=24, seed=seed)
    local = _CountedChat(chat, counter, "local")
    local.model, local.tokenizer = model, tok  # what a training mode needs
    return local, model


def _run_child(spec: dict, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, __file__, json.dumps(spec)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _calls(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _kill_and_resume(tmp_path: Path, base: dict, kills: list[int]) -> str:
    """One folder killed at each N in ``kills`` in turn, then finished by a fresh process; the
    first child also runs the uninterrupted reference (in its own folder) before its killed run,
    which saves a process start. Returns the reference result (JSON text)."""
    spec = dict(base, folder=str(tmp_path / "run"), counter=str(tmp_path / "run.txt"))
    ref = {"folder": str(tmp_path / "ref"), "counter": str(tmp_path / "ref.txt")}
    ref["out"] = str(tmp_path / "result.json")
    for i, n in enumerate(kills):
        proc = _run_child(dict(spec, kill_at=n, reference=ref if i == 0 else None))
        assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
        assert len(_calls(tmp_path / "run.txt")) == n  # it died at the start of call n + 1
    expected = (tmp_path / "result.json").read_text()  # JSON text: a NaN-safe comparison
    ref_calls = _calls(tmp_path / "ref.txt")
    assert max(kills) < len(ref_calls) - 1  # every kill landed inside the run
    done = _run_child(spec)  # a fresh process resumes and finishes
    assert done.returncode == 0, done.stderr[-3000:]
    # the same calls, in the same order, each executed once over all processes
    assert _calls(tmp_path / "run.txt") == ref_calls
    assert done.stdout.splitlines()[-1] == expected
    res = json.loads(expected)
    assert res["n_evaluations"] == len(res["archive"])
    return expected


@pytest.mark.slow
# ------------------------------------------------------------------------------ the tests
def test_kill_at_oracle_and_llm_calls_then_resume_is_lossless(tmp_path):
    """Kills at call 1 (the initial population's oracle call, before any checkpoint), call 3 (an
    oracle call after its generation's LLM call was journaled) and call 6 (an LLM call at a
    generation boundary), resumed in turn; both chat models are seeded SELFIES explorers."""
    base = {"seed": 0, "budget": 40, "local": "explorer"}
    _kill_and_resume(tmp_path, base, kills=[0, 2, 5])
    labels = _calls(tmp_path / "ref.txt")
    assert labels[0].startswith("oracle") and labels[2].startswith("oracle")
    assert labels[5].startswith("llm")


@pytest.mark.slow
def test_resume_restores_torch_generators_and_trained_weights(tmp_path):
    """The local model is a tiny GPT sampled through its own torch Generator and trained (stand-in
    round) on the global torch and numpy generators; killed inside the generation after a
    training round, so the resume loads the trained weights and replays a local-model call."""
    base = {"seed": 3, "budget": 30, "local": "tiny"}
    result = json.loads(_kill_and_resume(tmp_path, base, kills=[6]))
    assert result["train_log"] and result["weights"]  # training rounds ran


def test_resume_with_other_settings_is_refused_naming_the_key(tmp_path):
    from common.checkpoint import CheckpointMismatch
    from methods.mcce import (
        MCCEConfig,
        MCCEOptimizer,
        SelfiesExplorer,
        load_seed_smiles,
        toy_problem,
    )

    def opt(seed: int, goals=None, explorer_seed: int = 1):
        problem = toy_problem()
        if goals is not None:
            problem.goals, problem.directions = goals, ["max"] * len(goals)
        cfg = MCCEConfig(
            mode="single_api",
            pop_size=8,
            budget=30,
            experience_prob=0.0,
            prompt_style="compact",
            response_sep="",
            seed=seed,
        )
        api = _CountedChat(
            SelfiesExplorer(seed=explorer_seed),
            _Counter(str(tmp_path.parent / "calls.txt"), None),
            "api",
        )
        init = load_seed_smiles()[:12]
        return MCCEOptimizer(problem, api, None, cfg, init, checkpoint_dir=str(tmp_path))

    opt(0).run(max_generations=1)
    n_state = (tmp_path / "state.pkl").read_bytes()
    with pytest.raises(CheckpointMismatch, match=r"seed: folder has 0, this run has 1") as err:
        opt(1).run()
    assert "pop_size" not in str(err.value)  # only what differs is named
    with pytest.raises(CheckpointMismatch, match=r"problem:"):
        opt(0, goals=["qed", "celecoxib_sim"]).run()
    with pytest.raises(CheckpointMismatch, match=r"api:"):
        opt(0, explorer_seed=2).run()
    assert (tmp_path / "state.pkl").read_bytes() == n_state  # nothing was written
    res = opt(0).run()  # the same settings resume and finish
    assert len(res.archive) == 30


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    sys.path.insert(0, str(REPO))
    if spec.get("reference"):  # the uninterrupted run, in its own folder, then the real one
        ref = spec["reference"]
        result = _search(dict(spec, kill_at=None, folder=ref["folder"], counter=ref["counter"]))
        Path(ref["out"]).write_text(json.dumps(result))
    print(json.dumps(_search(spec)))
