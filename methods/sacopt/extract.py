"""Structured extraction: parameters, variables, objective and constraint anchors.

Follows the official ``parameters.py``, ``variables.py``, ``objective.py`` and ``constraint.py`` with
their self-checks on (``ERROR_CORRECTION = True`` in the official ``run.py``): a 1-5 confidence check on
every parameter and on every variable (dropped at <= 3), a redundancy pass over the constraints, then a
1-5 confidence check on every constraint whose low scores go to a keep / remove / modify decision.

Each step asks the chat model for reasoning plus a final block, parses it with
:mod:`methods.sacopt.parsing`, and retries a bounded number of times when nothing parses; a step
that never parses raises :class:`ExtractionError`, which :func:`~methods.sacopt.pipeline.solve_problem`
turns into ``status="error"`` for that problem (never a crashed batch).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from common.llm import ChatLLM
from methods.sacopt import prompts
from methods.sacopt.parsing import (
    parse_delimited_block,
    parse_json_from_end,
    parse_list_from_end,
    parse_score,
)
from methods.sacopt.schema import (
    VARIABLE_TYPES,
    Anchor,
    Parameter,
    ProblemState,
    Variable,
    shape_string_to_list,
)

logger = logging.getLogger(__name__)

__all__ = [
    "ExtractionError",
    "constraint_check",
    "extract_constraints",
    "extract_objective",
    "extract_parameters",
    "extract_state",
    "extract_variables",
    "redundancy_pass",
    "self_check",
]


class ExtractionError(ValueError):
    """The model's answers never contained a parsable block within the retry budget."""


def _check_description(description: str, need_numbers: bool) -> None:
    if not isinstance(description, str) or not description.strip():
        raise ValueError("description must be a non-empty string")
    if need_numbers and not re.search(r"\d", description):
        raise ValueError(
            "description has no numbers; a concrete problem must state its data "
            "(pass input_data for abstract problems)"
        )


def _ask(llm: ChatLLM, prompt: str, parse, retries: int, what: str):
    for _ in range(max(1, retries)):
        value = parse(llm.chat(prompts.messages(prompt)))
        if value is not None:
            return value
    raise ExtractionError(f"no parsable {what} after {max(1, retries)} attempts")


def extract_parameters(
    llm: ChatLLM, description: str, input_data: dict | None = None, retries: int = 5
) -> tuple[list[Parameter], dict[str, Any]]:
    """Parameters P and their values (official parameters.py / variables.py / constraint.py "Parameters"); values go to ``data``, not P.

    Returns:
        ``(parameters, data)``.
    """
    _check_description(description, need_numbers=input_data is None)
    prompt = (
        f"Problem description:\n-----\n{description.strip()}\n-----\n"
        + (f"Input data (JSON): {json.dumps(input_data)}\n" if input_data else "")
        + "List every parameter (known quantity) as a JSON object "
        '{SYMBOL: {"definition": str, "shape": "[dims]", "value": number or nested list}}. '
        "Use CamelCase symbols; a shape refers to scalar parameters defined earlier; array "
        "lengths must match; keep only values stated explicitly; numbers only.\n"
        'Example: {"NumProducts": {"definition": "number of products", "shape": "[]", "value": 2}, '
        '"Profit": {"definition": "profit per product", "shape": "[NumProducts]", "value": [3, 5]}}'
        "\nThink step by step, then end with the JSON object."
    )

    def parse(text: str):
        obj = parse_json_from_end(text)
        if not obj or not all(isinstance(v, dict) and "value" in v for v in obj.values()):
            return None
        return obj

    obj = _ask(llm, prompt, parse, retries, "parameter JSON")
    params, data = [], {}
    for sym, spec in obj.items():
        params.append(
            Parameter(
                sym, str(spec.get("definition", "")), shape_string_to_list(spec.get("shape", "[]"))
            )
        )
        data[sym] = spec["value"]
    if input_data:
        data.update({k: v for k, v in input_data.items() if k in data})
    return params, data


def extract_variables(
    llm: ChatLLM, description: str, parameters: list[Parameter], retries: int = 5
) -> list[Variable]:
    """Decision variables V (official parameters.py / variables.py / constraint.py "Variables")."""
    plist = {p.symbol: {"definition": p.definition, "shape": p.shape} for p in parameters}
    prompt = (
        f"Problem description:\n-----\n{description.strip()}\n-----\nParameters: {json.dumps(plist)}\n"
        'List the decision variables as a JSON object {SYMBOL: {"shape": "[dims]", "type": '
        '"continuous|integer|binary", "definition": str}}. Think step by step, then end with the JSON.'
    )

    def parse(text: str):
        obj = parse_json_from_end(text)
        if not obj or not all(
            isinstance(v, dict) and v.get("type") in VARIABLE_TYPES for v in obj.values()
        ):
            return None
        return obj

    obj = _ask(llm, prompt, parse, retries, "variable JSON")
    return [
        Variable(
            s, str(v.get("definition", "")), shape_string_to_list(v.get("shape", "[]")), v["type"]
        )
        for s, v in obj.items()
    ]


def _ctx(state: ProblemState) -> str:
    return prompts._context(state)


def extract_objective(llm: ChatLLM, state: ProblemState, retries: int = 3) -> Anchor:
    """The objective anchor ``o``: one sentence in an ``OBJECTIVE: ===== ... =====`` block (official
    code objective.py)."""
    prompt = (
        f"{_ctx(state)}\n\nState the optimisation objective of this problem in one sentence. "
        "Think step by step, then end with\nOBJECTIVE:\n=====\n<sentence>\n====="
    )
    text = _ask(llm, prompt, parse_delimited_block, retries, "objective block")
    return Anchor("objective", text)


def extract_constraints(llm: ChatLLM, state: ProblemState, retries: int = 3) -> list[str]:
    """Constraint anchors ``a_1..a_n`` as a Python list of sentences (official parameters.py / variables.py / constraint.py "Constraints")."""
    prompt = (
        f"{_ctx(state)}\n\nList every constraint of this problem as one natural-language sentence "
        "each, as a Python list of strings. Include implicit non-negativity only where needed and "
        "only constraints the description states. Think step by step, then end with the list."
    )

    def parse(text: str):
        lst = parse_list_from_end(text)
        if lst is None or not all(isinstance(s, str) and s.strip() for s in lst):
            return None
        return [s.strip() for s in lst]

    return _ask(llm, prompt, parse, retries, "constraint list")


def redundancy_pass(llm: ChatLLM, state: ProblemState, constraints: list[str]) -> list[str]:
    """Ask the model to remove or merge redundant constraints; keep the input if unparsable
    (official code constraint.py)."""
    prompt = (
        f"{_ctx(state)}\n\nConstraints: {json.dumps(constraints)}\n\nRemove duplicates and merge "
        "redundant items; do not invent new constraints. End with the updated Python list."
    )
    lst = parse_list_from_end(llm.chat(prompts.messages(prompt)))
    if lst is None or not all(isinstance(s, str) and s.strip() for s in lst):
        logger.warning(
            "redundancy pass answer unparsable; keeping %d constraints", len(constraints)
        )
        return constraints
    return [s.strip() for s in lst]


_CHECK_QUESTION = {
    "parameter": "Is its value already known from the description? Based on that, how confident are "
    "you that it is a parameter of this problem (from 1 to 5)?",
    "variable": "Is its value unknown, to be decided by the optimisation model? Based on that, how "
    "confident are you that it is a decision variable (from 1 to 5)?",
}


def self_check(
    llm: ChatLLM,
    description: str,
    items: dict[str, str],
    threshold: int = 3,
    retries: int = 5,
    kind: str = "parameter",
    context: str = "",
) -> dict[str, str]:
    """Keep the items the model rates above ``threshold`` of 5 (official ``parameters.py`` /
    ``variables.py``, ``extract_score``: keep iff the score is > 3).

    One question per item (``kind`` = ``"parameter"`` or ``"variable"``); ``context`` (the other
    extracted items) is shown with it. Fixes an official bug: the official code deletes a low-scored
    item and then asks again; here the item is dropped once and the check moves on. Only an answer
    without a score is asked again; after ``retries`` such answers the item is kept (and logged).
    """
    if kind not in _CHECK_QUESTION:
        raise ValueError(f"kind must be one of {tuple(_CHECK_QUESTION)}, got {kind!r}")
    kept = {}
    for sym, definition in items.items():
        prompt = (
            f"Problem description:\n-----\n{description.strip()}\n-----\n"
            + (f"{context}\n" if context else "")
            + f"Consider the {kind} '{sym}' ({definition}). {_CHECK_QUESTION[kind]} "
            "Finish with 'x OUT OF 5', where x is your confidence."
        )
        score = None
        for _ in range(retries):
            score = parse_score(llm.chat(prompts.messages(prompt)))
            if score is not None:
                break
        if score is None:
            logger.warning("self-check: no score for %s after %d tries; keeping it", sym, retries)
            kept[sym] = definition
        elif score > threshold:
            kept[sym] = definition
    return kept


def constraint_check(
    llm: ChatLLM,
    state: ProblemState,
    constraints: list[str],
    threshold: int = 3,
    retries: int = 5,
) -> tuple[list[str], dict[str, int]]:
    """Per-constraint confidence check with a keep / remove / modify decision (official
    ``constraint.py::extract_score_constraint``).

    Each constraint is rated 1-5 ("is it really a constraint to model explicitly?"); a score above
    ``threshold`` keeps it. A lower score asks the model, given its own explanation, to answer with
    JSON ``{"action": "yes" | "no" | "modify", "updatedConstraint": ...}``: ``yes`` keeps it, ``no``
    removes it, ``modify`` removes it and appends the updated sentence at the end of the list (as the
    official code does). An answer without a score is asked again up to ``retries`` times, then the
    constraint is kept; an unparsable decision keeps it too (the official code raises). Both are counted.

    Returns:
        ``(constraints, counts)`` with counts ``kept``, ``removed``, ``modified``, ``unscored``,
        ``bad_decision``.
    """
    counts = dict(kept=0, removed=0, modified=0, unscored=0, bad_decision=0)
    out = list(constraints)
    for c in list(constraints):
        ask = (
            f"{_ctx(state)}\n\nConsider this potential constraint: {c}\n\nIs it really a constraint? "
            "How confident are you that it should be modelled explicitly in the (MI)LP formulation "
            "(from 1 to 5)? Low confidence means it should be removed. Finish with 'x OUT OF 5'."
        )
        score, reply = None, ""
        for _ in range(retries):
            reply = llm.chat(prompts.messages(ask))
            score = parse_score(reply)
            if score is not None:
                break
        if score is None:
            counts["unscored"] += 1
            counts["kept"] += 1
            continue
        if score > threshold:
            counts["kept"] += 1
            continue
        decide = (
            f"{_ctx(state)}\n\nConstraints so far: {json.dumps(out)}\n\nA colleague proposes the "
            f"constraint: {c}\nTheir explanation:\n{reply}\n\nShould it be kept? Answer 'yes', 'no', "
            "or 'modify' with a corrected sentence, in natural language, not formulas. End with JSON "
            '{"action": "yes" | "no" | "modify", "updatedConstraint": <sentence or null>}.'
        )
        obj = parse_json_from_end(llm.chat(prompts.messages(decide)))
        action = str(obj.get("action", "")).strip().lower() if isinstance(obj, dict) else ""
        new = obj.get("updatedConstraint") if isinstance(obj, dict) else None
        if action.startswith("y"):
            counts["kept"] += 1
        elif action.startswith("n"):
            out.remove(c)
            counts["removed"] += 1
        elif action.startswith("m") and isinstance(new, str) and new.strip():
            out.remove(c)
            out.append(new.strip())
            counts["modified"] += 1
        else:
            logger.warning("constraint check: unparsable decision for %r; keeping it", c)
            counts["bad_decision"] += 1
            counts["kept"] += 1
    return out, counts


def extract_state(
    llm: ChatLLM,
    description: str,
    input_data: dict | None = None,
    use_self_check: bool = True,
    use_redundancy_pass: bool = True,
    use_constraint_check: bool = True,
    report: dict[str, int] | None = None,
) -> ProblemState:
    """Run the extraction stages and return a :class:`ProblemState` with empty code.

    The three checks are on by default, as in the official pipeline (``ERROR_CORRECTION = True``):
    ``use_self_check`` (parameters and variables), ``use_redundancy_pass`` and
    ``use_constraint_check``. Their counts (items dropped, constraints kept / removed / modified)
    are written into ``report`` when one is given.
    """
    params, data = extract_parameters(llm, description, input_data)
    checks: dict[str, int] = {}
    if use_self_check:
        keep = self_check(llm, description, {p.symbol: p.definition for p in params})
        checks["params_dropped"] = len(params) - len(keep)
        params = [p for p in params if p.symbol in keep]
        data = {k: v for k, v in data.items() if k in keep}
    state = ProblemState(description, params, [], None, [], data)
    variables = extract_variables(llm, description, params)
    if use_self_check:
        plist = json.dumps({p.symbol: p.definition for p in params})
        vlist = json.dumps({v.symbol: v.definition for v in variables})
        keep = self_check(
            llm,
            description,
            {v.symbol: v.definition for v in variables},
            kind="variable",
            context=f"Parameters: {plist}\nVariables: {vlist}",
        )
        checks["vars_dropped"] = len(variables) - len(keep)
        variables = [v for v in variables if v.symbol in keep]
    state.variables = variables
    state.objective = extract_objective(llm, state)
    cons = extract_constraints(llm, state)
    if use_redundancy_pass:
        cons = redundancy_pass(llm, state, cons)
    if use_constraint_check:
        cons, counts = constraint_check(llm, state, cons)
        checks.update({f"constraints_{k}": v for k, v in counts.items()})
    state.constraints = [Anchor("constraint", c) for c in cons]
    if report is not None:
        report.update(checks)
    return state
