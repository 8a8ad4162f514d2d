"""Lazy package exports (PEP 562), so that ``import methods.<slug>`` loads no heavy library.

A method package lists its public API as ordinary imports inside ``if TYPE_CHECKING:`` (what readers
and type checkers see) and ends with one line::

    __getattr__, __dir__ = lazy_exports(__name__, __file__)

:func:`lazy_exports` reads that block (``ast``, about a millisecond) and returns the module-level
``__getattr__`` that imports a name's submodule on first access, and a ``__dir__`` that lists the
exports. ``from methods.maxrl import maxrl_advantages`` then loads ``advantages.py`` alone and returns
the very object ``methods.maxrl.advantages.maxrl_advantages``; TRL and transformers load only when
``MaxRLTrainer`` is asked for. The block is the one list of what a package exports besides its
``__all__``; ``tests/test_import_time.py`` checks that the two agree.
"""

from __future__ import annotations

import ast
import importlib
import os
import sys
import types
from collections.abc import Callable
from typing import Any


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def type_checking_exports(package: str, init_file: str) -> dict[str, tuple[str, str]]:
    """``name -> (module, attribute)`` for every ``from ... import`` in the top-level TYPE_CHECKING block.

    Relative imports are resolved against ``package``; ``import a as b`` exports ``b``.

    Raises:
        TypeError: if ``init_file`` has no top-level ``if TYPE_CHECKING:`` block, or the block holds
            anything but ``from <module> import <names>`` statements.
    """
    with open(init_file, encoding="utf-8") as f:
        tree = ast.parse(f.read(), init_file)
    blocks = [n for n in tree.body if isinstance(n, ast.If) and _is_type_checking(n.test)]
    if not blocks:
        raise TypeError(f"{init_file}: lazy_exports needs an `if TYPE_CHECKING:` block of imports")
    exports: dict[str, tuple[str, str]] = {}
    for stmt in (s for block in blocks for s in block.body):
        if not isinstance(stmt, ast.ImportFrom) or stmt.module is None:
            raise TypeError(
                f"{init_file}:{stmt.lineno}: the TYPE_CHECKING block of a lazy package holds only "
                "`from <module> import <names>` statements"
            )
        module = stmt.module
        if stmt.level:  # ``from .advantages import`` -> methods.maxrl.advantages
            base = package.rsplit(".", stmt.level - 1)[0] if stmt.level > 1 else package
            module = f"{base}.{module}"
        for alias in stmt.names:
            exports[alias.asname or alias.name] = (module, alias.name)
    return exports


class _ExportsOverSubmodules(types.ModuleType):
    """A package that exports a name which is also one of its submodules (``sv_features.sparseness``).

    Once a submodule is loaded the import system binds it as an attribute of its package, which would
    hide the exported function of the same name from then on (``__getattr__`` only sees missing
    names). This keeps the export bound instead, as the eager ``from .sparseness import sparseness``
    of the package's ``__init__`` did.
    """

    _lazy_shadowed: dict[str, tuple[str, str]]

    def __setattr__(self, name: str, value: Any) -> None:
        source = self.__dict__.get("_lazy_shadowed", {}).get(name)
        if (
            source is not None
            and isinstance(value, types.ModuleType)
            and value.__name__ == f"{self.__name__}.{name}"
        ):
            owner = value if source[0] == value.__name__ else importlib.import_module(source[0])
            value = getattr(owner, source[1])
        super().__setattr__(name, value)


def lazy_exports(
    package: str, init_file: str
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The PEP 562 ``__getattr__`` and ``__dir__`` of ``package``, from its TYPE_CHECKING imports.

    Args:
        package: the package's ``__name__``.
        init_file: its ``__file__`` (the ``__init__.py`` holding the TYPE_CHECKING block).

    Returns:
        ``(__getattr__, __dir__)``. ``__getattr__(name)`` imports the submodule that exports ``name``,
        caches the value in the package (later look-ups are ordinary attribute reads) and returns it;
        any other name raises ``AttributeError``, so ``from package import submodule`` still falls
        back to importing the submodule.
    """
    exports = type_checking_exports(package, init_file)
    module = sys.modules[package]
    folder = os.path.dirname(init_file)
    shadowed = {
        name: source
        for name, source in exports.items()
        if os.path.isfile(os.path.join(folder, f"{name}.py"))
        or os.path.isfile(os.path.join(folder, name, "__init__.py"))
    }
    if shadowed:
        module.__class__ = _ExportsOverSubmodules
        module._lazy_shadowed = shadowed

    def __getattr__(name: str) -> Any:
        try:
            source, attr = exports[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(source), attr)
        setattr(module, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(module)) | set(exports))

    return __getattr__, __dir__
