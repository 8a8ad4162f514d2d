"""XRayBench-lite: the primitives and black box of our CPU toy (not in the paper; our inference).

Twelve deterministic code-transforming "agents" and four tools act on a project
``{filename: code}`` rendered as ``File: x.py`` + fenced blocks. A hidden chain of five of them is
the black box; the search only sees (task, output) pairs. ``ToyChat`` plays the LLM: it reads the
agent's name from the system prompt and the task / previous content from the user prompt, and
applies that agent's transformation, so agent calls go through the same executor and token
accounting as on the paper path. The toy stage itself (arms, seeds, results) is ``toy.py``.
"""

from __future__ import annotations

import ast
import keyword
import random
import re
from collections.abc import Callable
from typing import Any

from .config import HIDDEN_CHAIN, HIDDEN_CHAIN_LONG  # noqa: F401  (re-exported)
from .primitives import Primitive
from .similarity import codes_to_content, parse_project

Project = dict[str, str]

_FN_POOL = (
    "compute_sum",
    "find_max",
    "compute_average",
    "sort_values",
    "filter_positive",
    "count_items",
    "merge_lists",
    "get_min",
    "compute_product",
    "search_value",
)
_RENAME = {
    "compute": "calculate",
    "find": "locate",
    "get": "fetch",
    "sort": "order",
    "search": "lookup",
    "merge": "combine",
    "count": "tally",
    "filter": "select",
}


def make_tasks(n: int, seed: int) -> list[str]:
    """``n`` task specs: 3–5 required function names plus a data type (our construction, CPU toy)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        fns = rng.sample(_FN_POOL, rng.randint(3, 5))
        out.append(f"Functions: {', '.join(fns)}\nData: {rng.choice(['list', 'dict', 'table'])}")
    return out


def _task_fns(task: str) -> list[str]:
    m = re.search(r"Functions:\s*(.+)", task)
    return [f.strip() for f in m.group(1).split(",")] if m else []


def _main_tree(files: Project) -> ast.Module | None:
    if "main.py" not in files:
        return None
    try:
        return ast.parse(files["main.py"])
    except SyntaxError:
        return None


def _stmt(src: str) -> list[ast.stmt]:
    return ast.parse(src).body


def _all_fns(tree: ast.Module) -> list[ast.FunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]


def _on_main(fn: Callable[[ast.Module, Project, str], None]) -> Callable[[Project, str], Project]:
    def agent(files: Project, task: str) -> Project:
        tree = _main_tree(files)
        if tree is None:
            return files
        fn(tree, files, task)
        files["main.py"] = ast.unparse(ast.fix_missing_locations(tree)) + "\n"
        return files

    return agent


def _planner(files: Project, task: str) -> Project:
    plan = "# Plan: implement " + ", ".join(_task_fns(task))
    files.setdefault("plan.md", plan + "\n")
    return files


def _coder(files: Project, task: str) -> Project:
    files["main.py"] = "\n\n".join(f"def {f}(x):\n    return x" for f in _task_fns(task)) + "\n"
    return files


def _loop(tree: ast.Module, files: Project, task: str) -> None:
    for f in _all_fns(tree):
        if len(f.body) == 1 and isinstance(f.body[0], ast.Return):
            f.body = _stmt("total = 0\nfor item in x:\n    total += item\nreturn total")


def _class_wrap(tree: ast.Module, files: Project, task: str) -> None:
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if not fns:
        return
    for f in fns:
        f.args.args.insert(0, ast.arg("self"))
    cls = ast.ClassDef("App", [], [], fns, [], type_params=[])
    tree.body = [n for n in tree.body if n not in fns] + [cls]


def _cli(tree: ast.Module, files: Project, task: str) -> None:
    tree.body[:0] = _stmt("import argparse")
    tree.body += _stmt(
        "if __name__ == '__main__':\n    parser = argparse.ArgumentParser()\n"
        "    parser.add_argument('--input')\n    args = parser.parse_args()"
    )


def _errors(tree: ast.Module, files: Project, task: str) -> None:
    for f in _all_fns(tree):
        if not (len(f.body) == 1 and isinstance(f.body[0], ast.Try)):
            t = _stmt("try:\n    pass\nexcept Exception:\n    return None")[0]
            t.body = f.body
            f.body = [t]


def _tester(files: Project, task: str) -> Project:
    tree = _main_tree(files)
    if tree is None:
        return files
    lines = ["from main import *", ""]
    for n in tree.body:
        if isinstance(n, ast.FunctionDef):
            lines.append(f"def test_{n.name}():\n    assert {n.name}([1, 2]) is not None\n")
        elif isinstance(n, ast.ClassDef):
            for m in n.body:
                if isinstance(m, ast.FunctionDef):
                    lines.append(
                        f"def test_{m.name}():\n    assert {n.name}().{m.name}([1, 2]) is not None\n"
                    )
    files["test_main.py"] = "\n".join(lines)
    return files


def _utils_split(files: Project, task: str) -> Project:
    tree = _main_tree(files)
    if tree is None:
        return files
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if len(fns) < 2:
        return files
    helper = fns[-1]
    tree.body.remove(helper)
    tree.body.insert(0, ast.ImportFrom("utils", [ast.alias(helper.name)], 0))
    files["utils.py"] = ast.unparse(ast.fix_missing_locations(ast.Module([helper], []))) + "\n"
    files["main.py"] = ast.unparse(ast.fix_missing_locations(tree)) + "\n"
    return files


def _serializer(tree: ast.Module, files: Project, task: str) -> None:
    tree.body[:0] = _stmt("import json")
    tree.body += _stmt(
        "def save_data(data, path):\n    with open(path, 'w') as fh:\n        json.dump(data, fh)\n\n"
        "def load_data(path):\n    with open(path) as fh:\n        return json.load(fh)"
    )


def _renamer(tree: ast.Module, files: Project, task: str) -> None:
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef):
            head, _, rest = n.name.partition("_")
            if head in _RENAME:
                n.name = f"{_RENAME[head]}_{rest}" if rest else _RENAME[head]


def _visualizer(tree: ast.Module, files: Project, task: str) -> None:
    tree.body += _stmt(
        "def plot_results(data):\n    import matplotlib.pyplot as plt\n    plt.plot(data)\n"
        "    plt.savefig('plot.png')"
    )


def _docstringer(tree: ast.Module, files: Project, task: str) -> None:
    for f in _all_fns(tree):
        if not ast.get_docstring(f):
            f.body.insert(0, ast.Expr(ast.Constant(f"{f.name.replace('_', ' ').capitalize()}.")))


TOY_AGENTS: dict[str, Callable[[Project, str], Project]] = {
    "Planner": _planner,
    "Coder": _coder,
    "LoopImplementer": _on_main(_loop),
    "ClassWrapper": _on_main(_class_wrap),
    "CLIAdder": _on_main(_cli),
    "ErrorHandler": _on_main(_errors),
    "Tester": _tester,
    "UtilsSplitter": _utils_split,
    "Serializer": _on_main(_serializer),
    "Renamer": _on_main(_renamer),
    "Visualizer": _on_main(_visualizer),
    "Docstringer": _on_main(_docstringer),
}


# Distractors (our CPU toy "more primitives"): near-misses of the chain's agents — same intent,
# different code — so a chain must pick the right variant, not just the right kind of step.
def _while_loop(tree: ast.Module, files: Project, task: str) -> None:
    for f in _all_fns(tree):
        if len(f.body) == 1 and isinstance(f.body[0], ast.Return):
            f.body = _stmt(
                "i = 0\nacc = 0\nwhile i < len(x):\n    acc += x[i]\n    i += 1\nreturn acc"
            )


def _value_errors(tree: ast.Module, files: Project, task: str) -> None:
    for f in _all_fns(tree):
        f.body[:0] = _stmt("if x is None:\n    raise ValueError('x is required')")


def _service_wrap(tree: ast.Module, files: Project, task: str) -> None:
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if not fns:
        return
    for f in fns:
        f.decorator_list.append(ast.Name("staticmethod"))
    cls = ast.ClassDef("Service", [], [], fns, [], type_params=[])
    tree.body = [n for n in tree.body if n not in fns] + [cls]


def _pytest_writer(files: Project, task: str) -> Project:
    fns = _task_fns(task)
    lines = ["import pytest", "import main", ""]
    lines += [f"def test_{f}_runs():\n    assert hasattr(main, '{f}')\n" for f in fns]
    files["tests/test_app.py"] = "\n".join(lines)
    return files


def _logging(tree: ast.Module, files: Project, task: str) -> None:
    tree.body[:0] = _stmt("import logging\nlogger = logging.getLogger(__name__)")
    for f in _all_fns(tree):
        f.body.insert(0, _stmt(f"logger.info('{f.name} called')")[0])


def _type_hints(tree: ast.Module, files: Project, task: str) -> None:
    for f in _all_fns(tree):
        for a in f.args.args:
            if a.arg != "self" and a.annotation is None:
                a.annotation = ast.Name("list")
        f.returns = f.returns or ast.Name("float")


def _validator(tree: ast.Module, files: Project, task: str) -> None:
    for f in _all_fns(tree):
        f.body[:0] = _stmt("if not x:\n    return 0")


def _memoizer(tree: ast.Module, files: Project, task: str) -> None:
    tree.body[:0] = _stmt("import functools")
    for f in _all_fns(tree):
        f.decorator_list.append(ast.parse("functools.lru_cache(maxsize=None)").body[0].value)


def _main_fn(tree: ast.Module, files: Project, task: str) -> None:
    calls = "\n".join(f"    print({f}([1, 2, 3]))" for f in _task_fns(task)) or "    pass"
    tree.body += _stmt(f"def main():\n{calls}")


def _config(files: Project, task: str) -> Project:
    files["config.py"] = "DEFAULTS = {'data': 'data.json', 'verbose': False}\n"
    return files


def _sorter(tree: ast.Module, files: Project, task: str) -> None:
    for f in _all_fns(tree):
        if len(f.body) == 1 and isinstance(f.body[0], ast.Return):
            f.body = _stmt("return sorted(x)")


def _inliner(tree: ast.Module, files: Project, task: str) -> None:
    for f in _all_fns(tree):
        if len(f.body) == 1 and isinstance(f.body[0], ast.Return):
            f.body = _stmt("return sum(x)")


DISTRACTOR_AGENTS: dict[str, Callable[[Project, str], Project]] = {
    "WhileLooper": _on_main(_while_loop),
    "ValueErrorRaiser": _on_main(_value_errors),
    "ServiceWrapper": _on_main(_service_wrap),
    "PytestWriter": _pytest_writer,
    "LoggingAdder": _on_main(_logging),
    "TypeHinter": _on_main(_type_hints),
    "InputValidator": _on_main(_validator),
    "Memoizer": _on_main(_memoizer),
    "MainFunctionAdder": _on_main(_main_fn),
    "ConfigWriter": _config,
    "SortImplementer": _on_main(_sorter),
    "SumInliner": _on_main(_inliner),
}
ALL_AGENTS = {**TOY_AGENTS, **DISTRACTOR_AGENTS}


def _formatter(content: str) -> str | None:
    files = parse_project(content)
    return (
        codes_to_content(
            {k: "\n".join(ln.rstrip() for ln in v.splitlines()) + "\n" for k, v in files.items()}
        )
        if files
        else content
    )


def _dependency_extractor(content: str) -> str | None:
    files = parse_project(content)
    mods: set[str] = set()
    for name, code in files.items():
        if name.endswith(".py"):
            try:
                tree = ast.parse(code)
            except SyntaxError:
                continue
            mods |= {
                a.name.split(".")[0]
                for n in ast.walk(tree)
                if isinstance(n, ast.Import)
                for a in n.names
            }
    third = sorted(mods - {"json", "argparse", "os", "sys", "re", "math"})
    if not third:
        return content
    files["requirements.txt"] = "\n".join(third) + "\n"
    return codes_to_content(files)


def toy_syntax_check(content: str) -> str | None:
    """Toy tool (our CPU toy): FAILURE (``None``) when a ``.py`` file does not parse, else pass through.

    The paper path's ``executor.syntax_check`` instead appends a report and passes the content on.
    """
    for name, code in parse_project(content).items():
        if name.endswith(".py"):
            try:
                ast.parse(code)
            except SyntaxError:
                return None
    return content


def toy_empty_detect(content: str) -> str | None:
    """Toy tool (our construction): FAILURE when there is no code or every function body is ``pass``."""
    files = parse_project(content)
    if not files:
        return None
    for code in files.values():
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue
        fns = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
        if fns and all(len(f.body) == 1 and isinstance(f.body[0], ast.Pass) for f in fns):
            return None
    return content


TOY_TOOLS: dict[str, Callable[[str], str | None]] = {
    "syntax_check": toy_syntax_check,
    "empty_detect": toy_empty_detect,
    "formatter": _formatter,
    "dependency_extractor": _dependency_extractor,
}


def toy_agent_pool(n_distractors: int = 0) -> list[Primitive]:
    """The 12 agents of Ω plus the first ``n_distractors`` near-miss agents (0–12; our construction)."""
    if not 0 <= n_distractors <= len(DISTRACTOR_AGENTS):
        raise ValueError(
            f"n_distractors must be in [0, {len(DISTRACTOR_AGENTS)}], got {n_distractors}"
        )
    names = [*TOY_AGENTS, *list(DISTRACTOR_AGENTS)[:n_distractors]]
    return [
        Primitive("agent", n, role=n, profile=f"Toy agent {n}.", model="toy", reasoning="reasoning")
        for n in names
    ]


class ToyChat:
    """Deterministic ``ChatLLM`` stand-in that applies the named toy agent to the content (engineering)."""

    def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> str:
        name = re.match(r"You are (\w+),", messages[0]["content"]).group(1)
        user = messages[-1]["content"]
        task = user.split("Task:\n", 1)[1].split("\n\nPrevious content:\n", 1)[0]
        prev = user.split("\n\nPrevious content:\n", 1)[1].rsplit("\n\nReturn the FULL", 1)[0]
        files = {} if prev == "(empty)" else parse_project(prev)
        return codes_to_content(ALL_AGENTS[name](dict(files), task))

    def chat_batch(self, batch: list[list[dict[str, Any]]], **kwargs: Any) -> list[str]:
        return [self.chat(m) for m in batch]


def add_token_noise(text: str, rate: float, seed: int) -> str:
    """Replace a fraction ``rate`` of identifiers with random names (noisy black box; our construction)."""
    rng = random.Random(seed)

    def sub(m: re.Match) -> str:
        w = m.group(0)
        if keyword.iskeyword(w) or w in ("File", "python") or rng.random() >= rate:
            return w
        return "v" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(5))

    head, *rest = re.split(r"(```\w*\n.*?```)", text, flags=re.DOTALL)
    return head + "".join(
        re.sub(r"\b[A-Za-z_]\w*\b", sub, p) if p.startswith("```") else p for p in rest
    )
