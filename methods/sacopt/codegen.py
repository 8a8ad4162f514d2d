"""Forward generation G and backward reconstruction R (official model2data.py / run.py), plus a static pre-check.

``generate_fragment`` asks the LLM for the code of one anchor (``c_i = G(D, P, V, a_i)``; with a
``negative_ref`` it is the regeneration ``G'``); ``reconstruct`` asks it to describe a fragment
in words (``â_i = R(D, P, V, c_i)``). :class:`LLMCoder` bundles both for :class:`SACOptLoop`.
"""

from __future__ import annotations

import ast
from typing import Protocol

from common.llm import ChatLLM
from methods.sacopt import prompts
from methods.sacopt.parsing import parse_code_block, parse_delimited_block
from methods.sacopt.schema import Anchor, ProblemState

__all__ = ["Coder", "LLMCoder", "generate_fragment", "reconstruct", "static_check"]

_DECLARE = {"addVar", "addVars", "addVariable", "addVariables", "Model", "Highs"}


def static_check(code: str, kind: str = "constraint") -> str | None:
    """Reasons a fragment is rejected before any LLM check (our bad-input rules), or ``None`` if fine.

    Our choice, not in the paper (the official code comments ``addVar`` lines out); deviations table.

    Rejects: empty code, a syntax error, a variable/model declaration inside a fragment, a chained
    comparison (``a <= x <= b``), imports, and a constraint fragment without ``addConstr`` (or an
    objective fragment without ``setObjective``).
    """
    if not code or not code.strip():
        return "empty fragment"
    try:
        tree = ast.parse(code)
    except SyntaxError as err:
        return f"syntax error: {err.msg} (line {err.lineno})"
    calls = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return "fragment must not import modules"
        if isinstance(node, ast.Compare) and len(node.ops) > 1:
            return "chained comparison: split a <= x <= b into two constraints"
        if isinstance(node, ast.Call):
            f = node.func
            calls.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    if calls & _DECLARE:
        return f"fragment declares variables or a model ({sorted(calls & _DECLARE)})"
    need = "setObjective" if kind == "objective" else "addConstr"
    if need not in calls and not (kind == "constraint" and "addConstrs" in calls):
        return f"{kind} fragment never calls {need}"
    return None


def generate_fragment(
    llm: ChatLLM, state: ProblemState, anchor: Anchor, negative_ref: str | None = None
) -> str:
    """``c = G(D, P, V, a)`` or, with ``negative_ref``, ``G'(D, P, V, a, c_prev)`` (E3 of
    docs/methods/sacopt.md; prompt structure as the official code's, wording ours).

    Returns the code inside the final ``=====`` block, else inside the last ```` ```python ````
    fence (as the official ``extract_code_from_end``); '' if neither (the static check then rejects it).
    """
    msg = prompts.fragment_prompt(state, anchor.kind, anchor.text, negative_ref)
    return parse_code_block(llm.chat(prompts.messages(msg))) or ""


def reconstruct(
    llm: ChatLLM, state: ProblemState, anchor: Anchor, reference: str | None = None
) -> str:
    """``â = R(D, P, V, c)``: back-translate ``anchor.code`` into a sentence (official model2data.py / run.py).

    ``reference`` is the structural example shown to the model; default the anchor's own text
    (our choice (docs deviations); the repo passes the whole constraint list).
    """
    msg = prompts.reconstruct_prompt(state, anchor.kind, anchor.code, reference or anchor.text)
    return parse_delimited_block(llm.chat(prompts.messages(msg))) or ""


class Coder(Protocol):
    """What the correction loop needs: forward generation and backward reconstruction."""

    def generate(
        self, state: ProblemState, anchor: Anchor, negative_ref: str | None = None
    ) -> str: ...

    def reconstruct(self, state: ProblemState, anchor: Anchor) -> str: ...


class LLMCoder:
    """:class:`Coder` backed by a chat LLM (one call per ``generate`` / ``reconstruct``).

    G and R as the official ``model2data.py`` / ``run.py`` call them; ``recon_reference`` in the deviations.
    """

    def __init__(self, llm: ChatLLM, recon_reference: str = "anchor") -> None:
        if recon_reference not in ("anchor", "all"):
            raise ValueError(f"recon_reference must be 'anchor' or 'all', got {recon_reference!r}")
        self.llm = llm
        self.recon_reference = recon_reference

    def generate(self, state: ProblemState, anchor: Anchor, negative_ref: str | None = None) -> str:
        return generate_fragment(self.llm, state, anchor, negative_ref)

    def reconstruct(self, state: ProblemState, anchor: Anchor) -> str:
        ref = None
        if self.recon_reference == "all":  # the repo's choice: every constraint as the example
            ref = "\n".join(a.text for a in state.constraints)
        return reconstruct(self.llm, state, anchor, ref)
