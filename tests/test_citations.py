"""Every algorithmic piece of a method names its source (issue 30 point 4).

A public module-level function or class of a method's algorithm modules must say in its docstring where
it comes from: the paper (section, equation, algorithm, appendix, table, figure, theorem), the official
code (file or function), a library it wraps, or "our inference / our choice / engineering" (then the
method doc's deviations table lists it). The roles that are not algorithms are not checked: ``run.py``
(dispatch), ``config.py`` (dataclasses), ``__init__.py``, toy, paper and diagnosis drivers (``toy*.py``,
``paper*.py``, ``diagnose*.py``), data loaders (``data*.py``, ``*_data.py``), ``resume.py`` and ``checks.py``; nor are
dataclasses, exceptions, protocols and enums (records and interfaces, not algorithms).
"""

from __future__ import annotations

import ast
import re

import pytest

from common.registry import REPO_ROOT, discover_methods

SOURCE = re.compile(
    r"paper|\bEqs?\.|equation|Section|§|\bApp\.|Appendix|Algorithm|\bAlg\.|Table|Figure|\bFig\.|"
    r"Theorem|Lemma|abstract|official|our (?:inference|choice|construction|engineering|own)|"
    r"engineering|not in the paper|\bTRL\b|\bPEFT\b|transformers|scikit-learn|scipy|sklearn",
    re.IGNORECASE,
)
NOT_ALGORITHMS = ("run.py", "config.py", "__init__.py", "resume.py", "checks.py")
RECORD_BASES = ("Error", "Exception", "Protocol", "NamedTuple", "Enum", "TypedDict")
METHODS = discover_methods()


def _algorithm_modules(slug: str):
    for path in sorted((REPO_ROOT / "methods" / slug).glob("*.py")):
        name = path.name
        if (
            name in NOT_ALGORITHMS
            or name.startswith(("toy", "paper", "data", "diagnose"))
            or name.endswith("_data.py")
        ):
            continue
        yield path


def _is_record(node: ast.ClassDef) -> bool:
    decorators = {ast.unparse(d).split("(")[0].split(".")[-1] for d in node.decorator_list}
    bases = [ast.unparse(b) for b in node.bases]
    return "dataclass" in decorators or any(b.endswith(RECORD_BASES) for b in bases)


def uncited(slug: str) -> list[str]:
    """``file:name`` of every public function / class of ``slug``'s algorithm modules whose docstring
    names no source."""
    out = []
    for path in _algorithm_modules(slug):
        for node in ast.parse(path.read_text()).body:
            if node.__class__ not in (ast.FunctionDef, ast.ClassDef) or node.name.startswith("_"):
                continue
            if isinstance(node, ast.ClassDef) and _is_record(node):
                continue
            if not SOURCE.search(ast.get_docstring(node) or ""):
                out.append(f"{path.relative_to(REPO_ROOT).as_posix()}:{node.name}")
    return out


@pytest.mark.parametrize("slug", METHODS)
def test_every_algorithmic_function_names_its_source(slug):
    assert list(_algorithm_modules(slug)), f"{slug} has no algorithm module"
    missing = uncited(slug)
    assert not missing, (
        f"docstrings that name no source (paper / official code / our inference): {missing}"
    )


def test_the_check_catches_an_uncited_function(tmp_path, monkeypatch):
    """A function whose docstring names nothing is reported; one that names the paper is not."""
    import tests.test_citations as mod

    pkg = tmp_path / "methods" / "fake"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "algo.py").write_text(
        'def a():\n    """Does a thing."""\n\n\ndef b():\n    """The update of paper Eq. 3."""\n\n\n'
        '@dataclass\nclass R:\n    """A record."""\n\n\nclass Model:\n    """A model."""\n'
    )
    (pkg / "toy.py").write_text('def c():\n    """Toy driver."""\n')
    monkeypatch.setattr(mod, "REPO_ROOT", tmp_path)
    assert uncited("fake") == ["methods/fake/algo.py:a", "methods/fake/algo.py:Model"]
