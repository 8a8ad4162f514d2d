"""The ThreadWeaver trajectory format: one serializer, one parser, one validator (§3.1, Fig. 2).

A response is ``"<think>\\n" body "\\n</think>\\n" final`` where the body mixes plain sequential text
and parallel blocks::

    <Parallel>
    <Outlines>
    <Outline>1: plan one</Outline>
    <Outline>2: plan two</Outline>
    </Outlines>
    <Thread>
    1: thread one text
    </Thread><Thread>
    2: thread two text
    </Thread>
    </Parallel>

The exact bytes matter: the inference orchestrator (``orchestrator.py``) issues one request per thread
whose prompt ends in :func:`thread_header` and joins the answers with :func:`thread_header` /
``join_suffix``. Training data is produced by :func:`serialize`, which uses the same helpers, so the
token streams seen in training and at inference coincide (the paper's co-design argument, §3.2-3.3).
Only one nesting level exists: threads never contain ``<Parallel>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "CONCLUSION_CLOSE",
    "CONCLUSION_OPEN",
    "CONCLUSION_TAGS",
    "JOIN_SUFFIX",
    "TAGS",
    "FormatError",
    "FormatReport",
    "ParallelBlock",
    "Trajectory",
    "parse",
    "serialize",
    "thread_header",
    "validate",
]

#: Control tags registered as single special tokens (§3.1; ``<think>`` tags belong to Qwen3).
TAGS: tuple[str, ...] = (
    "<think>",
    "</think>",
    "<Parallel>",
    "</Parallel>",
    "<Outlines>",
    "</Outlines>",
    "<Outline>",
    "</Outline>",
    "<Thread>",
    "</Thread>",
)

#: Text the orchestrator appends after the last thread of a block (paper form, §3.2 / Fig. 2).
JOIN_SUFFIX = "\n</Parallel>"

#: ``<Conclusion>`` mode of the official code (``rollout.agent.no_conclusion=false`` in
#: ``single_turn_agent_loop.py``): after the threads the orchestrator appends
#: :data:`CONCLUSION_OPEN`; the model writes the conclusion and :data:`CONCLUSION_CLOSE` itself.
#: When a thread ends the rollout the orchestrator closes with an empty conclusion
#: (``CONCLUSION_OPEN + CONCLUSION_CLOSE``). The paper's format has no conclusion block.
CONCLUSION_TAGS: tuple[str, ...] = ("<Conclusion>", "</Conclusion>")
CONCLUSION_OPEN = "\n<Conclusion>\n"
CONCLUSION_CLOSE = "</Conclusion>\n</Parallel>"

THINK_OPEN = "<think>\n"
THINK_CLOSE = "\n</think>\n"
BLOCK_HEAD = "<Parallel>\n<Outlines>\n"
OUTLINES_CLOSE = "</Outlines>"
_NUM = r"[0-9]+(?:\.[0-9]+)*"
_NUM_RE = re.compile(rf"^{_NUM}$")
_TAG_RE = re.compile(r"</?(?:think|Parallel|Outlines|Outline|Thread|Conclusion)>")
_OUTLINE_RE = re.compile(rf"<Outline>({_NUM}): ((?:(?!</?Outline>).)*?)</Outline>\n", re.DOTALL)
#: Regex the orchestrator uses to read outline numbers from decoded text (lenient about spaces).
OUTLINE_NUM_RE = re.compile(rf"<Outline>\s*({_NUM})\s*:")


class FormatError(ValueError):
    """Raised by :func:`parse` when a response does not follow the ThreadWeaver grammar."""


@dataclass
class ParallelBlock:
    """One ``<Parallel>`` block: outlines and threads as ``(number, text)`` pairs.

    ``conclusion`` is None in the paper's format; a string (possibly empty) in the official
    ``<Conclusion>`` mode, serialized as ``CONCLUSION_OPEN + conclusion + CONCLUSION_CLOSE``.
    """

    outlines: list[tuple[str, str]]
    threads: list[tuple[str, str]]
    conclusion: str | None = None


@dataclass
class Trajectory:
    """A parsed response: body segments (plain text or blocks) and the text after ``</think>``."""

    segments: list[str | ParallelBlock] = field(default_factory=list)
    final: str = ""

    @property
    def blocks(self) -> list[ParallelBlock]:
        """The parallel blocks of the trajectory, in order (paper Section 3.1 format)."""
        return [s for s in self.segments if isinstance(s, ParallelBlock)]


@dataclass
class FormatReport:
    """Result of :func:`validate`: ``ok`` and the list of problems found."""

    ok: bool
    errors: list[str]


def thread_header(num: str, first: bool) -> str:
    """Header text of thread ``num``.

    The orchestrator's request for every thread ends with the *first* form
    ``"\\n<Thread>\\n{num}:"``; when joining, threads after the first follow ``</Thread>`` directly,
    so their joined header drops the leading newline (§3.2; official ``single_turn_agent_loop.py``).
    """
    return ("\n" if first else "") + f"<Thread>\n{num}:"


def _serialize_block(block: ParallelBlock, join_suffix: str) -> str:
    parts = [BLOCK_HEAD]
    parts += [f"<Outline>{n}: {t}</Outline>\n" for n, t in block.outlines]
    parts.append(OUTLINES_CLOSE)
    for i, (n, t) in enumerate(block.threads):
        parts.append(thread_header(n, first=i == 0) + f" {t}\n</Thread>")
    if block.conclusion is not None:
        parts.append(CONCLUSION_OPEN + block.conclusion + CONCLUSION_CLOSE)
    else:
        parts.append(join_suffix)
    return "".join(parts)


def serialize(traj: Trajectory, join_suffix: str = JOIN_SUFFIX) -> str:
    """Write a :class:`Trajectory` in the canonical ThreadWeaver layout (§3.1).

    Source: paper Section 3.1 (trajectory format); official
    ``data_generation/src/save_dataset.py`` (``sanitize_text_block``).

    Args:
        traj: the trajectory.
        join_suffix: text closing a block; must equal the orchestrator's (paper: ``"\\n</Parallel>"``).

    Returns:
        The response text, starting with ``"<think>\\n"``.
    """
    if not isinstance(traj, Trajectory):
        raise TypeError(f"traj must be a Trajectory, got {type(traj).__name__}")
    body = []
    for seg in traj.segments:
        body.append(_serialize_block(seg, join_suffix) if isinstance(seg, ParallelBlock) else seg)
    return THINK_OPEN + "".join(body) + THINK_CLOSE + traj.final


def _parse_block(text: str, pos: int, join_suffix: str) -> tuple[ParallelBlock, int]:
    """Parse one block starting at ``text[pos]`` (``<Parallel>``); return it and the end offset."""
    if not text.startswith(BLOCK_HEAD, pos):
        raise FormatError(f"block at offset {pos} must start with {BLOCK_HEAD!r}")
    pos += len(BLOCK_HEAD)
    outlines = []
    while True:
        m = _OUTLINE_RE.match(text, pos)
        if m is None:
            break
        outlines.append((m.group(1), m.group(2)))
        pos = m.end()
    if not text.startswith(OUTLINES_CLOSE, pos):
        raise FormatError(f"expected <Outline>N: ...</Outline> or </Outlines> at offset {pos}")
    if not outlines:
        raise FormatError(f"block ending at offset {pos} has no <Outline>")
    pos += len(OUTLINES_CLOSE)
    threads = []
    while True:
        head = "\n<Thread>\n" if not threads else "<Thread>\n"
        if not text.startswith(head, pos):
            break
        pos += len(head)
        end = text.find("\n</Thread>", pos)
        if end < 0:
            raise FormatError(f"thread starting at offset {pos} is never closed by </Thread>")
        content = text[pos:end]
        m = re.match(rf"({_NUM}): (.*)\Z", content, re.DOTALL)
        if m is None:
            raise FormatError(f"thread at offset {pos} must start with 'N: ', got {content[:20]!r}")
        if _TAG_RE.search(m.group(2)):
            raise FormatError(f"thread {m.group(1)} contains a control tag (nesting not allowed)")
        if not m.group(2).strip():
            raise FormatError(f"thread {m.group(1)} at offset {pos} is empty")
        threads.append((m.group(1), m.group(2)))
        pos = end + len("\n</Thread>")
    if not threads:
        raise FormatError(f"block has no <Thread> after </Outlines> (offset {pos})")
    if len(threads) != len(outlines):
        raise FormatError(f"block has {len(outlines)} outlines but {len(threads)} threads")
    if text.startswith(CONCLUSION_OPEN, pos):
        start = pos + len(CONCLUSION_OPEN)
        end = text.find(CONCLUSION_CLOSE, start)
        if end < 0:
            raise FormatError(
                f"<Conclusion> at offset {pos} is never closed by {CONCLUSION_CLOSE!r}"
            )
        concl = text[start:end]
        if _TAG_RE.search(concl):
            raise FormatError(f"conclusion at offset {start} contains a control tag")
        return ParallelBlock(outlines, threads, concl), end + len(CONCLUSION_CLOSE)
    if not text.startswith(join_suffix, pos):
        raise FormatError(f"block must close with {join_suffix!r} at offset {pos}")
    return ParallelBlock(outlines, threads), pos + len(join_suffix)


def parse(text: str, join_suffix: str = JOIN_SUFFIX) -> Trajectory:
    """Parse a response written by :func:`serialize` (the inverse: ``parse(serialize(t)) == t``).

    Source: paper Section 3.1 (trajectory format); strict inverse of :func:`serialize` is
    our choice.

    Raises:
        TypeError: if ``text`` is not a string.
        FormatError: (a ``ValueError``) naming the first grammar violation and its offset.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text.startswith(THINK_OPEN):
        raise FormatError(f"response must start with {THINK_OPEN!r}")
    close = text.rfind(THINK_CLOSE)
    if close < len(THINK_OPEN) - 1:
        raise FormatError(f"response has no {THINK_CLOSE!r} closing the reasoning")
    body, final = text[len(THINK_OPEN) : close], text[close + len(THINK_CLOSE) :]
    segments: list[str | ParallelBlock] = []
    pos = 0
    while pos < len(body):
        nxt = body.find("<Parallel>", pos)
        if nxt < 0:
            nxt = len(body)
        if nxt > pos:
            seq = body[pos:nxt]
            bad = _TAG_RE.search(seq)
            if bad:
                raise FormatError(f"tag {bad.group(0)} outside a parallel block (offset {pos})")
            segments.append(seq)
        if nxt == len(body):
            break
        block, pos = _parse_block(body, nxt, join_suffix)
        segments.append(block)
    return Trajectory(segments, final)


class _TagScan:
    """State of the tag scan of :func:`validate`: open blocks, open Outline/Thread, counts."""

    def __init__(self, text: str, conclusion: bool) -> None:
        self.text, self.conclusion = text, conclusion
        self.errors: list[str] = []
        self.depth_par = 0  # open <Parallel> blocks
        self.counts = {"Outline": 0, "Thread": 0}  # in the current block
        self.open_tag: str | None = None  # the open <Outline> or <Thread>
        self.last_open_end = 0  # end offset of the last opening tag

    def parallel(self, m: re.Match, closing: bool) -> None:
        """``<Parallel>`` opens a block (never nested); ``</Parallel>`` checks its counts."""
        if not closing:
            if self.depth_par:
                self.errors.append(f"nested <Parallel> at offset {m.start()}")
            self.depth_par += 1
            self.counts = {"Outline": 0, "Thread": 0}
            return
        if self.depth_par == 0:
            self.errors.append(f"</Parallel> without <Parallel> at offset {m.start()}")
            return
        self.depth_par -= 1
        n_out, n_thr = self.counts["Outline"], self.counts["Thread"]
        if n_out != n_thr:
            self.errors.append(
                f"block closing at offset {m.start()} has {n_out} outlines but {n_thr} threads"
            )
        if n_thr == 0:
            self.errors.append(f"block closing at offset {m.start()} has no threads")

    def block_tag(self, m: re.Match, name: str, closing: bool) -> None:
        """``<Outlines>``, ``<Outline>``, ``<Thread>``: inside a block, never overlapping, and a
        thread is not empty."""
        tag = m.group(0)
        if self.depth_par == 0:
            self.errors.append(f"{tag} outside a parallel block at offset {m.start()}")
        if name in self.counts and not closing:
            if self.open_tag is not None:
                self.errors.append(f"{tag} inside an open <{self.open_tag}> at offset {m.start()}")
            self.open_tag = name
            self.counts[name] += 1
        elif name in self.counts:
            if self.open_tag != name:
                self.errors.append(f"{tag} without matching opener at offset {m.start()}")
            else:
                body = self.text[self.last_open_end : m.start()]
                if name == "Thread" and not re.sub(rf"^\s*{_NUM}:\s*", "", body).strip():
                    self.errors.append(f"empty thread at offset {m.start()}")
            self.open_tag = None
        if not closing:
            self.last_open_end = m.end()

    def other_tag(self, m: re.Match, name: str) -> None:
        """``<Conclusion>`` (legal only in conclusion mode, inside a block) and foreign tags."""
        tag = m.group(0)
        if name == "Conclusion":
            if not self.conclusion:
                self.errors.append(f"legacy tag {tag} at offset {m.start()}")
            elif self.depth_par == 0:
                self.errors.append(f"{tag} outside a parallel block at offset {m.start()}")
        elif self.depth_par:
            self.errors.append(f"foreign tag {tag} inside a parallel block at offset {m.start()}")

    def run(self) -> list[str]:
        for m in _TAG_RE.finditer(self.text):
            name, closing = m.group(0).strip("</>"), m.group(0).startswith("</")
            if name == "Parallel":
                self.parallel(m, closing)
            elif name in ("Outline", "Thread", "Outlines"):
                self.block_tag(m, name, closing)
            else:
                self.other_tag(m, name)
        if self.depth_par:
            self.errors.append("unclosed <Parallel>")
        if self.open_tag is not None:
            self.errors.append(f"unclosed <{self.open_tag}>")
        return self.errors


def _strict_errors(text: str, join_suffix: str, conclusion: bool) -> list[str]:
    """The canonical layout (:func:`parse`) and thread numbers = outline numbers, distinct."""
    try:
        traj = parse(text, join_suffix)
    except FormatError as e:
        return [str(e)]
    errors = []
    for b in traj.blocks:
        if conclusion and b.conclusion is None:
            errors.append("block without <Conclusion> (conclusion mode)")
        nums = [n for n, _ in b.threads]
        if len(set(nums)) != len(nums):
            errors.append(f"duplicate thread numbers {nums}")
        if nums != [n for n, _ in b.outlines]:
            errors.append(f"thread numbers {nums} differ from outline numbers")
    return errors


def validate(
    text: str, strict: bool = True, join_suffix: str = JOIN_SUFFIX, conclusion: bool = False
) -> FormatReport:
    """Check a response against the format rules of §3.1 / App. C (the stage-1 filter).

    Checks balanced tags, no nested ``<Parallel>``, only Outline/Thread tags inside a block,
    #Outline = #Thread, non-empty threads, a closing ``</think>``; with ``strict=True`` also the
    exact canonical layout (via :func:`parse`) and distinct thread numbers matching the outlines.
    ``conclusion=True`` (the official ``<Conclusion>`` mode) accepts one ``<Conclusion>`` block
    after the threads of each parallel block; otherwise ``<Conclusion>`` is reported as a legacy tag.

    Returns:
        :class:`FormatReport` with every problem found (never raises on malformed text).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    errors = [] if "</think>" in text else ["no </think>"]
    errors += _TagScan(text, conclusion).run()
    if strict and not errors:
        errors += _strict_errors(text, join_suffix, conclusion)
    return FormatReport(ok=not errors, errors=errors)


def is_thread_number(num: str) -> bool:
    """Whether ``num`` is a valid thread number (``NUM := [0-9]+ ('.' [0-9]+)*``).

    Source: paper Section 3.1 (thread numbering); official ``single_turn_agent_loop.py``
    outline regex.
    """
    return bool(_NUM_RE.match(num))
