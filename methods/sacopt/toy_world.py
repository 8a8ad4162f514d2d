"""CPU toy (our toy design): synthetic production LPs, a simulated error-prone coder, template
back-translation, and verifier stand-ins.

No real LLM is available offline, so the toy tests the *correction logic* and the verifiers'
power to see semantic errors — not an LLM's modelling skill:

* :func:`make_toy_problem` — a random production-planning LP (products, resources, capacities,
  minimum orders, per-unit profits; some problems integer). Ground truth from HiGHS directly
  (``scipy.optimize.milp``).
* :class:`FakeCoder` — writes a gurobipy-style fragment per anchor; with probability ``p_err``
  it injects one semantic error (sense flip, wrong right-hand side, dropped term, wrong
  coefficient row), with ``p_syntax`` an unparsable line. Given a negative reference it never
  repeats it. Its ``reconstruct`` parses a fragment (``ast``) back into a semantic tuple and
  renders it with the same sentence templates as the anchors (a deterministic R).
* :class:`StructuralJudge` — stands in for the LLM judge: YES iff the two sentences state the
  same tuple, flipped with small false-pass / false-fail rates.
* :class:`FakeDebugger` — a :class:`~common.llm.ChatLLM` that answers the debug prompt by
  regenerating the fragments that do not parse (what a solver traceback points at).
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from methods.sacopt.codegen import static_check
from methods.sacopt.schema import Anchor, Parameter, ProblemState, Variable

__all__ = [
    "ERROR_TYPES",
    "FakeCoder",
    "FakeDebugger",
    "StructuralJudge",
    "ToyProblem",
    "inject_error",
    "make_toy_problem",
    "parse_fragment",
    "render_fragment",
]

ERROR_TYPES = ("sense_flip", "wrong_rhs", "dropped_term", "wrong_row")
_PRODUCTS = ["chairs", "tables", "desks", "shelves", "cabinets", "stools"]
_RESOURCES = [
    ("machine time", "hours"),
    ("labour", "hours"),
    ("timber", "board feet"),
    ("paint", "litres"),
]
_SENSE_WORDS = {"<=": "must not exceed", ">=": "must be at least", "==": "must equal"}
_FLIP = {"<=": ">=", ">=": "<=", "==": "<="}

# A semantic tuple: (kind, terms, sense, rhs)
#   terms: tuple of (coef, var_index) with coef a parameter reference like ("Usage", r, i) or None
#   sense: "<=", ">=", "==" for constraints; "max"/"min" for the objective
#   rhs:   ("Capacity", r) / ("MinUnits", i) for constraints; None for the objective
Tuple_ = tuple


@dataclass
class ToyProblem:
    """One synthetic LP: its state (anchors carry the true tuple in ``meta['truth']``) and optimum."""

    state: ProblemState
    optimum: float
    products: list[str]
    resources: list[tuple[str, str]]

    def render(self, sem: Tuple_) -> str:
        """Sentence for a semantic tuple — the template family shared by anchors and R."""
        kind, terms, sense, rhs = sem
        d = self.state.data
        if kind == "objective":
            goal = "Maximize" if sense == "max" else "Minimize"
            parts = [f"{self._coef(c)} per unit of {self.products[i]}" for c, i in terms]
            return f"{goal} the total profit, earning " + _join(parts) + "."
        rows = {c[1] for c, _ in terms if c is not None and c[0] == "Usage"}
        if all(c is None for c, _ in terms):
            lhs = "The number of " + _join([self.products[i] for _, i in terms]) + " produced"
        elif len(rows) == 1:
            r = next(iter(rows))
            lhs = f"The total {self.resources[r][0]} used by " + _join(
                [f"{self.products[i]} ({self._coef(c)} each)" for c, i in terms]
            )
        else:
            lhs = "The combined use of " + _join(
                [f"{self.resources[c[1]][0]} by {self.products[i]}" for c, i in terms]
            )
        if rhs[0] == "Capacity":
            name, unit = self.resources[rhs[1]]
            rhs_txt = f"the {d['Capacity'][rhs[1]]:g} {unit} of {name} available"
        else:
            rhs_txt = f"the minimum order of {d['MinUnits'][rhs[1]]:g} {self.products[rhs[1]]}"
        return f"{lhs} {_SENSE_WORDS[sense]} {rhs_txt}."

    def _coef(self, c) -> str:
        if c is None:
            return "1"
        val = self.state.data[c[0]]
        for k in c[1:]:
            val = val[k]
        return f"{val:g}"


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def render_fragment(sem: Tuple_, reverse: bool = False) -> str:
    """gurobipy-style code for a semantic tuple; ``reverse`` writes the terms in reverse order
    (different bytes, same meaning)."""
    kind, terms, sense, rhs = sem
    if reverse:
        terms = terms[::-1]

    def ref(c, i):
        coef = "" if c is None else c[0] + "".join(f"[{k}]" for k in c[1:]) + " * "
        return f"{coef}x[{i}]"

    expr = " + ".join(ref(c, i) for c, i in terms)
    if kind == "objective":
        return f"model.setObjective({expr}, GRB.{'MAXIMIZE' if sense == 'max' else 'MINIMIZE'})"
    rhs_s = rhs[0] + "".join(f"[{k}]" for k in rhs[1:])
    return f"model.addConstr({expr} {sense} {rhs_s})"


def _ref_of(node: ast.AST):
    """('Usage', 0, 1) from Usage[0][1]; ('x', 2) from x[2]."""
    idx = []
    while isinstance(node, ast.Subscript):
        if not isinstance(node.slice, ast.Constant):
            raise ValueError("non-constant index")
        idx.append(node.slice.value)
        node = node.value
    if not isinstance(node, ast.Name):
        raise ValueError("not a reference")
    return (node.id, *reversed(idx))


def _terms(node: ast.AST) -> list:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _terms(node.left) + _terms(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        c, v = _ref_of(node.left), _ref_of(node.right)
        return [(c, v[1])]
    v = _ref_of(node)
    return [(None, v[1])]


def parse_fragment(code: str) -> Tuple_ | None:
    """Inverse of :func:`render_fragment` (``None`` if the code is not of that form)."""
    try:
        tree = ast.parse(code)
        (stmt,) = tree.body
        call = stmt.value
        name = call.func.attr
        if name == "addConstr":
            (cmp,) = call.args
            (op,) = cmp.ops
            sense = {ast.LtE: "<=", ast.GtE: ">=", ast.Eq: "=="}[type(op)]
            terms = tuple(sorted(_terms(cmp.left), key=lambda t: t[1]))
            return ("constraint", terms, sense, _ref_of(cmp.comparators[0]))
        if name == "setObjective":
            expr, sense_node = call.args
            sense = "max" if sense_node.attr == "MAXIMIZE" else "min"
            return ("objective", tuple(sorted(_terms(expr), key=lambda t: t[1])), sense, None)
    except (AttributeError, ValueError, KeyError, TypeError, SyntaxError):
        return None
    return None


def make_toy_problem(seed: int) -> ToyProblem:
    """A random feasible, bounded production LP/MILP with its optimum from HiGHS."""
    rng = np.random.default_rng(seed)
    n_p, n_r = int(rng.integers(2, 5)), int(rng.integers(2, 4))
    products = list(rng.permutation(_PRODUCTS)[:n_p])
    resources = [_RESOURCES[k] for k in rng.permutation(len(_RESOURCES))[:n_r]]
    profit = rng.integers(2, 40, n_p).astype(float)
    usage = rng.integers(1, 9, (n_r, n_p)).astype(float)
    min_units = np.where(rng.random(n_p) < 0.5, rng.integers(1, 6, n_p), 0).astype(float)
    base = usage @ np.maximum(min_units, 1)
    capacity = np.ceil(base * rng.uniform(2.0, 6.0, n_r))
    vtype = "integer" if rng.random() < 0.3 else "continuous"
    data: dict[str, Any] = {
        "NumProducts": n_p,
        "NumResources": n_r,
        "Profit": profit.tolist(),
        "Usage": usage.tolist(),
        "Capacity": capacity.tolist(),
        "MinUnits": min_units.tolist(),
    }
    params = [
        Parameter("NumProducts", "number of products", []),
        Parameter("NumResources", "number of resources", []),
        Parameter("Profit", "profit per unit of each product", ["NumProducts"]),
        Parameter("Usage", "resource use per unit of product", ["NumResources", "NumProducts"]),
        Parameter("Capacity", "available amount of each resource", ["NumResources"]),
        Parameter("MinUnits", "minimum order per product", ["NumProducts"]),
    ]
    state = ProblemState(
        description="A workshop makes " + _join(products) + ".",
        parameters=params,
        variables=[Variable("x", "units of each product to make", ["NumProducts"], vtype)],
        data=data,
    )
    prob = ToyProblem(state, 0.0, products, resources)
    sems = [
        ("constraint", tuple((("Usage", r, i), i) for i in range(n_p)), "<=", ("Capacity", r))
        for r in range(n_r)
    ]
    sems += [
        ("constraint", ((None, i),), ">=", ("MinUnits", i)) for i in range(n_p) if min_units[i] > 0
    ]
    state.constraints = [Anchor("constraint", prob.render(s), meta={"truth": s}) for s in sems]
    obj = ("objective", tuple((("Profit", i), i) for i in range(n_p)), "max", None)
    state.objective = Anchor("objective", prob.render(obj), meta={"truth": obj})
    res = milp(
        -profit,
        constraints=[LinearConstraint(usage, -np.inf, capacity)],
        bounds=Bounds(min_units, np.inf),
        integrality=np.full(n_p, 1 if vtype == "integer" else 0),
    )
    if res.status != 0:  # pragma: no cover - construction guarantees feasibility
        raise RuntimeError(f"toy problem {seed} has no optimum: {res.message}")
    prob.optimum = float(-res.fun)
    return prob


def inject_error(sem: Tuple_, kind: str, rng: random.Random, prob: ToyProblem) -> Tuple_ | None:
    """Apply one semantic error of type ``kind``; ``None`` if it does not apply to this tuple."""
    k, terms, sense, rhs = sem
    n_r = prob.state.data["NumResources"]
    if kind == "sense_flip":
        if k == "objective":
            return (k, terms, "min" if sense == "max" else "max", rhs)
        return (k, terms, _FLIP[sense], rhs)
    if kind == "dropped_term":
        if len(terms) < 2:
            return None
        drop = rng.randrange(len(terms))
        return (k, terms[:drop] + terms[drop + 1 :], sense, rhs)
    if kind == "wrong_rhs":
        if k == "objective":
            return None
        if rhs[0] == "Capacity" and n_r > 1:
            return (
                k,
                terms,
                sense,
                ("Capacity", rng.choice([r for r in range(n_r) if r != rhs[1]])),
            )
        n_p = prob.state.data["NumProducts"]
        if rhs[0] == "MinUnits" and n_p > 1:
            return (
                k,
                terms,
                sense,
                ("MinUnits", rng.choice([i for i in range(n_p) if i != rhs[1]])),
            )
        return None
    if kind == "wrong_row":
        rows = [c[1] for c, _ in terms if c is not None and c[0] == "Usage"]
        if not rows or n_r < 2:
            return None
        new = rng.choice([r for r in range(n_r) if r != rows[0]])
        return (k, tuple((("Usage", new, c[2]), i) for c, i in terms), sense, rhs)
    raise ValueError(f"unknown error type {kind!r}")


class FakeCoder:
    """Simulated error-prone coder + deterministic back-translator for one toy problem.

    Args:
        problem: The toy problem (fragments are written against its data).
        p_err: Probability of one injected semantic error per generation.
        p_syntax: Probability of an unparsable fragment per generation.
        seed: RNG seed.

    Attributes:
        injected: Count of injected errors by type (``"syntax"`` included).
    """

    def __init__(
        self, problem: ToyProblem, p_err: float = 0.25, p_syntax: float = 0.05, seed: int = 0
    ):
        self.problem = problem
        self.p_err = p_err
        self.p_syntax = p_syntax
        self.rng = random.Random(seed)
        self.injected: dict[str, int] = {}

    def _draw(self, truth: Tuple_) -> tuple[str, str | None, Tuple_]:
        u = self.rng.random()
        if u < self.p_syntax:
            return render_fragment(truth)[:-7] + " +", "syntax", truth
        if u < self.p_syntax + self.p_err:
            kinds = list(ERROR_TYPES)
            self.rng.shuffle(kinds)
            for kind in kinds:
                bad = inject_error(truth, kind, self.rng, self.problem)
                if bad is not None:
                    return render_fragment(bad), kind, bad
        return render_fragment(truth), None, truth

    def generate(self, state: ProblemState, anchor: Anchor, negative_ref: str | None = None) -> str:
        """A fragment for ``anchor``; never byte-identical to ``negative_ref``."""
        truth = anchor.meta["truth"]
        for _ in range(20):
            code, err, sem = self._draw(truth)
            if code != negative_ref:
                break
        else:  # the same text again: rewrite it with the terms reordered (same meaning)
            code = render_fragment(sem, reverse=True)
        anchor.meta["error"] = err
        if err:
            self.injected[err] = self.injected.get(err, 0) + 1
        return code

    def reconstruct(self, state: ProblemState, anchor: Anchor) -> str:
        """Deterministic R: parse the fragment and render it with the anchors' templates."""
        sem = parse_fragment(anchor.code)
        return "The code could not be read." if sem is None else self.problem.render(sem)


class StructuralJudge:
    """Stand-in for δ_LLM: YES iff the sentences match, with false-pass / false-fail noise."""

    uses_llm = True

    def __init__(self, false_pass: float = 0.05, false_fail: float = 0.05, seed: int = 0) -> None:
        self.false_pass = false_pass
        self.false_fail = false_fail
        self.rng = random.Random(seed)

    def __call__(self, anchor: str, reconstruction: str, kind: str = "constraint") -> bool:
        same = anchor == reconstruction
        if same:
            return self.rng.random() >= self.false_fail
        return self.rng.random() < self.false_pass


class FakeDebugger:
    """A :class:`~common.llm.ChatLLM` for the debug prompt: re-draws fragments that do not parse.

    It reads the program from the prompt's ``=====`` block, finds each anchor's fragment by the
    ``# --- anchor <id>: ... ---`` comment :func:`~methods.sacopt.backend.assemble_program` writes,
    and replaces every fragment that fails to parse by a fresh draw from the coder.
    """

    def __init__(self, coder: FakeCoder, state: ProblemState) -> None:
        self.coder = coder
        self.state = state
        self.calls = 0

    def chat(self, messages, **kwargs) -> str:
        self.calls += 1
        prompt = messages[-1]["content"]
        program = prompt.split("Program:\n=====\n", 1)[1].split("\n=====\n", 1)[0]
        anchors = {f"c{i}": a for i, a in enumerate(self.state.constraints)}
        if self.state.objective is not None:
            anchors["objective"] = self.state.objective
        lines = program.split("\n")
        for j, line in enumerate(lines):
            if line.startswith("# --- anchor "):
                key = line[len("# --- anchor ") :].split(":", 1)[0]
                frag = lines[j + 1]
                if key in anchors and static_check(frag, anchors[key].kind) is not None:
                    lines[j + 1] = self.coder.generate(self.state, anchors[key], negative_ref=frag)
        return "Fixed the broken line.\n=====\n" + "\n".join(lines) + "\n====="

    def chat_batch(self, batch, **kwargs) -> list[str]:
        return [self.chat(m, **kwargs) for m in batch]
