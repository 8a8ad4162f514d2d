"""AgentXRay checkpoints (issue 32 point 2): kill -9 a real child process mid-search, resume in a
fresh one, get the uninterrupted result with every expensive call run exactly once."""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import signal
from pathlib import Path

import pytest

from common.checkpoint import CheckpointMismatch
from methods.agentxray import (
    AgentXRaySearch,
    CostMeter,
    MCTSConfig,
    Primitive,
    PrimitiveSpace,
    StaticProfileGenerator,
    WorkflowExecutor,
    sfe,
)
from methods.agentxray.costs import count_tokens
from methods.agentxray.xraybench import HIDDEN_CHAIN, TOY_TOOLS, ToyChat, make_tasks, toy_agent_pool

_BB = WorkflowExecutor(ToyChat(), TOY_TOOLS, CostMeter())
TRAIN = [(t, _BB.run([Primitive("agent", n) for n in HIDDEN_CHAIN], t)) for t in make_tasks(2, 0)]
CFG = dict(iterations=6, max_children=4, max_depth=4, min_agent_ratio=0.5)
SEED = 2  # a seed whose small search earns non-zero rewards (so Q̄ and UCB matter)


class _Calls:
    """Logs every expensive call that really runs; SIGKILLs the process at the start of call
    ``kill_at`` (before it runs or is logged)."""

    def __init__(self, log: Path, kill_at: int | None) -> None:
        self.log, self.kill_at, self.n = log, kill_at, 0

    def __call__(self, kind: str, detail: str) -> None:
        self.n += 1
        if self.n == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        with open(self.log, "a") as fh:
            fh.write(f"{kind} {hashlib.sha256(detail.encode()).hexdigest()[:12]}\n")
            fh.flush()
            os.fsync(fh.fileno())


class _Chat(ToyChat):
    def __init__(self, calls: _Calls) -> None:
        self.calls = calls

    def chat(self, messages, **kw):
        self.calls("agent", json.dumps(messages))
        return super().chat(messages, **kw)


class _Gen(StaticProfileGenerator):
    calls: _Calls | None = None

    def __call__(self, task, siblings):
        self.calls("generator", task + "|" + ",".join(s.name for s in siblings))
        return super().__call__(task, siblings)


def _search(calls: _Calls, seed: int = 0, cfg: dict | None = None) -> AgentXRaySearch:
    meter = CostMeter()
    tools = {
        name: (lambda c, name=name, fn=fn: (calls("tool", name + c), fn(c))[1])
        for name, fn in list(TOY_TOOLS.items())[2:]  # formatter, dependency_extractor
    }
    gen = _Gen(toy_agent_pool(), seed=seed, meter=meter)
    gen.calls = calls
    ex = WorkflowExecutor(_Chat(calls), tools, meter)
    space = PrimitiveSpace(list(tools), gen)
    return AgentXRaySearch(space, ex, sfe, MCTSConfig(**(cfg or CFG), seed=seed))


def _child(folder: str | None, log: str, kill_at: int | None, out: str) -> None:
    s = _search(_Calls(Path(log), kill_at), seed=SEED)
    res = s.run(TRAIN, checkpoint_dir=folder)
    summary = {
        "workflow": [p.to_dict() for p in res.best_workflow],
        "rewards": res.train_rewards,
        "tokens": res.tokens,
        "rollout_steps": res.rollout_steps,
        "executions": res.executions,
        "failures": s.executor.failures,
        "no_code": s.executor.no_code,
        "tree": res.tree.to_dict(),
        "generator": s.space.generator.state_dict(),
    }
    Path(out).write_text(json.dumps(summary))
    os._exit(0)


def _run_child(tmp: Path, name: str, folder: Path | None, kill_at: int | None) -> int:
    ctx = mp.get_context("fork")  # a real child process that inherits the loaded imports
    p = ctx.Process(
        target=_child,
        args=(folder and str(folder), str(tmp / f"{name}.log"), kill_at, str(tmp / f"{name}.json")),
    )
    p.start()
    p.join(60)
    return p.exitcode


@pytest.mark.slow
def test_kill9_at_any_call_then_resume_gives_the_uninterrupted_run(tmp_path):
    count_tokens("warm the tokenizer up before forking")
    assert _run_child(tmp_path, "ref", None, None) == 0
    ref = json.loads((tmp_path / "ref.json").read_text())
    ref_calls = (tmp_path / "ref.log").read_text().splitlines()
    total = len(ref_calls)
    assert total > 20 and {c.split()[0] for c in ref_calls} == {"agent", "generator", "tool"}
    assert sum(r > 0 for r in ref["rewards"]) >= 2
    for n in sorted({1, 2, total // 3, total // 2 + 1, total - 1}):
        folder = tmp_path / f"ckpt{n}"
        assert _run_child(tmp_path, f"killed{n}", folder, n + 1) == -signal.SIGKILL
        first = (tmp_path / f"killed{n}.log").read_text().splitlines()
        assert len(first) == n  # killed at the start of call n + 1
        assert _run_child(tmp_path, f"resumed{n}", folder, None) == 0
        second = (tmp_path / f"resumed{n}.log").read_text().splitlines()
        assert first + second == ref_calls, f"kill at call {n + 1}: a call repeated or lost"
        assert json.loads((tmp_path / f"resumed{n}.json").read_text()) == ref, n
        # the finished folder holds the final state only: no journal of a finished iteration
        assert not list((folder / "journal").glob("*.jsonl"))


def test_resume_refuses_other_settings_naming_the_key(tmp_path):
    calls = _Calls(tmp_path / "calls.log", None)
    cfg = {**CFG, "iterations": 1}
    _search(calls, seed=0, cfg=cfg).run(TRAIN, checkpoint_dir=str(tmp_path / "c"))
    n = calls.n
    with pytest.raises(CheckpointMismatch, match=r"seed: folder has 0, this run has 1"):
        _search(calls, seed=1, cfg=cfg).run(TRAIN, checkpoint_dir=str(tmp_path / "c"))
    with pytest.raises(CheckpointMismatch, match=r"iterations: folder has 1, this run has 2"):
        _search(calls, cfg={**cfg, "iterations": 2}).run(TRAIN, checkpoint_dir=str(tmp_path / "c"))
    with pytest.raises(CheckpointMismatch, match="train"):
        _search(calls, cfg=cfg).run(TRAIN[:1], checkpoint_dir=str(tmp_path / "c"))
    assert calls.n == n  # refused before any call
    # a finished search resumes to its result without a single call
    again = _search(calls, cfg=cfg)
    assert again.run(TRAIN, checkpoint_dir=str(tmp_path / "c")).train_rewards
    assert calls.n == n


def test_toy_cli_honours_checkpoint_dir(tmp_path, monkeypatch):
    from common.checkpoint import load_pickle
    from common.registry import compose, run_method
    from methods.agentxray.config import AgentXRayRunConfig
    from methods.agentxray.toy import _toy_search

    ck = tmp_path / "ck"
    overrides = [
        "experiment=agentxray_toy",
        "method.arms=[red_black]",
        "method.iterations=[3]",
        "method.seeds=[0]",
        "method.noise=[0.0]",
        "method.n_train=2",
        "method.n_test=1",
        f"method.checkpoint_dir={ck}",
    ]
    cfg = compose(overrides, run_dir=str(tmp_path / "run"))
    run_method(cfg)
    folder = ck / "toy" / "noise0" / "red_black_n3_seed0"
    st = load_pickle(folder / "state.pkl")
    assert st["iteration"] == 3 and len(st["rewards"]) == 3
    # the same search without a checkpoint gives the same workflow and counters, and resuming
    # the finished folder makes no call at all
    rc = AgentXRayRunConfig(n_train=2)
    hidden = [Primitive("agent", n) for n in rc.hidden_chain]
    train = [(t, _BB.run(hidden, t)) for t in make_tasks(2, rc.data_seed)]
    fresh = _toy_search("red_black", rc, 3, 0, train, None)
    calls = []
    chat = ToyChat.chat
    monkeypatch.setattr(ToyChat, "chat", lambda self, m, **kw: calls.append(1) or chat(self, m))
    assert _toy_search("red_black", rc, 3, 0, train, None, str(folder)) == fresh
    assert calls == []


def test_paper_stage_resumes_without_a_request_to_the_server(tmp_path, monkeypatch):
    """stage=paper with method.checkpoint_dir: with the finished row removed, a rerun restores the
    search from its state and replays the test evaluation from the journal: no request at all."""
    from common.registry import compose, run_method
    from tests.methods.test_agentxray import _fake_openai_server, _hub_cache, _scripted_reply

    cache, _ = _hub_cache(tmp_path)
    seen: list[str] = []
    httpd, url = _fake_openai_server(_scripted_reply(seen), seen)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    ck = tmp_path / "ck"
    overrides = [
        "experiment=agentxray_paper",
        f"method.hub_cache_dir={cache}",
        f"method.base_url={url}",
        "method.sets=[metagpt]",
        "method.arms=[red_black]",
        "method.seeds=[0]",
        "method.tools=[syntax_error_checker]",
        "method.search.iterations=3",
        "method.search.max_children=4",
        "method.search.max_depth=3",
        f"method.checkpoint_dir={ck}",
    ]

    def run(name: str) -> dict:
        out = run_method(compose(overrides, run_dir=str(tmp_path / name)))
        return {k: v for k, v in out.items() if "seconds" not in k}

    try:
        first = run("a")
        n = len(seen)
        assert n > 0
        folder = ck / "paper" / "metagpt" / "red_black_seed0"
        assert (folder / "row.json").exists()  # a finished row is returned as is on a rerun
        (folder / "row.json").unlink()
        assert (folder / "test_journal.jsonl").read_text().strip()
        assert run("b") == first and len(seen) == n  # search restored, test calls replayed
    finally:
        httpd.shutdown()
        httpd.server_close()
