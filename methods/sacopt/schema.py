"""Structured problem state: parameters, variables and semantic anchors (official model2data.py / run.py).

A :class:`ProblemState` is what SAC-Opt builds from a natural-language description: parameters
P (symbol, definition, shape; values live separately in ``data``), decision variables V, and the
semantic anchors — one natural-language sentence per constraint plus one for the objective — each
carrying the code fragment generated for it, its back-translation and its verification flag.
"""

from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "VARIABLE_TYPES",
    "Anchor",
    "Parameter",
    "ProblemState",
    "Variable",
    "shape_string_to_list",
    "validate_state",
]

VARIABLE_TYPES = ("continuous", "integer", "binary")
_SYMBOL = re.compile(r"^[A-Za-z][A-Za-z0-9]*(_[A-Za-z0-9]+)?$")  # CamelCase, at most one "_"


def shape_string_to_list(shape: str | list) -> list[str | int]:
    """Parse a shape written as text: ``"[N, M, 19]" -> ["N", "M", 19]``, ``"[]" -> []``.

    Engineering: reads the ``shape`` field of the official parameter / variable JSON.

    Raises:
        ValueError: ``shape`` is not a bracketed, comma-separated list of symbols/integers.
    """
    if isinstance(shape, list):
        items = shape
    else:
        s = str(shape).strip()
        if not (s.startswith("[") and s.endswith("]")):
            raise ValueError(f"shape must look like '[N, M]' or '[]', got {shape!r}")
        inner = s[1:-1].strip()
        items = [t.strip().strip("'\"") for t in inner.split(",")] if inner else []
    out: list[str | int] = []
    for t in items:
        if isinstance(t, int) or (isinstance(t, str) and t.lstrip("-").isdigit()):
            out.append(int(t))
        elif isinstance(t, str) and t.isidentifier():
            out.append(t)
        else:
            raise ValueError(f"shape entry {t!r} in {shape!r} is neither a symbol nor an integer")
    return out


@dataclass
class Parameter:
    """A known quantity ``p_k``: symbol, definition, shape (dimension symbols or ints)."""

    symbol: str
    definition: str = ""
    shape: list[str | int] = field(default_factory=list)


@dataclass
class Variable:
    """A decision variable ``v_k``: symbol, definition, shape, type in :data:`VARIABLE_TYPES`."""

    symbol: str
    definition: str = ""
    shape: list[str | int] = field(default_factory=list)
    type: str = "continuous"


@dataclass
class Anchor:
    """A semantic anchor (official model2data.py / run.py): one constraint or the objective, in words and in code.

    Attributes:
        kind: ``"constraint"`` or ``"objective"``.
        text: The anchor sentence ``a_i`` extracted from the description.
        code: The current code fragment ``c_i^(t)``.
        recon: The latest back-translation ``â_i^(t)`` of ``code``.
        verified: Whether ``δ(a_i, â_i) = 1`` was observed for the current code.
        history: Earlier, rejected fragments (oldest first).
        meta: Free-form data (the toy stores its ground-truth tuple here).
    """

    kind: str
    text: str
    code: str = ""
    recon: str = ""
    verified: bool = False
    history: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in ("constraint", "objective"):
            raise ValueError(f"kind must be 'constraint' or 'objective', got {self.kind!r}")
        if not isinstance(self.text, str) or not self.text.strip():
            raise ValueError("anchor text must be a non-empty string")


@dataclass
class ProblemState:
    """Everything known about one problem (official data layout ``state.json``)."""

    description: str
    parameters: list[Parameter] = field(default_factory=list)
    variables: list[Variable] = field(default_factory=list)
    objective: Anchor | None = None
    constraints: list[Anchor] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def anchors(self, include_objective: bool = True) -> list[Anchor]:
        """Constraint anchors, then the objective anchor (if present and requested)."""
        out = list(self.constraints)
        if include_objective and self.objective is not None:
            out.append(self.objective)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (for ``state.json``)."""
        return asdict(self)


def _dims(value: Any) -> list[int]:
    dims = []
    while isinstance(value, list):
        dims.append(len(value))
        value = value[0] if value else None
    return dims


def _is_numeric_array(value: Any) -> bool:
    if isinstance(value, list):
        return all(_is_numeric_array(v) for v in value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def validate_state(state: ProblemState, data: dict[str, Any] | None = None) -> None:
    """Check symbols and shapes against the data (the official ``sanity_check``, our bad-input rules).

    Rules: symbols are CamelCase identifiers (at most one underscore) and unique; every parameter
    has a numeric value in ``data``; every dimension symbol in a shape is a scalar integer
    parameter; array dimensions equal the shape; variable types are continuous/integer/binary.

    Raises:
        ValueError: The first violated rule, naming the symbol.
    """
    data = state.data if data is None else data
    seen: set[str] = set()
    for kind, items in (("parameter", state.parameters), ("variable", state.variables)):
        for it in items:
            if not _SYMBOL.match(it.symbol) or not it.symbol.isidentifier():
                raise ValueError(
                    f"{kind} symbol {it.symbol!r} must be CamelCase (letters/digits, at most one '_')"
                )
            if it.symbol in seen:
                raise ValueError(f"duplicate symbol {it.symbol!r}")
            seen.add(it.symbol)
    for v in state.variables:
        if v.type not in VARIABLE_TYPES:
            raise ValueError(
                f"variable {v.symbol!r} has type {v.type!r}; expected {VARIABLE_TYPES}"
            )
    for p in state.parameters:
        if p.symbol not in data:
            raise ValueError(f"parameter {p.symbol!r} has no value in the data")
        if not _is_numeric_array(data[p.symbol]):
            raise ValueError(f"parameter {p.symbol!r} must be numeric, got {data[p.symbol]!r:.60}")
    for kind, items in (("parameter", state.parameters), ("variable", state.variables)):
        for it in items:
            expected = []
            for d in it.shape:
                if isinstance(d, int):
                    expected.append(d)
                    continue
                if d not in data:
                    raise ValueError(
                        f"{kind} {it.symbol!r}: shape dimension {d!r} is not a defined parameter"
                    )
                val = data[d]
                if not isinstance(val, (int, float)) or isinstance(val, bool) or val != int(val):
                    raise ValueError(f"{kind} {it.symbol!r}: dimension {d!r} must be a scalar int")
                expected.append(int(val))
            if kind == "parameter":
                got = _dims(data[it.symbol])
                if got != expected:
                    raise ValueError(
                        f"parameter {it.symbol!r}: data has dimensions {got}, shape {it.shape} "
                        f"means {expected}"
                    )


def code_is_python(code: str) -> bool:
    """Whether ``code`` parses as Python (engineering helper)."""
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True
