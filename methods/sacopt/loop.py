"""The semantic-anchor correction loop (official model2data.py / run.py; E1-E4
of docs/methods/sacopt.md)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from methods.sacopt.codegen import Coder, static_check
from methods.sacopt.schema import ProblemState
from methods.sacopt.verify import Verifier

logger = logging.getLogger(__name__)

__all__ = ["LoopTrace", "SACOptLoop"]


@dataclass
class LoopTrace:
    """Per-round record (official data layout ``trace.jsonl``) and call counts.

    ``rounds[t]`` = ``{t, n_checked, n_failed, failed_ids, n_llm_calls, seconds}``; anchor ids
    are ``"c<i>"`` for constraints and ``"objective"``.
    """

    rounds: list[dict] = field(default_factory=list)
    n_generate: int = 0
    n_reconstruct: int = 0
    n_judge: int = 0
    n_static_reject: int = 0

    @property
    def n_llm_calls(self) -> int:
        return self.n_generate + self.n_reconstruct + self.n_judge

    @property
    def n_regenerated(self) -> int:
        return sum(r["n_failed"] for r in self.rounds)


class SACOptLoop:
    """Generate one fragment per anchor, back-translate, verify, regenerate only mismatches.

    Per round ``t`` (E1-E4 of docs/methods/sacopt.md; official ``run.py``): for every anchor ``i`` in the unverified set ``U^(t)``,
    reconstruct ``â_i = R(c_i)`` and test ``δ(a_i, â_i)``; the failures form ``E^(t)``; each is
    regenerated with its previous code as a negative reference (``G'``); the others are frozen
    (``U^(t+1) = E^(t)``). Stops when ``E^(t) = ∅`` or after ``t_max`` rounds, in which case the
    last regenerated (unchecked) code is kept and the anchor stays ``verified=False``.

    Args:
        coder: Forward/backward generator (:class:`~methods.sacopt.codegen.LLMCoder` or the toy's).
        verifier: δ (:class:`~methods.sacopt.verify.LLMJudgeVerifier` or
            :class:`~methods.sacopt.verify.EmbeddingVerifier`).
        t_max: Round cap ``T_max`` (>= 0; 0 = no correction, the ablation).
        verify_objective: Treat the objective as an anchor too (our choice (docs deviations); repo: False).
        freeze_verified: Freeze anchors that passed (repo); False re-checks every anchor each
            round (ablation, our choice (docs deviations)).
    """

    def __init__(
        self,
        coder: Coder,
        verifier: Verifier,
        t_max: int = 5,
        verify_objective: bool = True,
        freeze_verified: bool = True,
    ) -> None:
        if not isinstance(t_max, int) or t_max < 0:
            raise ValueError(f"t_max must be an int >= 0, got {t_max!r}")
        self.coder = coder
        self.verifier = verifier
        self.t_max = t_max
        self.verify_objective = verify_objective
        self.freeze_verified = freeze_verified

    def run(self, state: ProblemState) -> tuple[ProblemState, LoopTrace]:
        """Fill in ``code``/``recon``/``verified``/``history`` of every anchor, in place.

        The paper abstract's loop ("aligns the original semantic anchors with those reconstructed
        from the generated code and selectively corrects only the mismatched components"); the
        details (frozen verified set, cap ``t_max``, last regenerated code kept at the cap) follow
        the official code model2data.py / run.py."""
        trace = LoopTrace()
        anchors = {f"c{i}": a for i, a in enumerate(state.constraints)}
        if state.objective is not None:
            anchors["objective"] = state.objective
        checked = {k: a for k, a in anchors.items() if k != "objective" or self.verify_objective}
        for a in anchors.values():  # initial forward generation c_i^(0)
            a.code = self.coder.generate(state, a)
            a.verified = False
            trace.n_generate += 1
        unverified = list(checked)
        for t in range(self.t_max):
            t0, calls0 = time.monotonic(), trace.n_llm_calls
            failed = []
            for k in unverified:
                a = anchors[k]
                reason = static_check(a.code, a.kind)
                if reason is not None:
                    a.recon, ok = f"<rejected: {reason}>", False
                    trace.n_static_reject += 1
                else:
                    a.recon = self.coder.reconstruct(state, a)
                    trace.n_reconstruct += 1
                    ok = bool(self.verifier(a.text, a.recon, a.kind))
                    trace.n_judge += int(getattr(self.verifier, "uses_llm", False))
                a.verified = ok
                if not ok:
                    failed.append(k)
            for k in failed:  # selective update (E3)
                a = anchors[k]
                a.history.append(a.code)
                a.code = self.coder.generate(state, a, negative_ref=a.code)
                trace.n_generate += 1
            trace.rounds.append(
                {
                    "t": t,
                    "n_checked": len(unverified),
                    "n_failed": len(failed),
                    "failed_ids": failed,
                    "n_llm_calls": trace.n_llm_calls - calls0,
                    "seconds": round(time.monotonic() - t0, 4),
                }
            )
            logger.debug("round %d: %d/%d anchors failed", t, len(failed), len(unverified))
            if not failed:
                break
            unverified = failed if self.freeze_verified else list(checked)
        return state, trace
