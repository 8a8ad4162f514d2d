"""common.lazy: a package's TYPE_CHECKING imports become PEP 562 lazy attributes."""

from __future__ import annotations

import importlib
import sys
import textwrap
import types

import pytest

from common.lazy import lazy_exports, type_checking_exports

INIT = '''\
"""A toy package."""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:
    from .heavy import HEAVY_VALUE, heavy_fn
    from .heavy import heavy_fn as alias_fn
    from .sparseness import sparseness

__all__ = ["HEAVY_VALUE", "alias_fn", "heavy_fn", "sparseness"]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A package ``lazytoy`` whose ``heavy`` submodule records that it ran, with a name that is also
    a submodule's (``sparseness``, as in methods.sv_features)."""
    pkg = tmp_path / "lazytoy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(INIT)
    (pkg / "heavy.py").write_text(
        "import builtins\nbuiltins.LAZYTOY_LOADS = getattr(builtins, 'LAZYTOY_LOADS', 0) + 1\n"
        "HEAVY_VALUE = 42\n\ndef heavy_fn():\n    return 'heavy'\n"
    )
    (pkg / "sparseness.py").write_text("def sparseness():\n    return 's'\n")
    (pkg / "user.py").write_text("from lazytoy.sparseness import sparseness as imported\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import builtins

    monkeypatch.setattr(builtins, "LAZYTOY_LOADS", 0, raising=False)
    yield pkg
    for name in [m for m in sys.modules if m == "lazytoy" or m.startswith("lazytoy.")]:
        del sys.modules[name]


def test_import_runs_no_submodule_and_attributes_resolve_on_first_use(toy):
    import builtins

    package = importlib.import_module("lazytoy")
    assert builtins.LAZYTOY_LOADS == 0 and "lazytoy.heavy" not in sys.modules
    assert "heavy_fn" in dir(package) and "HEAVY_VALUE" in dir(package)
    from lazytoy import heavy_fn

    assert heavy_fn is sys.modules["lazytoy.heavy"].heavy_fn
    assert package.alias_fn is heavy_fn and package.HEAVY_VALUE == 42
    assert "heavy_fn" in vars(package)  # cached: later reads skip __getattr__
    assert builtins.LAZYTOY_LOADS == 1


def test_unknown_names_raise_attribute_error_and_submodules_still_import(toy):
    package = importlib.import_module("lazytoy")
    with pytest.raises(AttributeError, match="lazytoy.*no_such_name"):
        package.no_such_name  # noqa: B018
    from lazytoy import heavy  # a submodule, through the import system's fallback

    assert isinstance(heavy, types.ModuleType)


def test_a_name_that_is_also_a_submodule_keeps_the_exported_function(toy):
    package = importlib.import_module("lazytoy")
    importlib.import_module(
        "lazytoy.user"
    )  # loads lazytoy.sparseness before anyone asks the package
    from lazytoy import sparseness

    assert callable(sparseness) and not isinstance(sparseness, types.ModuleType)
    assert sparseness is sys.modules["lazytoy.sparseness"].sparseness is package.sparseness


def test_relative_imports_resolve_against_the_package(toy):
    exports = type_checking_exports("lazytoy", str(toy / "__init__.py"))
    assert exports == {
        "HEAVY_VALUE": ("lazytoy.heavy", "HEAVY_VALUE"),
        "heavy_fn": ("lazytoy.heavy", "heavy_fn"),
        "alias_fn": ("lazytoy.heavy", "heavy_fn"),
        "sparseness": ("lazytoy.sparseness", "sparseness"),
    }


def test_a_package_without_the_block_is_refused(tmp_path):
    init = tmp_path / "__init__.py"
    init.write_text("from .a import b\n")
    with pytest.raises(TypeError, match="TYPE_CHECKING"):
        lazy_exports("nopkg", str(init))
    init.write_text(
        textwrap.dedent("""\
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            import os
        """)
    )
    with pytest.raises(TypeError, match="only"):
        type_checking_exports("nopkg", str(init))
