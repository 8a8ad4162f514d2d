"""Optional dependencies: which extra provides which import, and a clear message when one is missing.

Packages that serve a single method live in a per-method extra of ``pyproject.toml`` (``pip install
'icml26[mcce]'``); the code imports them inside the functions that need them. :func:`install_hint`
puts a finder at the end of ``sys.meta_path``, so that such an import, when the package is absent,
fails with a ``ModuleNotFoundError`` naming the extra to install, wherever the import is written.
``tests/test_dependencies.py`` checks that every third-party import is declared, and that imports of
extras are never at module level.
"""

from __future__ import annotations

import importlib.abc
import os
import sys

_OURS = tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), d) + os.sep
    for d in ("common", "methods")
)

EXTRAS: dict[str, str] = {
    "rdkit": "mcce",  # molecule objectives
    "selfies": "mcce",  # molecule strings
    "ot": "instruction_selection",  # POT, unbalanced optimal transport
    "highspy": "sacopt",  # the HiGHS solver the generated programs call
    "rapidfuzz": "fuzzy",  # llminertia's fuzzy entity matcher
    "lm_eval": "eval",  # swordsman's lm-evaluation-harness runs (GPU)
    "hqq": "quant",  # AutoQRA's paper evaluator (GPU)
    "json_repair": "webworld",  # lenient judge-reply parsing
    "vllm": "vllm",  # GPU rollouts and serving
}
"""Top-level import name -> the extra of ``pyproject.toml`` that installs it."""


def _importer_is_ours() -> bool:
    """Whether the import being resolved was written in this package (not a library's probe)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(_OURS)


class _ExtraHint(importlib.abc.MetaPathFinder):
    """Consulted last: our own import of a missing extra gets an install message.

    Imports by other libraries (``importlib.util.find_spec("vllm")`` probes, optional imports
    inside ``try``) see the ordinary "not found" and are left alone.
    """

    def find_spec(self, fullname, path=None, target=None):
        if path is None and fullname in EXTRAS and _importer_is_ours():
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: it comes with the optional extra "
                f"{EXTRAS[fullname]!r}; install it with pip install 'icml26[{EXTRAS[fullname]}]'",
                name=fullname,
            )
        return None


def install_hint() -> None:
    """Adds the finder once (``import common`` does it)."""
    if not any(isinstance(f, _ExtraHint) for f in sys.meta_path):
        sys.meta_path.append(_ExtraHint())
