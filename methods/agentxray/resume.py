"""Checkpoint and lossless resume of one AgentXRay search (our inference: the official code has none).

After every MCTS iteration (one evaluation batch) :class:`SearchCheckpoint` writes the whole search
state atomically (``state.pkl``): the iteration count, the rewards, the tree with every node's
content, the search RNG, the profile generator's state, every ``CostMeter`` counter, the executor's
failure / no-code counts, rollout steps and executions. The expensive calls of the running
iteration (every ``WorkflowExecutor.step``: agent LLM calls and tool runs; every profile-generator
call) go through a :class:`common.checkpoint.CallJournal` (``journal/iter<i>.jsonl``) together with
what they did to the counters, so a process killed in the middle of iteration ``i`` resumes from the
state after ``i − 1`` and replays the calls ``i`` already paid for instead of repeating them.

The folder is bound by :func:`common.checkpoint.check_settings` to the search config (seed
included), a fingerprint of the training pairs, and the identity of the LLM, the tools, the
generator and the similarity; a resume with anything else is refused naming the differing key.
Only a call that finished but was killed before its journal line was written is run again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.checkpoint import (
    CallJournal,
    atomic_pickle,
    check_settings,
    fingerprint,
    load_pickle,
    plain,
)

from .costs import CostMeter
from .primitives import Primitive

if TYPE_CHECKING:
    from .mcts import AgentXRaySearch

_ID_ATTRS = (
    "model",
    "base_url",
    "defaults",
    "seed",
    "tokens_per_profile",
    "model_menu",
    "reasoning_menu",
    "default_model",
)
_METER_FIELDS = ("tokens", "completion", "calls", "counted_by")


def describe(obj: Any) -> Any:
    """What identifies an LLM client, generator, tool or similarity for :func:`check_settings`:
    ``obj.identity()`` when it has one, else its class (or function name) and public settings."""
    if hasattr(obj, "identity"):
        return obj.identity()
    if callable(obj) and hasattr(obj, "__qualname__"):  # a function (similarity, tool)
        return f"{obj.__module__}.{obj.__qualname__}"
    out: dict[str, Any] = {"class": f"{type(obj).__module__}.{type(obj).__qualname__}"}
    out.update({k: plain(getattr(obj, k)) for k in _ID_ATTRS if hasattr(obj, k)})
    if hasattr(obj, "pool"):
        out["pool"] = [p.name for p in obj.pool]
    if hasattr(obj, "llm"):
        out["llm"] = describe(obj.llm)
    return out


def search_settings(search: AgentXRaySearch, train: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The settings a checkpoint folder is bound to (one key per setting, ``seed`` at the top)."""
    ex = search.executor
    return {
        **plain(search.cfg),
        "train": fingerprint([list(p) for p in train]),
        "n_train": len(train),
        "similarity": describe(search.sim),
        "llm": describe(ex.llm),
        "tools": {name: describe(fn) for name, fn in sorted(ex.tools.items())},
        "space_tools": list(search.space.tool_names),
        "generator": describe(search.space.generator),
    }


def _meter_state(m: CostMeter) -> dict[str, dict[str, int]]:
    return {f: dict(getattr(m, f)) for f in _METER_FIELDS}


def _load_meter(m: CostMeter, state: dict[str, dict[str, int]]) -> None:
    for f in _METER_FIELDS:
        setattr(m, f, dict(state[f]))


def _tag(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(plain(parts), sort_keys=True).encode()).hexdigest()[:16]


class _JournaledGenerator:
    """Stands in for the space's profile generator while a checkpointed search runs."""

    def __init__(self, ckpt: SearchCheckpoint, inner: Any) -> None:
        self.ckpt, self.inner = ckpt, inner

    def __call__(self, task: str, siblings: Sequence[Primitive]) -> Primitive | None:
        def live() -> dict[str, Any] | None:
            p = self.inner(task, siblings)
            return None if p is None else p.to_dict()

        tag = _tag("generator", task, [s.to_dict() for s in siblings])
        out = self.ckpt.journaled(live, tag, generator=True)
        return None if out is None else Primitive.from_dict(out)


class SearchCheckpoint:
    """Binds ``folder`` to ``search``'s settings; saves after each iteration, journals its calls.

    Args:
        folder: the search's own checkpoint folder (created; refused when made with other settings).
        search: the search to checkpoint; its generator is wrapped until :meth:`close`.
        train: the training pairs (their fingerprint is part of the settings).
    """

    def __init__(
        self, folder: str | Path, search: AgentXRaySearch, train: Sequence[tuple[str, str]]
    ) -> None:
        self.folder = Path(folder)
        check_settings(self.folder, search_settings(search, train))
        self.search = search
        self.generator = search.space.generator
        self.meters = [search.executor.meter]
        gen_meter = getattr(self.generator, "meter", None)
        if gen_meter is not None and gen_meter is not search.executor.meter:
            self.meters.append(gen_meter)
        self.journal: CallJournal | None = None
        search.space.generator = _JournaledGenerator(self, self.generator)

    # ------------------------------------------------------------------ state
    def _state(self, iteration: int, rewards: list[float]) -> dict[str, Any]:
        s, ex = self.search, self.search.executor
        return {
            "iteration": iteration,
            "rewards": list(rewards),
            "tree": s.root.to_dict(),
            "rng": s.rng.getstate(),
            "generator": self._generator_state(),
            "meters": [_meter_state(m) for m in self.meters],
            "executor": {"failures": ex.failures, "no_code": ex.no_code},
            "rollout_steps": s.rollout_steps,
            "executions": s.executions,
        }

    def _generator_state(self) -> Any:
        return self.generator.state_dict() if hasattr(self.generator, "state_dict") else None

    def restore(self) -> tuple[int, list[float]]:
        """Load ``state.pkl`` into the search (or write the initial state); ``(iteration, rewards)``."""
        from .mcts import Node

        path = self.folder / "state.pkl"
        if not path.exists():
            atomic_pickle(path, self._state(0, []))
            return 0, []
        st = load_pickle(path)
        s, ex = self.search, self.search.executor
        s.root = Node.from_dict(st["tree"])
        s.rng.setstate(st["rng"])
        if st["generator"] is not None:
            self.generator.load_state_dict(st["generator"])
        for m, ms in zip(self.meters, st["meters"], strict=True):
            _load_meter(m, ms)
        ex.failures, ex.no_code = st["executor"]["failures"], st["executor"]["no_code"]
        s.rollout_steps, s.executions = st["rollout_steps"], st["executions"]
        for old in (self.folder / "journal").glob("iter*.jsonl"):
            if int(old.stem[4:]) < st["iteration"]:  # saved, but killed before the cleanup
                old.unlink()
        return st["iteration"], list(st["rewards"])

    def begin(self, iteration: int) -> None:
        """Open the journal of ``iteration`` (replaying what a killed run recorded in it)."""
        self.journal = CallJournal(self.folder / "journal" / f"iter{iteration:06d}.jsonl")

    def save(self, iteration: int, rewards: list[float]) -> None:
        """After iteration ``iteration − 1``: write the state atomically, then drop its journal."""
        atomic_pickle(self.folder / "state.pkl", self._state(iteration, rewards))
        if self.journal is not None:
            self.journal.path.unlink(missing_ok=True)
            self.journal = None

    def close(self) -> None:
        """Give the search its own generator back."""
        self.search.space.generator = self.generator

    # ------------------------------------------------------------------ journaled calls
    def journaled(self, fn: Any, tag: str, generator: bool = False) -> Any:
        """:func:`journaled_call` in this iteration's journal, with the search's counters."""
        if self.journal is None:
            raise RuntimeError("SearchCheckpoint.begin(iteration) must open a journal first")
        gen = self.generator if generator else None
        return journaled_call(self.journal, fn, tag, self.meters, self.search.executor, gen)

    def step(self, p: Primitive, task: str, content: str) -> str | None:
        """A journaled ``WorkflowExecutor.step`` (agent LLM call or tool run)."""
        return self.journaled(
            lambda: self.search.executor.step(p, task, content),
            _tag("step", p.to_dict(), task, content),
        )


def journaled_call(
    journal: CallJournal,
    fn: Any,
    tag: str,
    meters: Sequence[CostMeter],
    executor: Any,
    generator: Any = None,
) -> Any:
    """``fn()`` once across processes. Live, its JSON-able result goes to ``journal`` with what it
    added to ``meters`` and ``executor.failures`` (and ``generator``'s state after it); on a replay
    the recorded result comes back and those changes are applied, so every counter ends as if the
    call had run."""

    def counters() -> tuple[list[dict[str, dict[str, int]]], int]:
        return [_meter_state(m) for m in meters], executor.failures

    def live() -> dict[str, Any]:
        (m0, f0) = counters()
        out = fn()
        (m1, f1) = counters()
        delta = [
            {f: {k: v - b[f].get(k, 0) for k, v in a[f].items()} for f in _METER_FIELDS}
            for a, b in zip(m1, m0, strict=True)
        ]
        gen = generator.state_dict() if hasattr(generator, "state_dict") else None
        return {"out": out, "meters": delta, "failures": f1 - f0, "generator": gen}

    replayed = journal.replayed
    rec = journal.call(live, tag=tag)
    if journal.replayed > replayed:
        for m, d in zip(meters, rec["meters"], strict=True):
            for f in _METER_FIELDS:
                cur = getattr(m, f)
                for k, v in d[f].items():
                    cur[k] = cur.get(k, 0) + v
        executor.failures += rec["failures"]
        if rec["generator"] is not None:
            generator.load_state_dict(rec["generator"])
    return rec["out"]


def run_journaled(
    journal: CallJournal, executor: Any, wf: Sequence[Primitive], task: str
) -> str | None:
    """``WorkflowExecutor.run`` (Φ(s, τ), official code ``agents/base.py``) with every step journaled."""
    content = ""
    for p in wf:
        out = journaled_call(
            journal,
            lambda p=p, content=content: executor.step(p, task, content),
            _tag("step", p.to_dict(), task, content),
            [executor.meter],
            executor,
        )
        if out is None:
            return None
        content = out
    return content
