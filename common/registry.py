"""The method registry and config composition behind the ``icml26`` CLI.

A method is registered by convention, not by import-time side effects: every folder
``methods/<slug>/`` that holds a ``run.py`` is a method, and ``run.py`` defines

- ``STAGES: dict[str, Callable[[common.config.Run], dict[str, float]]]``: one function per stage
  of the method's config schema (``methods/<slug>/config.py``), selected by ``method.stage``;
- ``DEMO_OVERRIDES: list[str]``: Hydra overrides on top of ``experiment=<slug>_toy`` for the tour;
- ``HEADLINE: tuple[str, str]``: the result keys of the headline metric and of its baseline.

``common`` never imports a method module at import time; ``get_method`` imports one on demand.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import pkgutil
import time
from pathlib import Path
from types import ModuleType

from omegaconf import DictConfig, OmegaConf, open_dict

from common.config import (
    ConfigError,
    check_keys,
    method_schemas,
    register_schemas,
    unknown_key_message,
    validate,
)
from common.tracking import reset_models_loaded

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
# The Hydra configs: ``configs/`` of the checkout, reached through the ``common/configs`` link, which
# the wheel ships as real files, so ``icml26`` works from an installed package too.
CONFIG_DIR = Path(__file__).parent / "configs"


def discover_methods() -> list[str]:
    """Sorted slugs of every ``methods/<slug>/`` package that has a ``run.py``."""
    import methods

    slugs = []
    for info in pkgutil.iter_modules(methods.__path__):
        if info.ispkg and (Path(methods.__path__[0]) / info.name / "run.py").exists():
            slugs.append(info.name)
    return sorted(slugs)


def get_method(slug: str) -> ModuleType:
    """Imports and returns ``methods.<slug>.run``.

    Raises:
        ValueError: if no method of that name is registered; the message lists the known ones.
    """
    known = discover_methods()
    if slug not in known:
        raise ValueError(
            f"unknown method {slug!r}; registered methods: {', '.join(known) or '(none)'}"
        )
    module = importlib.import_module(f"methods.{slug}.run")
    if not isinstance(getattr(module, "STAGES", None), dict) and not callable(
        getattr(module, "run", None)
    ):
        raise TypeError(f"methods/{slug}/run.py must define STAGES (stage -> function)")
    return module


def compose(
    overrides: list[str] | None = None, run_dir: str | Path | None = None, *, full: bool = True
) -> DictConfig:
    """Composes ``configs/config.yaml`` with Hydra overrides, outside ``@hydra.main`` (tests, tour).

    The method, model, benchmark and root schemas are registered first, so a misspelt key or a
    wrong type raises here; every key, one appended with ``+``/``++`` included, is checked against
    its dataclass (:func:`common.config.check_keys`); a selected method's stage, trainer nodes,
    model kind and benchmark format are then checked by :func:`common.config.validate`.

    Args:
        overrides: e.g. ``["experiment=maxrl_toy", "method.t1.steps=3"]``.
        run_dir: the output folder written into ``cfg.run_dir``.
        full: False stops after the key check (no :func:`~common.config.validate`, which imports
            the methods' TRL configs): what ``icml26 --cfg job`` needs before it prints.

    Raises:
        common.config.ConfigError: one line naming the key and what is wrong with it.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    register_schemas()
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        try:
            cfg = hydra_compose(config_name="config", overrides=list(overrides or []))
        except HydraException as err:
            raise ConfigError(hydra_error_message(err)) from err
    if run_dir is not None:
        with open_dict(cfg):
            cfg.run_dir = str(run_dir)
    check_keys(cfg)
    name = OmegaConf.select(cfg, "method.name")
    if full and name in method_schemas():
        try:
            validate(cfg)
        except OmegaConfBaseException as err:  # e.g. a missing value (???) or interpolation
            raise ConfigError(_one_line(str(err))) from err
    return cfg


def _one_line(text: str) -> str:
    """Hydra's and OmegaConf's multi-line messages on one line (a listed option block: a, b, c)."""
    out: list[str] = []
    listing = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        indented = raw[:1].isspace()
        out.append((", " if listing and indented else " ") + line if out else line)
        listing = indented
    return "".join(out)


def hydra_error_message(err: BaseException) -> str:
    """One line for a Hydra composition error; an unknown key reads as :func:`check_keys` says.

    A plain ``method.bogus=1`` makes Hydra suggest ``+method.bogus=1`` (which would only be
    rejected later); the key, its dataclass and the nearest field names are more useful.
    """
    cause = err.__cause__
    while cause is not None:
        typ, key = getattr(cause, "object_type", None), getattr(cause, "key", None)
        full_key = getattr(cause, "full_key", None)
        if (
            typ is not None
            and dataclasses.is_dataclass(typ)
            and full_key
            and key not in {f.name for f in dataclasses.fields(typ)}
        ):
            return unknown_key_message(str(full_key), typ)
        cause = cause.__cause__
    reason = f": {err.__cause__}" if err.__cause__ else ""  # OmegaConf's reason (key, type)
    return _one_line(f"{err}{reason}".split("\nConfig search path:")[0])


def default_output_root() -> Path:
    """Where a run without ``run_dir`` goes: ``$ICML26_OUTPUT_DIR``, else ``<tmp>/icml26/outputs``.

    Never the current folder, so a run started inside the checkout does not write into it.
    """
    import tempfile

    env = os.environ.get("ICML26_OUTPUT_DIR")
    return Path(env) if env else Path(tempfile.gettempdir()) / "icml26" / "outputs"


def _with_config_keys(err: FileNotFoundError, cfg: DictConfig) -> FileNotFoundError:
    """``err`` with the config keys whose value is the missing path (``benchmark.sets.x.path=...``).

    A benchmark's sets and a stage's data files are only read when the stage needs them (a method
    may read a subset of the sets), so a missing one surfaces here; the message then says which
    key to set. An error naming no configured path is returned unchanged.
    """
    text = f"{err.filename or ''} {err}"
    container = OmegaConf.to_container(cfg, resolve=False)
    keys: list[str] = []

    def walk(node, prefix: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{prefix}[{i}]")
        elif (
            isinstance(node, str)
            and len(node) > 2
            and ("/" in node or "." in node)
            and (node in text or str(Path(node).expanduser()) in text)
        ):
            keys.append(f"{prefix}={node}")

    walk(container, "")
    if not keys:
        return err
    return FileNotFoundError(f"{err} (set by {', '.join(keys)}: point it at the local file)")


def run_method(cfg: DictConfig) -> dict[str, float]:
    """Validates the config, seeds everything, runs the selected stage and returns its metrics.

    The stage is ``cfg.method.stage``, a key of the method's ``run.STAGES``; the stage function
    receives the typed :class:`common.config.Run`.

    Raises:
        ValueError: when no method is selected, or it is unknown, or ``run`` returns non-floats.
        common.config.ConfigError: when the config does not validate (before anything heavy runs).
    """
    from transformers import set_seed

    name = OmegaConf.select(cfg, "method.name")
    if not name:
        raise ValueError(
            "no method selected: pass experiment=<slug>_toy or method=<slug>; registered methods: "
            + ", ".join(discover_methods())
        )
    schemas = method_schemas()
    run = validate(cfg, schemas[name]) if name in schemas else None
    module = get_method(name)
    if cfg.get("run_dir") is None:
        with open_dict(cfg):
            cfg.run_dir = str(default_output_root() / name / time.strftime("%Y%m%d-%H%M%S"))
    Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)
    set_seed(int(cfg.seed))
    reset_models_loaded()
    logger.info("running %s into %s", name, cfg.run_dir)
    if run is None:  # a method not yet on the stage switch
        metrics = module.run(cfg)
    else:
        run.run_dir = Path(cfg.run_dir)
        stages = getattr(module, "STAGES", None)
        if not isinstance(stages, dict) or set(stages) != set(schemas[name].STAGES):
            raise TypeError(
                f"methods/{name}/run.py: STAGES must map exactly the stages of its config schema "
                f"({sorted(schemas[name].STAGES)}), got {sorted(stages or {})}"
            )
        try:
            metrics = stages[run.method.stage](run)
        except FileNotFoundError as err:
            raise _with_config_keys(err, cfg) from err
    bad = {k: type(v).__name__ for k, v in metrics.items() if not isinstance(v, float)}
    if bad:
        raise ValueError(f"{name}.run must return dict[str, float]; non-floats: {bad}")
    return metrics
