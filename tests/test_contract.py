"""The contract every registered method keeps (PEFT-style, one table of cases).

For each ``methods/<slug>/`` with a ``run.py``: the package imports offline without loading a model,
every name in ``__all__`` exists, and ``run`` on the composed demo config returns floats that include
both ``HEADLINE`` keys and writes ``results.json`` and ``results.md``. This is also the tour's row.
"""

from __future__ import annotations

import ast
import importlib
import json
import math
from pathlib import Path

import pytest

from common.registry import compose, discover_methods, get_method, run_method
from common.threads import torch_threads
from tests.tiny_runs import TINY_OVERRIDES

SLUGS = discover_methods()


@pytest.mark.parametrize("slug", SLUGS)
def test_public_api(slug):
    package = importlib.import_module(f"methods.{slug}")
    assert package.__doc__ and package.__doc__.strip(), "the package docstring names the paper"
    names = getattr(package, "__all__", None)
    assert names, f"methods.{slug} must define __all__"
    missing = [n for n in names if not hasattr(package, n)]
    assert not missing, f"names in __all__ but not defined: {missing}"
    assert len(set(names)) == len(names), "__all__ has duplicates"  # order: ruff RUF022


def _run_and_check(slug: str, overrides: list[str], run_dir: Path) -> None:
    module = get_method(slug)
    assert isinstance(module.DEMO_OVERRIDES, list)
    key, base_key = module.HEADLINE
    cfg = compose([f"experiment={slug}_toy", *module.DEMO_OVERRIDES, *overrides], run_dir=run_dir)
    assert cfg.method.name == slug
    with torch_threads(1):
        metrics = run_method(cfg)
    assert metrics and all(isinstance(v, float) for v in metrics.values())
    assert key in metrics and base_key in metrics, f"HEADLINE keys missing from {sorted(metrics)}"
    assert math.isfinite(metrics[key]) and math.isfinite(metrics[base_key])
    payload = json.loads((run_dir / "results.json").read_text())
    assert payload["method"] == slug and payload["metrics"]
    assert (run_dir / "results.md").read_text().count("|") > 4


@pytest.mark.slow
@pytest.mark.parametrize("slug", SLUGS)
def test_demo_run_writes_results(slug, run_dir):
    """The tour's row at demo size (``make demo``'s config), end to end."""
    _run_and_check(slug, [], run_dir)


def test_every_method_has_a_tiny_run():
    assert sorted(TINY_OVERRIDES) == SLUGS


@pytest.mark.parametrize("slug", SLUGS)
def test_tiny_run_writes_results(slug, run_dir):
    """The quick tier's end-to-end run: the demo config shrunk to seconds (tests/tiny_runs.py)."""
    _run_and_check(slug, TINY_OVERRIDES[slug], run_dir)


def test_no_reference_to_the_working_notes():
    """Docstrings, comments and docs cite the paper or the official code, never our working notes.

    The notes ("spec", kept outside the repository) have their own section numbers, which readers
    would take for the paper's. The patterns are built from parts so this file does not match.
    """
    import re
    from pathlib import Path

    section = "\u00a7"
    patterns = [
        "spec" + r"(?:'s)?\s*" + section,  # a section of the notes, possessive or not
        section + r"\s*[\d.]+\s+of\s+the\s+" + "spec",  # the same, written backwards
        "spec" + r"s/",  # the notes' folder
    ]
    pattern = re.compile("|".join(patterns), re.IGNORECASE)
    root = Path(__file__).resolve().parents[1]
    hits = []
    for top in ("methods", "common", "docs", "configs", "scripts", "tests"):
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in {".py", ".md", ".yaml", ".yml", ".sh", ".txt"}:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if pattern.search(line):
                    hits.append(f"{path.relative_to(root)}:{n}: {line.strip()[:100]}")
    hint = "cite the paper, the official code or 'our inference' instead:\n"
    assert not hits, hint + "\n".join(hits)


@pytest.mark.parametrize("slug", discover_methods())
def test_file_roles(slug):
    """docs/adding_a_method.md: every stage function lives in ``toy.py`` or ``paper.py`` /
    ``paper_<part>.py``; ``run.py`` defines none and imports no other module of the method."""
    run = importlib.import_module(f"methods.{slug}.run")
    for stage, fn in run.STAGES.items():
        module = fn.__module__.rsplit(".", 1)[-1]
        assert fn.__module__.startswith(f"methods.{slug}."), (stage, fn.__module__)
        assert module in ("toy", "paper") or module.startswith("paper_"), (
            f"methods/{slug}: stage {stage!r} is defined in {module}.py (toy.py or paper*.py)"
        )
    src = Path(importlib.import_module(f"methods.{slug}").__path__[0]) / "run.py"
    for node in ast.walk(ast.parse(src.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        mod = node.module or ""
        if node.level == 1 or mod.startswith(f"methods.{slug}"):
            rel = mod.removeprefix(f"methods.{slug}").lstrip(".")
            names = [a.name for a in node.names] if not rel else [rel.split(".")[0]]
            for name in names:
                assert name in ("toy", "paper") or name.startswith("paper_"), (slug, name)
