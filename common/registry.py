"""The method registry and config composition behind the ``icml26`` CLI.

A method is registered by convention, not by import-time side effects: every folder
``methods/<slug>/`` that holds a ``run.py`` is a method, and ``run.py`` defines

- ``run(cfg: DictConfig) -> dict[str, float]``: the method's experiment (toy or paper scale);
- ``DEMO_OVERRIDES: list[str]``: Hydra overrides on top of ``experiment=<slug>_toy`` for the tour;
- ``HEADLINE: tuple[str, str]``: the result keys of the headline metric and of its baseline.

``common`` never imports a method module at import time; ``get_method`` imports one on demand.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import time
from pathlib import Path
from types import ModuleType

from omegaconf import DictConfig, OmegaConf, open_dict

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO_ROOT / "configs"


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
    if not callable(getattr(module, "run", None)):
        raise TypeError(f"methods/{slug}/run.py must define run(cfg) -> dict[str, float]")
    return module


def compose(overrides: list[str] | None = None, run_dir: str | Path | None = None) -> DictConfig:
    """Composes ``configs/config.yaml`` with Hydra overrides, outside ``@hydra.main`` (tests, tour).

    Args:
        overrides: e.g. ``["experiment=maxrl_toy", "method.num_steps=3"]``.
        run_dir: the output folder written into ``cfg.run_dir``.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=list(overrides or []))
    if run_dir is not None:
        with open_dict(cfg):
            cfg.run_dir = str(run_dir)
    return cfg


def run_method(cfg: DictConfig) -> dict[str, float]:
    """Seeds everything, runs the method named by ``cfg.method.name`` and returns its metrics.

    Raises:
        ValueError: when no method is selected, or it is unknown, or ``run`` returns non-floats.
    """
    from transformers import set_seed

    name = OmegaConf.select(cfg, "method.name")
    if not name:
        raise ValueError(
            "no method selected: pass experiment=<slug>_toy or method=<slug>; registered methods: "
            + ", ".join(discover_methods())
        )
    module = get_method(name)
    if cfg.get("run_dir") is None:
        with open_dict(cfg):
            cfg.run_dir = str(REPO_ROOT / "outputs" / name / time.strftime("%Y%m%d-%H%M%S"))
    Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)
    set_seed(int(cfg.seed))
    logger.info("running %s into %s", name, cfg.run_dir)
    metrics = module.run(cfg)
    bad = {k: type(v).__name__ for k, v in metrics.items() if not isinstance(v, float)}
    if bad:
        raise ValueError(f"{name}.run must return dict[str, float]; non-floats: {bad}")
    return metrics
