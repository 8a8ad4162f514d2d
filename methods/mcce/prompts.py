"""Prompts and response parsing (official `algorithm/PromptTemplate.py`, official `algorithm/PromptTemplate.py`).

Two prompt styles share one builder: ``"chat"`` is the paper's single user turn (task, requirements,
glossary, optional experience, parents with raw values and totals, operator instruction, format rule);
``"compact"`` is the CPU toy's ``[XO] <p>S1</p> <p>S2</p> =>`` for a tiny SELFIES language model.
Responses carry candidates as ``<candidate>…</candidate>``; malformed output is counted.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .core import Archive, Candidate
from .problems import MoleculeProblem

logger = logging.getLogger(__name__)

_TAG = re.compile(r"<candidate>(.*?)</candidate>", re.DOTALL)
_OPEN = "<candidate>"

Operator = Literal["crossover", "mutation", "explore", "empty"]
OPERATORS: tuple[str, ...] = ("crossover", "mutation", "explore", "empty")
_COMPACT_OP = {"crossover": "[XO]", "mutation": "[MUT]", "explore": "[XO]", "empty": "[NEW]"}


@dataclass
class ParseStats:
    """Counts of parsing outcomes; every response and every dropped fragment is counted."""

    responses: int = 0
    candidates: int = 0
    no_tag_responses: int = 0  # responses without a single well-formed tag
    malformed: int = 0  # empty, nested or unclosed tags

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.__dict__.items()}


def parse_candidates(text: str, stats: ParseStats | None = None) -> list[str]:
    """Extract candidates from ``<candidate>…</candidate>`` tags, in order (official `algorithm/PromptTemplate.py`).

    Matches use a non-greedy DOTALL regex, as the official code does; in addition, a match that
    contains another opening tag (nested/unclosed) or is empty is dropped and counted as malformed,
    and an opening tag that is never closed (a truncated response) is counted as malformed.

    Args:
        text: the model's response.
        stats: updated in place when given.

    Returns:
        Stripped candidate strings.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    out: list[str] = []
    bad = 0
    for m in _TAG.finditer(text):
        body = m.group(1)
        if _OPEN in body:  # e.g. "<candidate>A<candidate>B</candidate>": keep B, drop A
            bad += body.count(_OPEN)
            body = body.rsplit(_OPEN, 1)[1]
        body = body.strip()
        if body:
            out.append(body)
        else:
            bad += 1
    closed_spans = sum(m.group(1).count(_OPEN) + 1 for m in _TAG.finditer(text))
    bad += max(0, text.count(_OPEN) - closed_spans)  # opening tags with no closing tag
    if stats is not None:
        stats.responses += 1
        stats.candidates += len(out)
        stats.malformed += bad
        if not out:
            stats.no_tag_responses += 1
    return out


@dataclass
class PromptBuilder:
    """Builds operator and experience prompts for a problem (official `algorithm/PromptTemplate.py`).

    Args:
        problem: the molecule problem (goals, directions, descriptions, representation).
        n_off: children requested per call (2 in the official code).
        style: ``"chat"`` (paper) or ``"compact"`` (tiny toy model).
    """

    problem: MoleculeProblem
    n_off: int = 2
    style: Literal["chat", "compact"] = "chat"

    def __post_init__(self) -> None:
        if self.n_off < 1:
            raise ValueError(f"n_off must be >= 1, got {self.n_off}")
        if self.style not in ("chat", "compact"):
            raise ValueError(f"style must be 'chat' or 'compact', got {self.style!r}")

    # ----------------------------------------------------------------- blocks
    def _requirements(self) -> str:
        """One "maximize|minimize the X value." line per goal (official `algorithm/PromptTemplate.py`)."""
        p = self.problem
        lines = ["Requirements:"]
        for i, (g, d) in enumerate(zip(p.goals, p.directions), 1):
            lines.append(f"{i}. {'maximize' if d == 'max' else 'minimize'} the {g} value.")
        glossary = "".join(f"{g}: {desc}\n" for g, desc in p.descriptions.items())
        return "\n".join(lines) + "\n\nObjectives:\n" + glossary

    def _parent_line(self, c: Candidate) -> str:
        """A parent with its raw values and total (official `algorithm/PromptTemplate.py`)."""
        vals = ", ".join(f"{g}:{c.raw[g]:.4f}" for g in self.problem.goals)
        text = self.problem.to_text(c.value)
        return (
            f"<candidate>{text}</candidate>, its property values are: {vals}, total: {c.total:.4f}"
        )

    def operator_prompt(self, op: str, parents: Sequence[Candidate], experience: str = "") -> str:
        """The generation prompt for one LLM call (official `algorithm/PromptTemplate.py` blocks 1–6)."""
        if op not in OPERATORS:
            raise ValueError(f"op must be one of {OPERATORS}, got {op!r}")
        if self.style == "compact":
            body = " ".join(f"<p>{self.problem.to_text(c.value)}</p>" for c in parents)
            return f"{_COMPACT_OP[op]} {body} =>".replace("  ", " ")
        n = self.n_off
        parts = [self.problem.task, self._requirements()]
        if experience:
            parts.append(
                "Lessons from earlier rounds of this search are given below; use them.\n"
                f"<experience>{experience}</experience>"
            )
        if parents:
            parts.append(
                "Parent candidates follow; a higher total is better, and parents scoring zero may be "
                "ignored.\n" + "\n".join(self._parent_line(c) for c in parents)
            )
        if op == "mutation":
            parts.append(
                f"Mutate the parents into {n} new candidates that differ from them, score better and are "
                "not dominated by them. Useful edits: change functional groups, swap atoms or bonds, "
                "add or remove substituents, open, close or resize rings, change stereochemistry, "
                "or make edits aimed at a single property."
            )
        elif op == "crossover":
            parts.append(
                f"Combine the parents (crossover) and your chemistry knowledge into {n} new "
                "candidates that score better and are not dominated by them."
            )
        elif op == "explore":
            parts.append(
                f"Propose {n} novel candidates unlike the ones shown, that could score well."
            )
        else:
            parts.append(f"Propose {n} good candidates.")
        rep = "SMILES" if self.problem.representation == "smiles" else "SELFIES"
        parts.append(
            f"Each candidate must be a valid {rep} string. Write each one as "
            "<candidate>...</candidate> and give no explanation."
        )
        return "\n\n".join(parts)

    def experience_prompt(
        self,
        archive: Archive,
        previous: str,
        rng: random.Random,
        good_from: Sequence[Candidate] | None = None,
        n_show: int = 10,
        repo_compat: bool = False,
    ) -> str:
        """Ask the model to merge good/poor examples and the old experience into a summary (official `algorithm/PromptTemplate.py`).

        "Good" items are ``n_show`` random picks from ``good_from`` (the top-100 by F, or the NSGA-II
        best 100). "Poor" items come from the *worse* half of the archive sorted by F.
        ``repo_compat=True`` reproduces the official code's bug of drawing them from the better half.
        """
        good_pool = list(good_from) if good_from is not None else archive.top_k(100)
        asc = sorted(archive.items, key=lambda c: (c.total, c.index))  # worst first
        half = len(asc) // 2
        # Deviation (our choice): the official code samples "poor" items from asc[half:], the better half.
        poor_pool = asc[half:] if repo_compat else asc[: max(half, 1)]
        good = rng.sample(good_pool, min(n_show, len(good_pool)))
        poor = rng.sample(poor_pool, min(n_show, len(poor_pool)))
        lines = [self._requirements()]
        lines.append("Good candidates:\n" + "\n".join(self._parent_line(c) for c in good))
        lines.append("Poor candidates:\n" + "\n".join(self._parent_line(c) for c in poor))
        if previous:
            lines.append(f"Earlier summary:\n{previous}")
        lines.append(
            "Merge the examples and the earlier summary into a short list of what makes candidates "
            "good or poor for these objectives. Reply with the summary only."
        )
        return "\n\n".join(lines)


def pick_parents(
    population: Sequence[Candidate], rng: random.Random, n: int = 2
) -> list[Candidate]:
    """Uniform sample of n distinct population members (official `algorithm/MOO.py::run` line 7)."""
    if len(population) < n:
        raise ValueError(f"population must hold at least {n} members, got {len(population)}")
    return rng.sample(list(population), n)
