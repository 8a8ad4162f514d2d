"""Conversation segmentation into fixed-size utterance windows (the paper's episodic
clustering, first step: S_k = u_{(k-1)w+1} .. u_{min(kw, N_u)}).

The history is flattened to utterances; segment S_k holds utterances (k−1)·w+1 .. min(k·w, N_u) with
w = w_embed. Long assistant turns may first be split into sentences (the official LongMemEval path).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+")


@dataclass
class Utterance:
    """One turn of the conversation."""

    speaker: str
    text: str
    session_id: str | None = None
    timestamp: str | None = None


@dataclass
class Segment:
    """A window of consecutive utterances, with its rendered text.

    Attributes:
        index: chronological index k (0-based).
        text: the rendering fed to the LLM (patched prompt).
        utterance_span: ``[start, end)`` indices into the flattened utterance list.
        embed_text: the rendering fed to the sentence embedder (defaults to ``text``).
    """

    index: int
    text: str
    utterance_span: tuple[int, int]
    embed_text: str = ""

    def __post_init__(self) -> None:
        if not self.embed_text:
            self.embed_text = self.text


def render_said(u: Utterance) -> str:
    """The official code's line format ``<speaker> said, "<text>"`` (official ``data/locomo/convert_locomo.py``;
    not in the paper)."""
    return f'{u.speaker} said, "{u.text}"'


def split_long_turns(utts: Sequence[Utterance], max_chars: int = 500) -> list[Utterance]:
    """Splits assistant turns longer than ``max_chars`` into sentences; drops pieces <= 10 chars
    (the official code's LongMemEval preprocessing; not in the paper, listed in the doc's deviations)."""
    out: list[Utterance] = []
    for u in utts:
        if u.speaker.lower() == "assistant" and len(u.text) > max_chars:
            for piece in _SENTENCE_SPLIT.split(u.text):
                if len(piece.strip()) > 10:
                    out.append(Utterance(u.speaker, piece.strip(), u.session_id, u.timestamp))
        else:
            out.append(u)
    return out


def segment_utterances(
    utts: Sequence[Utterance],
    w_embed: int = 4,
    split_long_assistant_chars: int | None = 500,
    render: Callable[[Utterance], str] = render_said,
    embed_render: Callable[[Utterance], str] | None = None,
) -> list[Segment]:
    """Groups utterances into consecutive windows of ``w_embed`` (paper, Episodic KV Compression,
    step 1: S_k = {u_{(k-1)w+1}, .., u_{min(kw, N_u)}}; ``w_embed = 4`` in the official code).

    Args:
        utts: the flattened conversation.
        w_embed: utterances per segment (paper/official: 4).
        split_long_assistant_chars: split assistant turns longer than this into sentences (None: off).
        render: utterance -> line for the LLM; lines are joined with a newline.
        embed_render: utterance -> line for the embedder (default: ``render``).

    Returns:
        The segments in chronological order; the last may be shorter.

    Raises:
        ValueError: if ``utts`` is empty or ``w_embed < 1``.
    """
    if not isinstance(w_embed, int) or w_embed < 1:
        raise ValueError(f"w_embed must be an int >= 1, got {w_embed!r}")
    if len(utts) == 0:
        raise ValueError("utts is empty: the conversation has no utterances")
    flat = (
        list(utts)
        if split_long_assistant_chars is None
        else split_long_turns(utts, split_long_assistant_chars)
    )
    segs = []
    for k, start in enumerate(range(0, len(flat), w_embed)):
        chunk = flat[start : start + w_embed]
        text = "\n".join(render(u) for u in chunk)
        etext = "\n".join((embed_render or render)(u) for u in chunk)
        segs.append(Segment(k, text, (start, start + len(chunk)), etext))
    return segs
