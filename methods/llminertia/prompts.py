"""Prompt sets for the LLMInertia pipeline, written in our own words.

Each step is sent as one user turn. Placeholders are named (``{text}``, ``{entities}``, ``{k}``,
``{question}``, ``{note}``, ``{a}``, ``{b}``) and filled with ``str.format``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GENERIC", "MEDICAL", "PROMPT_SETS", "SYNTHETIC", "PromptSet"]


@dataclass(frozen=True)
class PromptSet:
    """Templates of the three pipeline steps plus the two reminder kinds.

    Attributes:
        extract: step 1, placeholder ``{text}``.
        probe: step 2, placeholders ``{entities}`` and ``{k}``.
        answer: step 3, placeholders ``{question}`` and ``{note}``.
        reminder_pair: one counter-inertial sentence, placeholders ``{a}`` and ``{b}``.
        reminder_generic: the note used when no probed pair occurs in the input.
    """

    extract: str
    probe: str
    answer: str
    reminder_pair: str
    reminder_generic: str


_REMINDER_PAIR = (
    "{a} and {b} are often mentioned together, but that does not make them related here; "
    "go back to the text and judge only from what it states."
)
_REMINDER_GENERIC = (
    "Read the original text closely. Do not fill in facts that are usually assumed but are not "
    "stated, and watch for details that are easy to miss."
)
_ANSWER = (
    "Answer the question using only the evidence in it. Reply in exactly this form: "
    "【Conclusion】: Yes or 【Conclusion】: No.\n\n"
    "Example 1\nQuestion: {ex_neg}\nNote: {ex_neg_note}\nAnswer: 【Conclusion】: No\n\n"
    "Example 2\nQuestion: {ex_pos}\nNote: {ex_pos_note}\nAnswer: 【Conclusion】: Yes\n\n"
    "Question: {{question}}\nNote: {{note}}\nAnswer:"
)


def _answer(ex_neg: str, ex_pos: str, a: str, b: str) -> str:
    note = _REMINDER_PAIR.format(a=a, b=b)
    return _ANSWER.format(ex_neg=ex_neg, ex_neg_note=note, ex_pos=ex_pos, ex_pos_note=note)


MEDICAL = PromptSet(
    extract=(
        "List every important medical entity in the text below (diseases, symptoms, drugs, "
        "examinations, test results). Reply with one comma-separated English list and nothing "
        "else.\nExample text: The patient reports chest pain; the ECG was normal.\n"
        "Example reply: chest pain, ECG\n\nText: {text}\nReply:"
    ),
    probe=(
        "For each entity below, name the {k} entities you most strongly associate with it. "
        "Write each as a tuple (Entity, Associated), {k} tuples per line, one line per entity.\n"
        "Example entities: Fever\nExample reply: (Fever, Infection) (Fever, Influenza) "
        "(Fever, Sepsis)\n\nEntities: {entities}\nReply:"
    ),
    answer=_answer(
        "The patient has a persistent cough. A chest CT shows no sign of pneumonia. "
        "Does pneumonia exist?",
        "The patient has a fever. Blood cultures confirm sepsis. Does sepsis exist?",
        "cough",
        "pneumonia",
    ),
    reminder_pair=_REMINDER_PAIR,
    reminder_generic=_REMINDER_GENERIC,
)

SYNTHETIC = PromptSet(
    extract=(
        "List every named entity in the text below. Reply with one comma-separated list and "
        "nothing else.\nExample text: Glass Harbor was observed; Velvet Cloud was not.\n"
        "Example reply: Glass Harbor, Velvet Cloud\n\nText: {text}\nReply:"
    ),
    probe=(
        "For each entity below, name the {k} entities you most strongly associate with it. "
        "Write each as a tuple (Entity, Associated), {k} tuples per line, one line per entity.\n"
        "Example entities: Glass Harbor\nExample reply: (Glass Harbor, Velvet Cloud) "
        "(Glass Harbor, Iron Meadow) (Glass Harbor, Paper Moon)\n\nEntities: {entities}\nReply:"
    ),
    answer=_answer(
        "Glass Harbor was recorded. A full check found no trace of Velvet Cloud. "
        "Does Velvet Cloud exist?",
        "Iron Meadow was recorded, and Paper Moon was confirmed too. Does Paper Moon exist?",
        "Glass Harbor",
        "Velvet Cloud",
    ),
    reminder_pair=_REMINDER_PAIR,
    reminder_generic=_REMINDER_GENERIC,
)

GENERIC = PromptSet(
    extract=(
        "List the important entities (people, places, objects, concepts) in the text below as "
        "one comma-separated list and nothing else.\n\nText: {text}\nReply:"
    ),
    probe=MEDICAL.probe,
    answer=(
        "Answer the question using only the evidence given. If it is a yes/no question, reply "
        "as 【Conclusion】: Yes or 【Conclusion】: No.\n\nQuestion: {question}\nNote: {note}\n"
        "Answer:"
    ),
    reminder_pair=_REMINDER_PAIR,
    reminder_generic=_REMINDER_GENERIC,
)

PROMPT_SETS: dict[str, PromptSet] = {"medical": MEDICAL, "synthetic": SYNTHETIC, "generic": GENERIC}
