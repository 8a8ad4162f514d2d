"""Experiment tracking: progress bars, metrics.jsonl (+ optional wandb), results.json/results.md.

wandb is off unless asked for (``MetricsLogger(use_wandb=True)`` or ``logger=wandb`` in the config); it
then runs offline when no ``WANDB_API_KEY`` is set. Metrics always go to ``metrics.jsonl`` as well, so
offline runs lose nothing. ``write_results`` writes the run's summary in the house format: one row per
arm (method and baselines on the same inputs), one column per metric.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_VERSIONED = ("torch", "transformers", "trl", "peft", "datasets", "accelerate", "numpy")

_MODELS_LOADED: list[dict[str, Any]] = []


def record_model_load(spec: str, **info: Any) -> None:
    """Notes a model this process loaded (hub id, local path or in-process tiny build).

    :func:`common.models.load_model` and the builders of :mod:`common.tiny` call it, and
    :func:`write_results` writes the list into ``results.json`` (``models_loaded``), so every run
    records the checkpoint it actually used, not only the one its config named.
    """
    entry = {"spec": str(spec), **{k: str(v) for k, v in info.items()}}
    if entry not in _MODELS_LOADED:
        _MODELS_LOADED.append(entry)


def models_loaded() -> list[dict[str, Any]]:
    """The models recorded since the last :func:`reset_models_loaded` (a copy)."""
    return [dict(e) for e in _MODELS_LOADED]


def reset_models_loaded() -> None:
    """Forgets the recorded models (the registry calls it at the start of every run)."""
    _MODELS_LOADED.clear()


def progress(
    iterable: Iterable | None = None,
    desc: str = "",
    unit: str = "it",
    total: int | None = None,
    disable: bool | None = None,
):
    """A tqdm progress bar, shown only on the main process and when not disabled.

    ``ICML26_PROGRESS=0`` in the environment silences every bar (CI logs stay short).
    """
    from tqdm.auto import tqdm

    if disable is None:
        rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")))
        disable = rank != 0 or os.environ.get("ICML26_PROGRESS", "1") == "0"
    return tqdm(iterable, desc=desc, unit=unit, total=total, disable=disable, leave=False)


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment_info() -> dict[str, Any]:
    """Package versions, git commit, device and python, for results.json."""
    versions = {}
    for pkg in _VERSIONED:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    try:
        import torch

        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except Exception:  # noqa: BLE001 - best effort description only
        device = "unknown"
    return {
        "versions": versions,
        "git_commit": _git_commit(),
        "device": device,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }


def flatten_metrics(metrics: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """``{arm: {name: v}}`` -> ``{"arm/name": float(v)}``."""
    return {f"{arm}/{name}": float(v) for arm, row in metrics.items() for name, v in row.items()}


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def markdown_table(metrics: Mapping[str, Mapping[str, float]], arm_header: str = "arm") -> str:
    """One row per arm, one column per metric (union over arms, first-seen order)."""
    cols: list[str] = []
    for row in metrics.values():
        cols += [c for c in row if c not in cols]
    lines = [
        "| " + " | ".join([arm_header, *cols]) + " |",
        "|" + "---|" * (len(cols) + 1),
    ]
    for arm, row in metrics.items():
        lines.append("| " + " | ".join([arm, *(_fmt(row.get(c, "")) for c in cols)]) + " |")
    return "\n".join(lines)


def write_results(
    run_dir: str | Path,
    method: str,
    metrics: Mapping[str, Mapping[str, float]],
    cfg: Any = None,
    extra: Mapping[str, Any] | None = None,
    wall_time_s: float | None = None,
    notes: str = "",
) -> dict[str, float]:
    """Writes ``results.json`` and ``results.md`` into ``run_dir`` and returns the flat metrics.

    Args:
        run_dir: the run folder (created if missing).
        method: the method's slug.
        metrics: ``{arm: {metric: value}}``; every value must be a finite-or-nan real number.
        cfg: the resolved config (DictConfig or dict), saved as ``config.yaml`` and in the JSON.
        extra: more JSON-serialisable fields (e.g. parse failures, timings).
        wall_time_s: the run's wall time.
        notes: free text appended to results.md under the table.

    Returns:
        ``{"arm/metric": float}``, what a method's ``run`` returns.

    Raises:
        TypeError: if a metric value is not a real number.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for arm, row in metrics.items():
        for name, v in row.items():
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                and not hasattr(v, "__float__")
            ):
                raise TypeError(f"metrics[{arm!r}][{name!r}] must be a number, got {type(v)}")
    clean = {arm: {k: float(v) for k, v in row.items()} for arm, row in metrics.items()}
    cfg_dict = None
    seed = None
    if cfg is not None:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            cfg_dict = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
            (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        else:
            cfg_dict = dict(cfg)
        seed = cfg_dict.get("seed") if isinstance(cfg_dict, dict) else None
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    payload = {
        "method": method,
        "seed": seed,
        "command": command,
        "wall_time_s": wall_time_s,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **environment_info(),
        "metrics": clean,
        "models_loaded": models_loaded(),
        "config": cfg_dict,
        **(dict(extra) if extra else {}),
    }
    (run_dir / "results.json").write_text(json.dumps(payload, indent=2, default=str))
    md = [f"# {method}: results", "", f"Command: `{command}`", ""]
    if wall_time_s is not None:
        md += [f"Wall time: {wall_time_s:.1f} s on {payload['device']}; seed {seed}.", ""]
    if payload["models_loaded"]:
        md += ["Models loaded: " + "; ".join(e["spec"] for e in payload["models_loaded"]), ""]
    md.append(markdown_table(clean))
    if notes:
        md += ["", notes]
    (run_dir / "results.md").write_text("\n".join(md) + "\n")
    logger.info("results written to %s", run_dir)
    return flatten_metrics(clean)


class MetricsLogger:
    """Appends metrics to ``run_dir/metrics.jsonl`` and, when enabled, to wandb.

    Args:
        run_dir: the run folder.
        use_wandb: log to wandb too (offline mode when ``WANDB_API_KEY`` is unset).
        project: the wandb project.
        config: the run's config for wandb.
    """

    def __init__(
        self,
        run_dir: str | Path,
        use_wandb: bool = False,
        project: str = "icml26",
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._wandb = None
        if use_wandb:
            import wandb

            # Offline unless a key is configured; the key itself is read by wandb, never logged here.
            mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
            self._wandb = wandb.init(
                project=project, dir=str(self.path.parent), mode=mode, config=dict(config or {})
            )

    def log(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        row = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self._wandb is not None:
            self._wandb.log(dict(metrics), step=step)

    def close(self) -> None:
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def pyplot():
    """``matplotlib.pyplot`` with the non-interactive Agg backend selected (toys write PNGs with
    :func:`save_plot`; nothing is shown, and no display is needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_plot(fig, path: str | Path, dpi: int = 120) -> Path:
    """Saves a matplotlib figure (Agg backend) and closes it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return path


def metrics_logger(cfg: Any) -> MetricsLogger:
    """The run's :class:`MetricsLogger` from a composed config: wandb only when ``logger=wandb``.

    Raises:
        ValueError: on a ``logger`` value other than ``none`` or ``wandb``.
    """
    from omegaconf import DictConfig, OmegaConf

    kind = cfg.get("logger", "none")
    kind = str(getattr(kind, "value", kind))  # the typed root config holds an Enum
    if kind not in ("none", "wandb"):
        raise ValueError(f"logger must be 'none' or 'wandb', got {kind!r}")
    config = (
        OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
        if isinstance(cfg, DictConfig)
        else dict(cfg)
    )
    method = OmegaConf.select(cfg, "method.name") if isinstance(cfg, DictConfig) else None
    return MetricsLogger(
        cfg["run_dir"],
        use_wandb=kind == "wandb",
        project=f"icml26-{method or 'run'}",
        config=config,
    )
