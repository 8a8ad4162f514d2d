"""Prompt builders (official parameters.py / variables.py / constraint.py), written in our own words.

Every prompt frames the model as an optimisation-modelling expert, restates the description
between ``-----`` rules, lists parameters and variables as JSON, asks for step-by-step reasoning
and a final block delimited by ``=====`` lines, which :mod:`methods.sacopt.parsing` extracts.
"""

from __future__ import annotations

import json

from methods.sacopt.schema import ProblemState

SYSTEM = "You are an expert in optimization modeling and in writing solver code in Python."

_FRAGMENT_RULES = """Rules for the code:
- Write only the statements for this one item: no imports, no model creation, no variable
  declarations (parameters and variables already exist under the symbols listed above).
- Parameters are plain Python lists: index them as P[i][j]. Variables are dictionaries keyed by
  index tuples: index them as x[i, j] (one index: x[i]).
- Use quicksum(...) for sums. Never chain comparisons (a <= x <= b): write two constraints.
- Constraints use model.addConstr(<lhs> <sense> <rhs>); the objective uses
  model.setObjective(<expression>, GRB.MAXIMIZE) or GRB.MINIMIZE."""


def _context(state: ProblemState) -> str:
    params = {p.symbol: {"definition": p.definition, "shape": p.shape} for p in state.parameters}
    varis = {
        v.symbol: {"definition": v.definition, "shape": v.shape, "type": v.type}
        for v in state.variables
    }
    return (
        f"Problem description:\n-----\n{state.description.strip()}\n-----\n\n"
        f"Parameters:\n{json.dumps(params, indent=1)}\n\nVariables:\n{json.dumps(varis, indent=1)}"
    )


def messages(user: str) -> list[dict[str, str]]:
    """System message first, then the user prompt (our choice (docs deviations): conventional order)."""
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def fragment_prompt(state: ProblemState, kind: str, text: str, negative_ref: str | None) -> str:
    """Forward generation G / G_obj / regeneration G' (official model2data.py / run.py)."""
    what = "objective" if kind == "objective" else "constraint"
    example = (
        "model.setObjective(quicksum(Profit[i] * x[i] for i in range(N)), GRB.MAXIMIZE)"
        if kind == "objective"
        else "for i in range(N):\n    model.addConstr(x[i] <= Cap[i])"
    )
    out = (
        f"{_context(state)}\n\nTask: write the code for this {what}:\n"
        f"{what.upper()}: {text}\n\n{_FRAGMENT_RULES}\n\nExample of the expected form:\n"
        f"CODE\n=====\n{example}\n=====\n"
    )
    if negative_ref:
        out += (
            "\nA previous attempt, shown below, does NOT express this "
            f"{what} correctly. Do not reuse it; write a corrected version.\n"
            f"PREVIOUS (incorrect)\n=====\n{negative_ref}\n=====\n"
        )
    return out + "\nThink step by step, then end with the code between CODE ===== and =====."


def reconstruct_prompt(state: ProblemState, kind: str, code: str, reference: str) -> str:
    """Backward reconstruction R (official model2data.py / run.py): describe the code in words, strictly from the code."""
    what = "objective" if kind == "objective" else "constraint"
    return (
        f"{_context(state)}\n\nHere is code that implements one {what} of this problem:\n"
        f"=====\n{code}\n=====\n\nWrite a natural-language description of exactly what this code "
        f"enforces, derived only from the code (senses, terms, right-hand sides), not from the "
        f"problem text. Match the length and structure of this example, but do not copy it:\n"
        f"EXAMPLE: {reference}\n\nEnd with\n{what.upper()}:\n=====\n<description>\n====="
    )


def judge_prompt(kind: str, original: str, reconstructed: str) -> str:
    """LLM judge δ_LLM (official model2data.py / run.py E1)."""
    what = "objective" if kind == "objective" else "constraint"
    return (
        f"Two descriptions of one {what} of an optimization model follow.\n"
        f"ORIGINAL: {original}\nRECONSTRUCTED: {reconstructed}\n\n"
        "Do they state the same mathematical condition (same direction of the inequality, same "
        "terms, same bound)? Answer with one capitalised word.\nANSWER:\n=====\nYES or NO\n====="
    )


def debug_prompt(description: str, code: str, error: str) -> str:
    """Solver-error debugging (official run.py lines 17-20)."""
    return (
        "You are an operations-research consultant fixing a solver program.\n"
        f"Problem description:\n-----\n{description.strip()}\n-----\n\n"
        f"Program:\n=====\n{code}\n=====\n\nIt fails with:\n{error[-2000:]}\n\n"
        "Explain the cause, then return the FULL corrected program between ===== lines."
    )
