"""The simulated inert LLM of the ``sim`` toy (our toy design; it tests the probe-and-remind
mechanism only, not a language model).

:class:`InertToyLLM` takes association strengths from pair counts in a generated co-occurrence
corpus (:func:`pair_strengths`), extracts entities by lookup, answers the probe with its strongest
associations and says a wrong "yes" on a negative-evidence question with probability
``strength(A, B)``, scaled down by a generic note (``generic_damping``) or by a pair reminder naming
(A, B) (``pair_damping``). Both dampings are assumptions of the simulator, not measurements.
"""

from __future__ import annotations

import hashlib
import math

from .prompts import PromptSet

__all__ = ["InertToyLLM", "pair_strengths"]


def _u01(*keys: object) -> float:
    h = hashlib.sha256("|".join(map(str, keys)).encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


class InertToyLLM:
    """Deterministic "inert" chat model for the toy (not a language model).

    Args:
        strengths: ``{(a, b): strength in [0, 1]}`` learned from co-occurrence counts.
        entities: the vocabulary it can extract.
        prompts: the prompt set whose step prefixes it recognises.
        generic_damping / pair_damping: fraction of inert "yes" answers removed by a generic
            note / by a reminder naming the asked pair.
        base_error: wrong-yes probability independent of associations.
        seed: seed of the per-item coin flips.
    """

    def __init__(
        self,
        strengths: dict[tuple[str, str], float],
        entities: list[str],
        prompts: PromptSet,
        generic_damping: float,
        pair_damping: float,
        base_error: float,
        seed: int,
    ) -> None:
        self.s = {(a.lower(), b.lower()): v for (a, b), v in strengths.items()}
        self.entities = entities
        self.p = prompts
        self.gd, self.pd, self.base, self.seed = generic_damping, pair_damping, base_error, seed

    def _strength(self, a: str, b: str) -> float:
        return max(self.s.get((a.lower(), b.lower()), 0.0), self.s.get((b.lower(), a.lower()), 0.0))

    def __call__(self, messages: list[dict]) -> str:
        c = messages[-1]["content"]
        head = self.p.extract.split("{")[0]
        if c.startswith(head):
            text = c.rsplit("Text: ", 1)[-1].lower()
            return ", ".join(e for e in self.entities if e.lower() in text)
        if c.startswith(self.p.probe.split("{")[0]):
            ents = c.rsplit("Entities: ", 1)[-1].split("\n")[0].split(", ")
            lines = []
            for e in ents:
                ranked = sorted(
                    (x for x in self.entities if x.lower() != e.lower()),
                    key=lambda x: (-self._strength(e, x), _u01("rank", e, x, self.seed)),
                )
                lines.append(" ".join(f"({e}, {x})" for x in ranked[:3]))
            return "\n".join(lines)
        question = c.rsplit("\n\nQuestion: ", 1)[-1].split("\nNote: ")[0]
        note = c.rsplit("\nNote: ", 1)[-1].split("\nAnswer:")[0]
        present = [e for e in self.entities if e.lower() in question.lower()]
        asked = question.rsplit("Question:", 1)[-1]
        b = next((e for e in present if e.lower() in asked.lower()), None)
        s = max((self._strength(a, b) for a in present if b and a != b), default=0.0)
        if note.strip() == self.p.reminder_generic:
            s *= 1 - self.gd
        elif b is not None and b.lower() in note.lower() and "related" in note:
            s *= 1 - self.pd
        p_yes = self.base + (1 - self.base) * s
        return (
            "【Conclusion】: Yes"
            if _u01("ans", question, self.seed) < p_yes
            else "【Conclusion】: No"
        )


def pair_strengths(corpus: list[str], pairs: list[tuple[str, str]], tau: float) -> dict:
    """``1 - exp(-count / tau)`` per pair, count = corpus texts holding both (our toy design)."""
    out = {}
    for a, b in pairs:
        cnt = sum(1 for t in corpus if a in t and b in t)
        out[(a, b)] = 1 - math.exp(-cnt / tau)
    return out
