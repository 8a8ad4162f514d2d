"""What the tour (``make demo``) compares each demo-size run against: the documented full-toy result.

Every ``methods/<slug>/run.py`` defines ``TOY_RESULT = ToyResult(...)`` beside ``HEADLINE``: the two
``HEADLINE`` metrics as its method doc (``docs/methods/<slug>.md``, toy results section) reports them
for the full toy, the command that produced them, which direction is better, and the doc's own
verdict. ``tests/test_demo.py`` checks that both numbers and the command appear in the doc, so the
table and the doc cannot drift apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Verdict = Literal["effect", "negative", "inconclusive"]
VERDICTS: tuple[str, ...] = ("effect", "negative", "inconclusive")


@dataclass(frozen=True)
class ToyResult:
    """The documented full-toy result of a method's ``HEADLINE`` pair.

    ``method`` / ``baseline``: the two ``HEADLINE`` metrics as the doc reports them; ``higher_is_better``:
    the metric's direction; ``verdict``: the doc's reading (``effect``: the method beats the baseline as
    the paper claims; ``negative``: the claim does not show; ``inconclusive``: the gap is within the
    noise); ``command``: the command the doc gives for that run; ``note``: one short line saying why,
    printed in the tour for a negative or inconclusive toy; ``minutes``: about how long ``command``
    takes on the 2-core CPU machine (the tour tells a reader whose demo does not show the effect).
    """

    method: float
    baseline: float
    higher_is_better: bool
    verdict: Verdict
    command: str
    note: str = ""
    minutes: float | None = None

    def __post_init__(self) -> None:
        for name in ("method", "baseline"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"ToyResult.{name} must be a finite number, got {v!r}")
        if not isinstance(self.higher_is_better, bool):
            raise ValueError(
                f"ToyResult.higher_is_better must be a bool, got {self.higher_is_better!r}"
            )
        if self.verdict not in VERDICTS:
            raise ValueError(f"ToyResult.verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if not self.command.startswith("icml26 "):
            raise ValueError(f"ToyResult.command must be an icml26 command, got {self.command!r}")
        if self.minutes is not None and not (
            isinstance(self.minutes, int | float)
            and math.isfinite(self.minutes)
            and self.minutes > 0
        ):
            raise ValueError(f"ToyResult.minutes must be a positive number, got {self.minutes!r}")
        if self.verdict != "effect" and not self.note:
            raise ValueError(f"ToyResult.note must say why the toy is {self.verdict}")


def direction(value: float, baseline: float, higher_is_better: bool, rtol: float = 1e-6) -> str:
    """``"better"``, ``"worse"`` or ``"tie"`` of ``value`` against ``baseline`` (tie within ``rtol``)."""
    if abs(value - baseline) <= rtol * max(1.0, abs(value), abs(baseline)):
        return "tie"
    return "better" if (value > baseline) == higher_is_better else "worse"
