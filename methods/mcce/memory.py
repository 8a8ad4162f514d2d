"""Trajectory memory shared by both models (official `algorithm/MOO.py::run` line 11, our API `memory.py`).

Every LLM call leaves one record ``{prompt, response, parents, children, model, generation}``; the
similarity-based DPO builder reads the latest records. JSON layout follows the official
``*_prompt.json`` files (``queries``, ``init_pops``, ``final_pops``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrajectoryMemory:
    """Ordered list of call records; ``model`` and ``generation`` are additions to the official schema."""

    records: list[dict[str, Any]] = field(default_factory=list)
    init_pops: list[str] = field(default_factory=list)
    final_pops: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.records)

    def add(
        self,
        prompt: str,
        response: str,
        parents: list[dict[str, Any]],
        children: list[str],
        model: str,
        generation: int,
    ) -> None:
        self.records.append(
            {
                "prompt": prompt,
                "response": response,
                "parents": parents,
                "children": list(children),
                "model": model,
                "generation": generation,
            }
        )

    def latest(self, n: int) -> list[dict[str, Any]]:
        """The most recent n records, oldest first."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        return self.records[-n:] if n else []

    def to_dict(self) -> dict[str, Any]:
        return {"queries": self.records, "init_pops": self.init_pops, "final_pops": self.final_pops}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrajectoryMemory:
        return cls(
            records=list(d.get("queries", [])),
            init_pops=list(d.get("init_pops", [])),
            final_pops=list(d.get("final_pops", [])),
        )

    def save(self, path: str) -> None:
        with open(path, "w") as fh:
            json.dump(self.to_dict(), fh)

    @classmethod
    def load(cls, path: str) -> TrajectoryMemory:
        with open(path) as fh:
            return cls.from_dict(json.load(fh))
