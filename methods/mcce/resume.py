"""Lossless resume of an MCCE run (our inference; the official code has no resume).

The official loop (`algorithm/MOO.py::run`) keeps its state in memory only. A run here can be killed
(``kill -9``) at any point and resumed with no LLM or oracle call repeated or lost:

* every LLM call (``MCCEOptimizer._call``) and every oracle call (``problem.evaluate`` from
  ``Archive.add`` and the RL reward) goes through one :class:`common.checkpoint.CallJournal`;
  each record holds the call's result and the state of every random generator *after* the call, so
  a replayed call leaves the generators where the executed one left them;
* the per-generation checkpoint (``state.pkl``) records the journal position and the generators'
  states, so a resume restarts the interrupted generation and replays its finished calls;
* the folder is bound (:func:`common.checkpoint.check_settings`) to the search config, the seed, the
  problem and oracles, both chat models and the training config: a resume with other settings is
  refused with a message naming each differing key.

Random generators are found by walking the chat models' attributes (:func:`find_rngs`):
``random.Random``, ``numpy.random.Generator`` / ``RandomState`` and ``torch.Generator`` (e.g.
``SelfiesExplorer.rng`` inside a ``ScriptedChat``, ``TinyLMChat.gen``), plus the global ``random``,
numpy and torch (CPU, and CUDA once initialised) generators.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import json
import logging
import os
import pickle
import random
import sys
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from common.checkpoint import CallJournal, atomic_pickle, check_settings, load_pickle, plain

from .core import Archive
from .memory import TrajectoryMemory
from .prompts import ParseStats

logger = logging.getLogger(__name__)
FORMAT = 2  # checkpoint layout: state.pkl + journal.jsonl + settings.json (+ local_v<k>.pt)

_SCALARS = (str, int, float, bool, type(None))
# how a chat model is reached, not what it answers: another endpoint may serve the same model
_TRANSPORT = {"base_url", "timeout", "max_retries", "backoff", "max_backoff", "max_workers"}


def _is_rng(obj: Any) -> bool:
    if isinstance(obj, (random.Random, np.random.Generator, np.random.RandomState)):
        return True
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Generator)


def _is_module(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


def find_rngs(roots: dict[str, Any], depth: int = 4) -> list[tuple[str, Any]]:
    """Every random generator reachable from ``roots`` through attributes, as ``(path, rng)``
    (our inference).

    The walk visits ``vars(obj)`` in sorted order up to ``depth`` levels, never enters torch modules
    (their weights are checkpointed separately), classes or containers, and visits each object once.
    """
    out: list[tuple[str, Any]] = []
    seen: set[int] = set()

    def walk(path: str, obj: Any, d: int) -> None:
        if obj is None or isinstance(obj, _SCALARS) or id(obj) in seen:
            return
        seen.add(id(obj))
        if _is_rng(obj):
            out.append((path, obj))
            return
        if d == 0 or isinstance(obj, type) or _is_module(obj) or not hasattr(obj, "__dict__"):
            return
        try:
            attrs = vars(obj)
        except TypeError:
            return
        for k in sorted(attrs):
            walk(f"{path}.{k}", attrs[k], d - 1)

    for name, root in roots.items():
        walk(name, root, depth)
    return out


def _get(rng: Any) -> Any:
    if isinstance(rng, random.Random):
        return rng.getstate()
    if isinstance(rng, np.random.Generator):
        return rng.bit_generator.state
    if isinstance(rng, np.random.RandomState):
        return rng.get_state()
    return rng.get_state().numpy().copy()  # torch.Generator: a uint8 tensor


def _set(rng: Any, state: Any) -> None:
    if isinstance(rng, random.Random):
        rng.setstate(state)
    elif isinstance(rng, np.random.Generator):
        rng.bit_generator.state = state
    elif isinstance(rng, np.random.RandomState):
        rng.set_state(state)
    else:
        import torch

        rng.set_state(torch.from_numpy(np.asarray(state, dtype=np.uint8)))


def capture_rngs(rngs: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """The states of ``rngs`` and of the global ``random``, numpy and torch generators (our inference)."""
    state: dict[str, Any] = {
        "random": random.getstate(),
        "numpy": np.random.get_state(),
        "own": {path: _get(r) for path, r in rngs},
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch"] = torch.get_rng_state().numpy().copy()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = [s.numpy().copy() for s in torch.cuda.get_rng_state_all()]
    return state


def restore_rngs(rngs: Sequence[tuple[str, Any]], state: dict[str, Any]) -> None:
    """Set ``rngs`` and the global generators to ``state`` (from :func:`capture_rngs`).

    Raises:
        ValueError: ``state`` was captured from other generators (the chat models changed).
    """
    own = state["own"]
    paths = [p for p, _ in rngs]
    if sorted(paths) != sorted(own):
        raise ValueError(
            f"the saved random generators {sorted(own)} are not the chat models' {sorted(paths)}"
        )
    random.setstate(state["random"])
    np.random.set_state(state["numpy"])
    for path, r in rngs:
        _set(r, own[path])
    if "torch" in state:
        import torch

        torch.set_rng_state(torch.from_numpy(state["torch"]))
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([torch.from_numpy(s) for s in state["cuda"]])


def pack(obj: Any) -> str:
    """``obj`` as compact JSON-able text (zlib-compressed pickle, base64) for a journal record."""
    return base64.b64encode(zlib.compress(pickle.dumps(obj, protocol=4))).decode()


def unpack(text: str) -> Any:
    """The object :func:`pack` wrote (only journals this library wrote)."""
    return pickle.loads(zlib.decompress(base64.b64decode(text)))


def digest(values: Any) -> str:
    """A short sha256 of a JSON-able value (a journal record's tag)."""
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]


def _qualname(obj: Any) -> str:
    named = isinstance(obj, type) or (callable(obj) and hasattr(obj, "__qualname__"))
    t = obj if named else type(obj)
    return f"{getattr(t, '__module__', '?')}.{getattr(t, '__qualname__', repr(t))}"


def llm_identity(model: Any, depth: int = 3) -> Any:
    """What identifies a chat model across processes: its class, public settings, wrapped objects,
    its network's config (class, ``name_or_path``, size) and the seeds of its generators.

    Values that change while it runs (call logs, private or ``n_*`` counters) and transport settings
    (endpoint URL, timeouts, retries) are left out; the weights are identified by their config, not
    hashed (a 7B model would take minutes).
    """
    if model is None:
        return None

    def ident(obj: Any, d: int) -> Any:
        if _is_module(obj):
            cfg = getattr(obj, "config", None)
            return {
                "class": _qualname(obj),
                "name_or_path": getattr(cfg, "_name_or_path", None),
                "config": fingerprint_of(cfg.to_dict()) if hasattr(cfg, "to_dict") else None,
                "n_params": int(sum(p.numel() for p in obj.parameters())),
            }
        out: dict[str, Any] = {"class": _qualname(obj)}
        if d == 0 or not hasattr(obj, "__dict__") or isinstance(obj, type):
            return out
        for k, v in sorted(vars(obj).items()):
            settings = isinstance(v, dict) and all(isinstance(x, _SCALARS) for x in v.values())
            if isinstance(v, _SCALARS) or settings:
                if not k.startswith(("_", "n_")) and k not in _TRANSPORT:  # counters, transport
                    out[k] = v
            elif _is_rng(v):
                out[k] = fingerprint_of(_get(v))
            elif _is_module(v) or (hasattr(v, "__dict__") and not isinstance(v, type)):
                out[k] = ident(v, d - 1)
        return out

    return ident(model, depth)


def fingerprint_of(obj: Any) -> str:
    """sha256 of a pickled or JSON-able value (identities of generator states and configs)."""
    try:
        data = json.dumps(plain(obj), sort_keys=True).encode()
    except (TypeError, ValueError):
        data = pickle.dumps(obj, protocol=4)
    return hashlib.sha256(data).hexdigest()[:16]


def problem_identity(problem: Any) -> dict[str, Any]:
    """The problem's objectives and directions, representation, target, task and, per objective,
    the oracle: a supplied callable's name, or the sha256 of the TDC model file it will load."""
    import os

    from .problems import TDC_ORACLE_FILES

    oracles: dict[str, Any] = {}
    for g in problem.goals:
        fn = getattr(problem, "oracles", {}).get(g)
        if fn is not None and "load_tdc_oracle" not in getattr(fn, "__qualname__", ""):
            oracles[g] = _qualname(fn)
        elif g in TDC_ORACLE_FILES:
            path = os.path.join(problem.oracle_dir, TDC_ORACLE_FILES[g])
            if os.path.exists(path):
                with open(path, "rb") as fh:
                    oracles[g] = "file sha256 " + hashlib.sha256(fh.read()).hexdigest()[:16]
            else:
                oracles[g] = f"missing {path}"
        else:
            oracles[g] = "built-in"
    keys = ("goals", "directions", "representation", "target", "strict", "task")
    out = {k: plain(getattr(problem, k, None)) for k in keys}
    out.update(cls=_qualname(problem), oracles=oracles)
    return out


def run_settings(
    cfg: Any, problem: Any, api: Any, local: Any, initial: Sequence[str], trainer_args: Any
) -> dict[str, Any]:
    """The settings a checkpoint folder is bound to: every search field (``seed`` among them) at
    the top level, then ``problem``, ``api``, ``local``, ``initial`` and ``trainer_args``."""
    out = dict(plain(cfg))
    targs = None
    if trainer_args is not None:
        d = trainer_args.to_dict() if hasattr(trainer_args, "to_dict") else plain(trainer_args)
        d = {k: v for k, v in d.items() if not k.endswith("_dir") and "token" not in k}
        targs = {"class": _qualname(trainer_args), "fields": fingerprint_of(d)}
    out.update(
        problem=problem_identity(problem),
        api=llm_identity(api),
        local=llm_identity(local),
        initial=digest(list(initial)),
        trainer_args=targs,
    )
    return out


class Resumable:
    """The checkpoint half of :class:`~methods.mcce.optimizer.MCCEOptimizer` (our inference).

    Files in ``checkpoint_dir``: ``settings.json`` (:func:`run_settings`), ``journal.jsonl`` (one
    record per LLM or oracle call), ``state.pkl`` (the state after the last full generation, with
    the journal position and every generator's state) and ``local_v<k>.pt`` (the local model after
    its k-th training round, written once per round).
    """

    def _open_checkpoint(self) -> None:
        """Bind the folder to this run's settings and open the call journal (our inference)."""
        self._rngs = find_rngs({"api": self.api, "local": self.local})
        if not self.checkpoint_dir or self.journal is not None:
            return
        settings = run_settings(
            self.cfg, self.problem, self.api, self.local, self.initial, self.trainer_args
        )
        check_settings(self.checkpoint_dir, settings)  # CheckpointMismatch names each key
        self.journal = CallJournal(os.path.join(self.checkpoint_dir, "journal.jsonl"))

    def _journaled(self, tag: str, fn: Any) -> Any:
        """``fn()`` through the journal: a resumed run replays a recorded result and the states of
        every random generator after that call; a new call is executed and recorded."""
        if self.journal is None:
            return fn()
        rec = self.journal.call(
            lambda: {"out": fn(), "rngs": pack(capture_rngs(self._rngs))}, tag=tag
        )
        restore_rngs(self._rngs, unpack(rec["rngs"]))
        return rec["out"]

    def _evaluate(self, values: list[str]) -> np.ndarray:
        """Raw objective values ``[n, m]`` of canonical SMILES, one journaled oracle call."""
        vals = list(values)
        out = self._journaled(
            "oracle:" + digest(vals),
            lambda: np.asarray(self.problem.evaluate(vals), dtype=float).tolist(),
        )
        return np.asarray(out, dtype=float).reshape(len(vals), len(self.problem.goals))

    def _save_weights(self) -> str | None:
        """Write the local model once per training round that changed it (atomic file)."""
        v = self.state["weights_version"]
        if not self.trains or v == 0:
            return None
        name = f"local_v{v}.pt"
        if name != self._saved_weights:
            import torch

            path = os.path.join(self.checkpoint_dir, name)
            torch.save(self.local.model.state_dict(), path + ".tmp")
            with open(path + ".tmp", "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(path + ".tmp", path)
        return name

    def save_checkpoint(self) -> None:
        """The state after a generation (atomic; the journal position ties it to the calls)."""
        if not self.checkpoint_dir:
            return
        weights = self._save_weights()
        blob = {
            "format": FORMAT,
            "archive": self.archive.to_dict(),
            "population": [c.value for c in self.population],
            "memory": self.memory.to_dict(),
            "history": self.history,
            "train_log": self.train_log,
            "parse_stats": {k: v.as_dict() for k, v in self.parse_stats.items()},
            "state": self.state,
            "rng": self.rng.getstate(),
            "rngs": capture_rngs(self._rngs),
            "journal_pos": self.journal.position,
            "weights": weights,
            "rl_cache": self._rl_cache,
            "rl_oracle_calls": self.rl_oracle_calls,
        }
        atomic_pickle(os.path.join(self.checkpoint_dir, "state.pkl"), blob)
        self._saved_weights = weights
        for old in glob.glob(os.path.join(self.checkpoint_dir, "local_v*.pt")):
            if os.path.basename(old) != weights:
                os.remove(old)

    def _load_checkpoint(self) -> bool:
        """Restore the last full generation and seek the journal to its calls (our inference)."""
        path = os.path.join(self.checkpoint_dir or "", "state.pkl")
        if not self.checkpoint_dir or not os.path.exists(path):
            return False
        blob = load_pickle(path)
        if blob.get("format") != FORMAT:
            raise ValueError(
                f"checkpoint_dir {self.checkpoint_dir} holds an older layout; delete it"
            )
        self.archive = Archive.from_dict(self.problem, blob["archive"], evaluator=self._evaluate)
        by_value = {c.value: c for c in self.archive.items}
        self.population = [by_value[v] for v in blob["population"]]
        self.memory = TrajectoryMemory.from_dict(blob["memory"])
        self.history, self.train_log = blob["history"], blob["train_log"]
        self.parse_stats = {
            k: ParseStats(**{a: int(b) for a, b in v.items()})
            for k, v in blob["parse_stats"].items()
        }
        self.state = blob["state"]
        self.rng.setstate(blob["rng"])
        restore_rngs(self._rngs, blob["rngs"])
        self.journal.seek(blob["journal_pos"])
        self._rl_cache = dict(blob["rl_cache"])
        self.rl_oracle_calls = int(blob["rl_oracle_calls"])
        self._saved_weights = blob["weights"]
        if blob["weights"]:
            import torch

            weights = os.path.join(self.checkpoint_dir, blob["weights"])
            self.local.model.load_state_dict(torch.load(weights))
        logger.info(
            "resumed at generation %d with %d molecules",
            self.state["generation"],
            len(self.archive),
        )
        return True
