"""Conversation containers and loaders for LoCoMo, Realtalk and LongMemEval (the paper's three
LongConvQA benchmarks; layouts as official ``data/locomo/convert_locomo.py`` and the LongMemEval builder).

The loaders read the official JSON files from a local path (no download here); the paper-scale
script fetches them with ``huggingface-cli``/``git`` first.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .segmentation import Utterance

LOCOMO_CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop"}
LONGMEMEVAL_TYPES = {
    0: "single_hop",
    1: "two_hop",
    2: "multi_session_synthesis",
    3: "temp_reasoning_explicit",
    4: "temp_reasoning_implicit",
    5: "knowledge_update",
    6: "implicit_preference",
    7: "implicit_preference_v2",
}
QA_INSTRUCTION = "Answer the question about the conversation above in a few words, reusing its wording where possible."
TEMPORAL_HINT = " Use the DATE of the sessions and give an approximate date if needed."


@dataclass
class QA:
    question: str
    answer: str
    category: str = ""


@dataclass
class Conversation:
    """A multi-session conversation and the questions asked about it."""

    utterances: list[Utterance]
    qa: list[QA] = field(default_factory=list)
    header: str = ""
    conv_id: str = ""

    def render(self) -> str:
        """The context as in the official converters: header, then per session DATE / CONVERSATION."""
        lines = [self.header] if self.header else []
        last = object()
        for u in self.utterances:
            if u.session_id != last:
                last = u.session_id
                if u.timestamp:
                    lines.append(f"DATE: {u.timestamp}")
                lines.append("CONVERSATION:")
            lines.append(f'{u.speaker} said, "{u.text}"')
        return "\n".join(lines)


def _session_keys(conv: dict) -> list[str]:
    keys = [k for k in conv if re.fullmatch(r"session_\d+", k)]
    return sorted(keys, key=lambda k: int(k.split("_")[1]))


def _dialogue(conv: dict, caption_fmt: str) -> list[Utterance]:
    utts = []
    for sk in _session_keys(conv):
        date = conv.get(f"{sk}_date_time")
        for turn in conv[sk]:
            text = turn.get("clean_text", turn.get("text", ""))
            cap = turn.get("blip_caption")
            if cap:
                text = f"{text} {caption_fmt.format(cap=cap)}".strip()
            utts.append(Utterance(turn["speaker"], text, sk, date))
    return utts


def load_locomo(path: str | Path) -> list[Conversation]:
    """LoCoMo (``locomo10.json``): 10 conversations; category 5 (adversarial) dropped."""
    out = []
    for item in json.loads(Path(path).read_text()):
        conv = item["conversation"]
        a, b = conv.get("speaker_a", "A"), conv.get("speaker_b", "B")
        qa = []
        for q in item.get("qa", []):
            cat = int(q.get("category", 0))
            if cat == 5 or "answer" not in q:
                continue
            gold = str(q["answer"])
            if cat == 3:
                gold = gold.split(";")[0].strip()
            hint = TEMPORAL_HINT if cat == 2 else ""
            qa.append(
                QA(
                    f"{QA_INSTRUCTION}{hint} Question: {q['question']}",
                    gold,
                    LOCOMO_CATEGORIES.get(cat, str(cat)),
                )
            )
        header = f"A conversation between {a} and {b} over several dated sessions."
        out.append(
            Conversation(
                _dialogue(conv, "and shared {cap}."), qa, header, str(item.get("sample_id", ""))
            )
        )
    return out


def load_realtalk(path: str | Path) -> list[Conversation]:
    """Realtalk: one JSON object per conversation, read from a file, a merged list or a folder.

    The official release has one file per conversation with ``name.speaker_1/2``,
    ``session_<n>`` turn lists (``speaker``, ``clean_text``/``text``, optional ``blip_caption``),
    ``session_<n>_date_time`` and ``qa`` (``question``, ``answer``, ``category``); the official
    converter merges the files into one list and skips questions without an answer.
    """
    p = Path(path)
    files = sorted(p.glob("*.json")) if p.is_dir() else [p]
    items: list[tuple[str, dict]] = []
    for f in files:
        data = json.loads(f.read_text())
        if isinstance(data, list):
            items += [(f"{f.stem}_{i}", d) for i, d in enumerate(data)]
        else:
            items.append((f.stem, data))
    out = []
    for cid, item in items:
        conv = item.get("conversation", item)
        names = item.get("name", {})
        a, b = names.get("speaker_1", "A"), names.get("speaker_2", "B")
        qa = [
            QA(
                f"{QA_INSTRUCTION}{TEMPORAL_HINT} Question: {q['question']}",
                str(q["answer"]),
                str(q.get("category", "")),
            )
            for q in item.get("qa", [])
            if "answer" in q
        ]
        header = f"A conversation between {a} and {b} over several dated sessions."
        out.append(Conversation(_dialogue(conv, "shared, an image of {cap}."), qa, header, cid))
    return out


def _longmemeval_custom(conv: dict) -> Conversation:
    """One record of the official custom-history builder (``conversation_timeline``, ``qa_pairs``)."""
    utts = []
    for sess in conv["conversation_timeline"]:
        sid, ts = str(sess.get("session_id", "")), sess.get("timestamp")
        for turn in sess["session"]:
            if turn.get("role") in ("user", "assistant"):
                utts.append(Utterance(turn["role"], str(turn["content"]), sid, ts))
    qa = [
        QA(
            f"{QA_INSTRUCTION} Question: {q['question']}",
            str(q["answer"]),
            str(q.get("question_type", "single_hop")),
        )
        for q in conv.get("qa_pairs", [])
    ]
    return Conversation(utts, qa, "", str(conv.get("conversation_id", "")))


_CONTEXT_MARKERS = re.compile(r"(TIMESTAMP|SESSION|CONVERSATION|User|Assistant):\s?(.*)")


def _longmemeval_prompts(rec: dict, n: int) -> Conversation:
    """One SCBench-style record: ``prompts = [context, q1, ...]``, ``ground_truth``, ``task_types``.

    The context is the official ``build_conversation_context`` text: ``TIMESTAMP:`` / ``SESSION:`` /
    ``CONVERSATION:`` lines, then one ``User: `` / ``Assistant: `` line per turn whose content keeps
    its own newlines, so every line up to the next marker continues the turn (the blank line that
    closes a session is trimmed). A content line that itself starts with ``User:`` cannot be told
    apart from a new turn; the builder's JSON has no such ambiguity.
    """
    context, *questions = rec["prompts"]
    utts: list[Utterance] = []
    sess, ts, cur = "0", None, None
    for row in context.splitlines():
        m = _CONTEXT_MARKERS.fullmatch(row)
        key = m.group(1) if m else None
        if key in ("User", "Assistant"):
            cur = Utterance(key.lower(), m.group(2), sess, ts)
            utts.append(cur)
        elif key is not None:
            cur = None
            if key == "TIMESTAMP":
                ts = m.group(2).strip()
            elif key == "SESSION":
                sess = m.group(2).strip()
        elif cur is not None:
            cur.text += "\n" + row
    for u in utts:
        u.text = u.text.rstrip("\n")
    answers = [", ".join(a) if isinstance(a, list) else str(a) for a in rec["ground_truth"]]
    types = [
        LONGMEMEVAL_TYPES.get(int(t), str(t)) for t in rec.get("task_types", [0] * len(questions))
    ]
    if not len(questions) == len(answers) == len(types):
        raise ValueError(
            f"record {n}: {len(questions)} questions (prompts[1:]), {len(answers)} ground_truth and "
            f"{len(types)} task_types must have the same length"
        )
    qa = [QA(q, a, t) for q, a, t in zip(questions, answers, types)]
    return Conversation(utts, qa, "", str(rec.get("conversation_id", n)))


def _read_longmemeval(path: Path) -> object:
    """The parsed file: the official converter's ``torch.save`` list (``.pt``), JSON or JSON lines."""
    if path.suffix == ".pt":
        import torch

        # The converter saves plain lists/dicts of str/int (no tensors), which the safe unpickler
        # of weights_only=True accepts; it refuses arbitrary pickled objects.
        return torch.load(path, weights_only=True)
    text = path.read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_longmemeval(path: str | Path) -> list[Conversation]:
    """Custom LongMemEval histories (official code's long-history builder), in either official layout.

    * The builder's JSON: ``{"conversations": [{"conversation_id", "conversation_timeline":
      [{"timestamp", "session_id", "session": [{"role", "content"}, ...]}, ...], "qa_pairs":
      [{"question", "answer", "question_type"}, ...]}, ...]}``.
    * The converted SCBench-style records: ``{"prompts": [context, q1, ...], "ground_truth": [...],
      "task_types": [int, ...], "options", "conversation_id", "total_tokens", "metadata"}``, as the
      official ``data/longmemeval/convert_longmemeval.py`` writes them (a ``torch.save`` list,
      ``.pt``), or the same records as a JSON list or JSON lines.
    """
    data = _read_longmemeval(Path(path))
    if isinstance(data, dict) and "conversations" in data:
        return [_longmemeval_custom(c) for c in data["conversations"]]
    if isinstance(data, dict):
        data = [data]
    out = []
    for n, rec in enumerate(data):
        if "conversation_timeline" in rec:
            out.append(_longmemeval_custom(rec))
        elif "prompts" in rec:
            out.append(_longmemeval_prompts(rec, n))
        else:
            raise ValueError(f"{path}: record {n} is neither a custom history nor SCBench-style")
    return out


# benchmark.format -> loader (configs/benchmark/{locomo,realtalk,longmemeval}.yaml)
BENCHMARK_LOADERS = {
    "locomo": load_locomo,
    "realtalk": load_realtalk,
    "longmemeval": load_longmemeval,
}
