"""Structured extraction: parameters, variables, objective and constraint anchors (spec §3.2 lines 1-8).

Each step asks the chat model for reasoning plus a final block, parses it with
:mod:`methods.sacopt.parsing`, and retries a bounded number of times when nothing parses; a step
that never parses raises :class:`ExtractionError`, which :func:`~methods.sacopt.evaluate.solve_problem`
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
    """Parameters P and their values (spec §3.3 "Parameters"); values go to ``data``, not P.

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
    """Decision variables V (spec §3.3 "Variables")."""
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
    """The objective anchor ``o``: one sentence in an ``OBJECTIVE: ===== ... =====`` block."""
    prompt = (
        f"{_ctx(state)}\n\nState the optimisation objective of this problem in one sentence. "
        "Think step by step, then end with\nOBJECTIVE:\n=====\n<sentence>\n====="
    )
    text = _ask(llm, prompt, parse_delimited_block, retries, "objective block")
    return Anchor("objective", text)


def extract_constraints(llm: ChatLLM, state: ProblemState, retries: int = 3) -> list[str]:
    """Constraint anchors ``a_1..a_n`` as a Python list of sentences (spec §3.3 "Constraints")."""
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
    """Ask the model to remove or merge redundant constraints; keep the input if unparsable."""
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


def self_check(
    llm: ChatLLM, description: str, items: dict[str, str], threshold: int = 3, retries: int = 5
) -> dict[str, str]:
    """Keep items the model rates above ``threshold`` of 5 (spec §3.2 lines 2-3).

    Fixes the repo bug (spec §10): parse the score; drop the item if ``score <= threshold`` and move
    on; retry only when no score parses (after ``retries`` the item is kept, and logged).
    """
    kept = {}
    for sym, definition in items.items():
        prompt = (
            f"Problem description:\n-----\n{description.strip()}\n-----\n"
            f"Is '{sym}' ({definition}) a quantity this problem really has? Rate your confidence "
            "from 1 to 5 and finish with 'x OUT OF 5'."
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


def extract_state(
    llm: ChatLLM,
    description: str,
    input_data: dict | None = None,
    use_self_check: bool = False,
    use_redundancy_pass: bool = True,
) -> ProblemState:
    """Run the extraction stages and return a :class:`ProblemState` with empty code."""
    params, data = extract_parameters(llm, description, input_data)
    if use_self_check:
        keep = self_check(llm, description, {p.symbol: p.definition for p in params})
        params = [p for p in params if p.symbol in keep]
    state = ProblemState(description, params, [], None, [], data)
    state.variables = extract_variables(llm, description, params)
    state.objective = extract_objective(llm, state)
    cons = extract_constraints(llm, state)
    if use_redundancy_pass:
        cons = redundancy_pass(llm, state, cons)
    state.constraints = [Anchor("constraint", c) for c in cons]
    return state
