"""Each method folder reads in one sitting (issue 30 point 5): no module of ``methods/`` or ``common/``
over about 450 lines, no function whose body (docstring excluded) is over about 80 lines."""

from __future__ import annotations

import ast

from common.registry import REPO_ROOT

MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 80


def _modules():
    return sorted([*REPO_ROOT.glob("methods/**/*.py"), *REPO_ROOT.glob("common/**/*.py")])


def _body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement after the docstring to the end of the function."""
    body = node.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(getattr(body[0], "value", None), ast.Constant)
    ):
        body = body[1:] or body
    return node.end_lineno - body[0].lineno + 1


def test_no_module_is_over_the_size_limit():
    long = {p.relative_to(REPO_ROOT).as_posix(): n for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES}  # fmt: skip
    assert not long, f"modules over {MAX_FILE_LINES} lines (split them by component): {long}"


def test_no_function_is_over_the_size_limit():
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            is_fn = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            if is_fn and (n := _body_lines(node)) > MAX_FUNCTION_LINES:
                long[f"{path.relative_to(REPO_ROOT).as_posix()}:{node.name}"] = n
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines without their docstring: {long}"


def test_body_lines_excludes_the_docstring():
    fn = ast.parse('def f():\n    """Doc\n    more."""\n    a = 1\n    return a\n').body[0]
    assert _body_lines(fn) == 2
