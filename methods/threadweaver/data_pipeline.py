"""Stage-1 data pipeline: sequential trace -> parallel trace with an LLM (§4, App. C/E).

Steps (each a function; the LLM is any :class:`common.llm.ChatLLM`, e.g. ``OpenAIChat`` for GPT-5 or
``ScriptedChat`` in tests):

1. :func:`annotate` - number the lines; ask for contiguous, gap-free top-level steps (JSON line
   ranges), then for groups of *adjacent*, independent steps that may run in parallel.
2. :func:`to_markup` - deterministic conversion of steps + groups into a :class:`Trajectory`.
3. :func:`rewrite_threads` - per thread, minimal ``(source, replacement)`` edits that remove
   references to sibling threads (:func:`apply_replacements`).
4. :func:`write_outlines` - per block, one ``<Outline>`` per thread written from the preceding context.
5. :func:`filter_trace` - strict format check and answer check.

Deviations (documented): one decomposition level (no substeps, tasks T2/T4 of App. E are skipped) and
JSON replies instead of free-form ones; prompts are our own short paraphrases.
Malformed LLM replies are counted in :class:`PipelineReport` and the trace is dropped, never
silently repaired.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from dataclasses import dataclass, field

from .format import OUTLINE_NUM_RE, ParallelBlock, Trajectory, serialize, validate
from .pgrpo import is_correct

logger = logging.getLogger(__name__)

__all__ = [
    "PipelineReport",
    "annotate",
    "apply_replacements",
    "convert_trace",
    "filter_trace",
    "rewrite_threads",
    "to_markup",
    "write_outlines",
]

_STEPS_PROMPT = (
    "Below is a numbered reasoning trace. Split it into top-level steps covering every line exactly "
    "once, in order, without gaps (keep abandoned explorations). Reply with JSON only: "
    '{"steps": [[first_line, last_line], ...]}.\n\n'
)
_PAR_PROMPT = (
    "Now list groups of ADJACENT steps that do not depend on each other and could be worked out in "
    "parallel. Never parallelise the interpretation of the problem. Reply with JSON only: "
    '{"parallel": [{"steps": [i, j, ...], "reason": "..."}]} (step numbers from 1).'
)
_REWRITE_PROMPT = (
    "This thread will be generated without seeing its sibling threads. Allowed context:\n{allowed}\n\n"
    "Sibling threads (forbidden):\n{forbidden}\n\nThread:\n{thread}\n\nReturn a JSON list of minimal "
    "[source_substring, replacement] edits that remove any reference to sibling content; [] if none."
)
_OUTLINE_PROMPT = (
    "Context so far:\n{context}\n\nThe next part splits into {k} independent threads:\n{threads}\n\n"
    "Write one short plan per thread without revealing its results. Reply exactly as\n"
    "<Outlines>\n<Outline>1: ...</Outline>\n...\n</Outlines>"
)


class PipelineError(ValueError):
    """A malformed LLM reply (counted by :func:`convert_trace`)."""


@dataclass
class PipelineReport:
    """Counts of kept/dropped traces and of each failure kind."""

    kept: int = 0
    dropped: int = 0
    failures: Counter = field(default_factory=Counter)


def _json(reply: str):
    m = re.search(r"[\[{].*[\]}]", reply, re.DOTALL)
    if m is None:
        raise PipelineError(f"no JSON in reply {reply[:60]!r}")
    try:
        return json.loads(m.group(0))
    except json.JSONDecodeError as e:
        raise PipelineError(f"bad JSON in reply: {e}") from e


def annotate(trace: str, llm) -> tuple[list[str], list[tuple[int, int]], list[list[int]]]:
    """Steps 1 (App. E, tasks T1 and T3): line ranges of steps, then parallel groups of steps.

    Returns:
        ``(lines, steps, groups)``: the trace's lines, 1-based inclusive line ranges per step and
        0-based step indices per parallel group.

    Raises:
        PipelineError: ranges with gaps/overlaps, non-adjacent or singleton groups, bad JSON.
    """
    lines = trace.split("\n")
    numbered = "\n".join(f"L{i + 1}: {ln}" for i, ln in enumerate(lines))
    msgs = [{"role": "user", "content": _STEPS_PROMPT + numbered}]
    r1 = llm.chat(msgs)
    steps = [tuple(map(int, s)) for s in _json(r1).get("steps", [])]
    expect = 1
    for a, b in steps:
        if a != expect or b < a:
            raise PipelineError(f"step ranges must be contiguous from L1, got {steps}")
        expect = b + 1
    if expect != len(lines) + 1:
        raise PipelineError(f"steps cover L1-L{expect - 1} but the trace has {len(lines)} lines")
    msgs += [{"role": "assistant", "content": r1}, {"role": "user", "content": _PAR_PROMPT}]
    groups = []
    used: set[int] = set()
    for g in _json(llm.chat(msgs)).get("parallel", []):
        idx = sorted(int(i) - 1 for i in g["steps"])
        if len(idx) < 2 or idx != list(range(idx[0], idx[0] + len(idx))) or idx[-1] >= len(steps):
            raise PipelineError(f"parallel group {g['steps']} must be >= 2 adjacent valid steps")
        if used & set(idx):
            raise PipelineError(f"step in two parallel groups: {g['steps']}")
        used |= set(idx)
        groups.append(idx)
    return lines, steps, groups


def to_markup(
    lines: list[str], steps: list[tuple[int, int]], groups: list[list[int]], final: str
) -> Trajectory:
    """Step 2: deterministic conversion into a :class:`Trajectory` (outlines left empty).

    Source: paper Section 4 (stage 1, deterministic conversion into markup); official
    ``data_generation/`` scripts.
    """
    text = ["\n".join(lines[a - 1 : b]) for a, b in steps]
    start = {g[0]: g for g in groups}
    segs: list[str | ParallelBlock] = []
    i = 0
    while i < len(steps):
        if i in start:
            g = start[i]
            nums = [str(j + 1) for j in range(len(g))]
            segs.append(
                ParallelBlock([(n, "") for n in nums], [(n, text[j]) for n, j in zip(nums, g)])
            )
            i = g[-1] + 1
            continue
        piece = text[i] + "\n"
        if segs and isinstance(segs[-1], str):
            segs[-1] += piece
        else:
            segs.append(piece)
        i += 1
    return Trajectory(segs, final)


def apply_replacements(text: str, edits: list) -> str:
    """Apply ``[source, replacement]`` edits; each source must occur exactly once in ``text``.

    Source: paper App. E (rewrite prompt returns ``[source, replacement]`` edits); the
    exactly-once rule is our choice.

    Raises:
        PipelineError: a malformed edit or a source found 0 or several times.
    """
    for e in edits:
        if not (
            isinstance(e, (list, tuple)) and len(e) == 2 and all(isinstance(x, str) for x in e)
        ):
            raise PipelineError(f"edit must be [source, replacement], got {e!r}")
        n = text.count(e[0])
        if n != 1 or not e[0]:
            raise PipelineError(f"edit source {e[0]!r} occurs {n} times (need exactly 1)")
        text = text.replace(e[0], e[1])
    return text


def rewrite_threads(traj: Trajectory, llm) -> Trajectory:
    """Step 3: remove cross-thread references with minimal edits (one LLM call per thread).

    Source: paper Section 4 and App. E (thread rewriting prompt).
    """
    done: list[str] = []
    out: list[str | ParallelBlock] = []
    for seg in traj.segments:
        if isinstance(seg, ParallelBlock):
            threads = []
            for n, t in seg.threads:
                others = "\n---\n".join(x for m, x in seg.threads if m != n)
                reply = llm.chat([{"role": "user", "content": _REWRITE_PROMPT.format(
                    allowed="".join(done)[-4000:], forbidden=others, thread=t)}])  # fmt: skip
                edits = _json(reply)
                if not isinstance(edits, list):
                    raise PipelineError(
                        f"rewrite reply must be a JSON list, got {type(edits).__name__}"
                    )
                threads.append((n, apply_replacements(t, edits)))
            seg = ParallelBlock(seg.outlines, threads)
            done += [t for _, t in seg.threads]
        else:
            done.append(seg)
        out.append(seg)
    return Trajectory(out, traj.final)


def write_outlines(traj: Trajectory, llm) -> Trajectory:
    """Step 4: one outline per thread, from the preceding context only (one call per block).

    Source: paper Section 4 and App. E (outline prompt).
    """
    context: list[str] = []
    out: list[str | ParallelBlock] = []
    for seg in traj.segments:
        if isinstance(seg, ParallelBlock):
            threads_txt = "\n".join(f"{n}: {t[:300]}" for n, t in seg.threads)
            reply = llm.chat([{"role": "user", "content": _OUTLINE_PROMPT.format(
                context="".join(context)[-4000:], k=len(seg.threads), threads=threads_txt)}])  # fmt: skip
            body = reply.strip()
            if not body.startswith("<Outlines>") or "</Outlines>" not in body:
                raise PipelineError("outline reply must be an <Outlines>...</Outlines> block")
            found = re.findall(r"<Outline>\s*([0-9.]+)\s*:\s*(.*?)</Outline>", body, re.DOTALL)
            if [n for n, _ in found] != [n for n, _ in seg.threads] or not OUTLINE_NUM_RE.search(
                body
            ):
                raise PipelineError(f"need outlines {[n for n, _ in seg.threads]}, got {found}")
            seg = ParallelBlock([(n, t.strip()) for n, t in found], seg.threads)
            context += [t for _, t in seg.threads]
        else:
            context.append(seg)
        out.append(seg)
    return Trajectory(out, traj.final)


def filter_trace(text: str, gold: str) -> list[str]:
    """Step 5: problems that exclude a trace (empty list = keep).

    Source: paper Section 4 (format filter); official ``data_generation/src/filter-format-
    correct-and-obtain-stats.py``.
    """
    problems = list(validate(text, strict=True).errors)
    if not is_correct(text, gold):
        problems.append("answer incorrect or missing \\boxed")
    return problems


def convert_trace(
    trace: str, final: str, gold: str, llm, report: PipelineReport | None = None
) -> str | None:
    """Run steps 1-5 on one sequential trace (the text inside ``<think>``) and its final answer.

    Source: paper Section 4 and App. E (stage-1 light rewriting pipeline).

    Returns:
        The parallel response text, or None when dropped (the reason is counted in ``report``).
    """
    report = report if report is not None else PipelineReport()
    try:
        lines, steps, groups = annotate(trace, llm)
        traj = write_outlines(rewrite_threads(to_markup(lines, steps, groups, final), llm), llm)
        text = serialize(traj)
    except PipelineError as e:
        report.dropped += 1
        report.failures[type(e).__name__ + ": " + str(e).split(":")[0][:40]] += 1
        logger.debug("convert_trace: dropped (%s)", e)
        return None
    problems = filter_trace(text, gold)
    if problems:
        report.dropped += 1
        for p in problems:
            report.failures[p.split(" at offset")[0]] += 1
        return None
    report.kept += 1
    return text
