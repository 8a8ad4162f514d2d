"""Candidates and the evaluation archive (official `problem/molecules/evaluator.py`, official `algorithm/base.py`).

The archive keeps every unique valid molecule ever evaluated, in insertion order. Proposals are
canonicalised; invalid strings and repeats (against the whole history) are counted but never
evaluated, so only unique valid molecules consume the evaluation budget.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .problems import Problem, fitness

logger = logging.getLogger(__name__)


@dataclass
class Candidate:
    """One evaluated molecule.

    Attributes:
        value: canonical SMILES.
        raw: raw objective values f_j(x) by goal name.
        t: minimisation-form vector t(x) in [0, 1]^m (``[m]``).
        total: scalar fitness F(x) = m − Σ t_j (higher is better).
        origin: who proposed it: ``"init"``, ``"api"`` or ``"local"``.
        generation: generation in which it was inserted (0 for the initial population).
        index: insertion position in the archive.
    """

    value: str
    raw: dict[str, float]
    t: np.ndarray
    total: float
    origin: str = "init"
    generation: int = 0
    index: int = -1
    constraints: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "raw": self.raw,
            "t": [float(x) for x in self.t],
            "total": float(self.total),
            "origin": self.origin,
            "generation": self.generation,
            "index": self.index,
            "constraints": self.constraints,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Candidate:
        return cls(
            value=d["value"],
            raw=dict(d["raw"]),
            t=np.asarray(d["t"], dtype=float),
            total=float(d["total"]),
            origin=d.get("origin", "init"),
            generation=int(d.get("generation", 0)),
            index=int(d.get("index", -1)),
            constraints=d.get("constraints"),
        )


@dataclass
class Archive:
    """All unique valid molecules evaluated so far (official `problem/molecules/evaluator.py` "Budget").

    Counters are kept per origin: ``generated`` (every proposal string), ``invalid`` (failed
    canonicalisation), ``repeat`` (canonical duplicate of the history or of an earlier proposal in
    the same batch).
    """

    problem: Problem
    items: list[Candidate] = field(default_factory=list)
    generated: Counter = field(default_factory=Counter)
    invalid: Counter = field(default_factory=Counter)
    repeat: Counter = field(default_factory=Counter)
    n_evaluations: int = 0  # calls of problem.evaluate on single molecules (must equal len(items))
    # scores a batch of canonical SMILES -> [n, m]; problem.evaluate when None (the optimizer
    # passes its journaled evaluator so a resumed run replays recorded scores)
    evaluator: Callable[[list[str]], np.ndarray] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._seen = {c.value for c in self.items}

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, value: str) -> bool:
        return value in self._seen

    def add(
        self,
        values: Iterable[str],
        origin: str = "init",
        generation: int = 0,
        max_new: int | None = None,
        representation: str | None = None,
    ) -> list[Candidate]:
        """Canonicalise, dedupe, evaluate and append proposals; return the new candidates
        (official `problem/molecules/evaluator.py`: only unique valid molecules are scored).

        Args:
            values: proposal strings (SMILES or SELFIES as the problem expects).
            origin: model that proposed them.
            generation: current generation.
            max_new: at most this many new molecules are evaluated (the remaining budget); the
                surplus unique ones are dropped and counted under ``repeat``-free ``overflow``.
            representation: override the problem's representation (initial SMILES seeds).
        """
        if max_new is not None and max_new < 0:
            raise ValueError(f"max_new must be >= 0, got {max_new}")
        fresh: list[str] = []
        for v in values:
            self.generated[origin] += 1
            canon = (
                self.problem.canonicalize(v, representation)
                if representation is not None
                else self.problem.canonicalize(v)
            )
            if canon is None:
                self.invalid[origin] += 1
                continue
            if canon in self._seen or canon in fresh:
                self.repeat[origin] += 1
                continue
            fresh.append(canon)
        if max_new is not None and len(fresh) > max_new:
            # Deviation: the official code overshoots the budget by up to one generation.
            fresh = fresh[:max_new]
        if not fresh:
            return []
        raw = (self.evaluator or self.problem.evaluate)(fresh)  # [n, m]
        self.n_evaluations += len(fresh)
        t = self.problem.transform(raw)  # [n, m]
        tot = fitness(t)  # [n]
        new = []
        for i, s in enumerate(fresh):
            c = Candidate(
                value=s,
                raw={g: float(raw[i, j]) for j, g in enumerate(self.problem.goals)},
                t=t[i],
                total=float(tot[i]),
                origin=origin,
                generation=generation,
                index=len(self.items),
            )
            self.items.append(c)
            self._seen.add(s)
            new.append(c)
        return new

    def top_k(self, k: int, items: Sequence[Candidate] | None = None) -> list[Candidate]:
        """The k items with the highest F, ties by insertion order (official `algorithm/MOO.py::log_results`)."""
        pool = self.items if items is None else items
        return sorted(pool, key=lambda c: (-c.total, c.index))[:k]

    def stats(self, origin: str | None = None) -> dict[str, float]:
        """Validity = 1 − invalid/generated, uniqueness = 1 − repeats/generated (official `algorithm/MOO.py::log_results`)."""
        if origin is None:
            g, inv, rep = (sum(c.values()) for c in (self.generated, self.invalid, self.repeat))
        else:
            g, inv, rep = self.generated[origin], self.invalid[origin], self.repeat[origin]
        return {
            "generated": float(g),
            "validity": 1.0 - inv / g if g else float("nan"),
            "uniqueness": 1.0 - rep / g if g else float("nan"),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "items": [c.to_dict() for c in self.items],
            "generated": dict(self.generated),
            "invalid": dict(self.invalid),
            "repeat": dict(self.repeat),
            "n_evaluations": self.n_evaluations,
        }

    @classmethod
    def from_dict(
        cls,
        problem: Problem,
        d: dict[str, Any],
        evaluator: Callable[[list[str]], np.ndarray] | None = None,
    ) -> Archive:
        return cls(
            problem=problem,
            evaluator=evaluator,
            items=[Candidate.from_dict(x) for x in d["items"]],
            generated=Counter(d.get("generated", {})),
            invalid=Counter(d.get("invalid", {})),
            repeat=Counter(d.get("repeat", {})),
            n_evaluations=int(d.get("n_evaluations", len(d["items"]))),
        )
