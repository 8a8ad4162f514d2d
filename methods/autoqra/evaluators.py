"""Evaluator protocol for AutoQRA candidates (our library design) and the test-only proxy (official search/phase2_evolution.py "proxy mode").

An evaluator maps ``(cfg, fidelity)`` to an ``EvalResult``; the search calls it with ``"low"`` for every
candidate, ``"high"`` for the promoted ones. ``ProxyEvaluator`` is the repo's analytic stand-in: it exercises
the search machinery only and is no evidence for the method. The real CPU backend is ``toy.FakeQuantEvaluator``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from .importance import Importance
from .memory import MemoryModel
from .space import QRConfig, SearchSpace

Fidelity = Literal["low", "high", "full"]
FIDELITIES: tuple[str, ...] = ("low", "high", "full")


@dataclass
class EvalResult:
    """Performance (higher is better), analytic memory in bytes, wall time and free-form metadata."""

    perf: float
    mem_bytes: float
    wall_s: float = 0.0
    meta: dict = field(default_factory=dict)


class Evaluator(Protocol):
    def evaluate(self, cfg: QRConfig, fidelity: Fidelity) -> EvalResult:
        """Performance and memory of ``cfg`` at ``fidelity`` (official ``evaluation/real_task.py``)."""
        ...


def check_result(res: EvalResult, cfg: QRConfig, fidelity: str) -> EvalResult:
    """Raise if an evaluator returned a non-finite performance (our bad-input rules).

    Source: our choice (bad-input rules), not in the paper.
    """
    if not np.isfinite(res.perf):
        raise ValueError(
            f"evaluator returned non-finite perf {res.perf} for {cfg.to_dict()} ({fidelity})"
        )
    return res


class ProxyEvaluator:
    """The repo's proxy (official search/phase2_evolution.py): ``P_low = mean_ℓ I(ℓ)(s_q+s_r)/2 [+ bits bump] [- 2((M-B)/B)²]``.

    ``"high"``/``"full"`` add N(0, noise²) drawn from a generator seeded by the config key (deterministic).
    """

    def __init__(
        self,
        space: SearchSpace,
        memory: MemoryModel,
        importance: Importance,
        budget: float,
        target_avg_bits: float | None = None,
        noise: float = 0.02,
        seed: int = 0,
    ) -> None:
        self.space, self.memory, self.importance, self.budget = space, memory, importance, budget
        self.target_avg_bits, self.noise, self.seed = target_avg_bits, noise, seed
        self.calls: list[tuple[str, str]] = []

    def settings(self) -> dict:
        """What a checkpoint folder is bound to (``state.evaluator_settings``).

        Source: engineering (checkpoint binding), not in the paper.
        """
        return {
            "Q": list(self.space.Q), "R": list(self.space.R),
            "importance": self.importance.score.tolist(), "budget": float(self.budget),
            "target_avg_bits": self.target_avg_bits, "noise": self.noise, "seed": self.seed,
        }  # fmt: skip

    def evaluate(self, cfg: QRConfig, fidelity: Fidelity) -> EvalResult:
        """Proxy ``P`` and Eq. 1 memory of ``cfg`` at ``fidelity``, as official
        ``evaluation/proxy.py`` (machinery tests only).
        """
        t0 = time.perf_counter()
        self.calls.append((cfg.key(), fidelity))
        s = self.importance.score
        sq, sr = self.space.s_q(np.asarray(cfg.q)), self.space.s_r(np.asarray(cfg.r))
        p = float(np.mean(s * (sq + sr) / 2.0))
        if self.target_avg_bits is not None:
            p += 0.5 * float(np.exp(-0.5 * (np.mean(cfg.q) - self.target_avg_bits) ** 2))
        mem = self.memory.total_bytes(cfg)
        if mem > self.budget:
            p -= 2.0 * ((mem - self.budget) / self.budget) ** 2
        if fidelity != "low":
            rng = np.random.default_rng([self.seed, int(cfg.key()[:8], 16)])
            p += float(rng.normal(0.0, self.noise))
        return EvalResult(p, mem, time.perf_counter() - t0, {})
