"""The ``icml26`` command: Hydra entry point over the method registry.

    icml26 experiment=maxrl_toy                         # a method's CPU toy reproduction
    icml26 experiment=maxrl_toy seed=1 method.t1.steps=400
    icml26 experiment=maxrl_paper method.stage=train    # a stage of the paper's setting (GPU)
    accelerate launch --config_file configs/accelerate/single_gpu.yaml -m common.cli \\
        experiment=maxrl_paper method.stage=train       # the same under accelerate
    icml26 --help                                       # methods, stages and presets

The composed config is checked against the schemas of :mod:`common.config` before any model
loads; ``--cfg job`` prints it.
"""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict

from common.config import ConfigError, method_schemas, register_schemas
from common.registry import CONFIG_DIR, run_method

logger = logging.getLogger(__name__)

EXAMPLES = [
    ("icml26 experiment=maxrl_toy", "a CPU toy reproduction, offline"),
    ("icml26 experiment=maxrl_toy seed=1 method.t1.steps=400", "with overrides"),
    ("icml26 experiment=maxrl_paper method.stage=train", "a stage of the paper's setting"),
    ("icml26 experiment=maxrl_paper model=qwen3_1p7b_base", "another checkpoint"),
    ("icml26 --cfg job experiment=maxrl_toy", "print the composed config"),
    ("icml26 --hydra-help", "Hydra's own options"),
]


def usage() -> str:
    """The ``--help`` text: methods with their stages, presets, model and benchmark groups."""
    schemas = method_schemas()
    groups = {
        g: sorted(p.stem for p in (CONFIG_DIR / g).glob("*.yaml"))
        for g in ("experiment", "model", "benchmark")
    }
    from common.registry import discover_methods

    lines = [
        "usage: icml26 [experiment=<preset>] [method=<slug>] [model=<ckpt>] [benchmark=<suite>]"
        " [key=value ...]",
        "",
        "Runs one stage of one method of the icml26 collection (Hydra config in configs/).",
        "",
        f"registered methods ({len(discover_methods())}), with their stages (method.stage=...):",
    ]
    for slug in discover_methods():
        schema = schemas.get(slug)
        stages = ", ".join(schema.STAGES) if schema else "toy"
        lines.append(f"  {slug:<22} {stages}")
    lines += [
        "",
        "experiments: " + ", ".join(groups["experiment"]),
        "models: " + ", ".join(groups["model"]),
        "benchmarks: " + ", ".join(groups["benchmark"]),
        "",
        "examples:",
        *(f"  {cmd:<58} {what}" for cmd, what in EXAMPLES),
    ]
    return "\n".join(lines)


@hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    if cfg.get("run_dir") is None:
        with open_dict(cfg):
            cfg.run_dir = HydraConfig.get().runtime.output_dir
    try:
        metrics = run_method(cfg)
    except ConfigError as err:
        print(f"icml26: config error: {err}", file=sys.stderr)
        sys.exit(2)
    width = max((len(k) for k in metrics), default=10)
    print(f"\n{OmegaConf.select(cfg, 'method.name')} -> {cfg.run_dir}")
    for k, v in metrics.items():
        print(f"  {k:<{width}}  {v:.4g}")


def main() -> None:
    """Console-script entry point (``icml26``)."""
    if any(a in ("--help", "-h") for a in sys.argv[1:]):
        print(usage())
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    register_schemas()
    run_dir = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("run_dir=")), None)
    if run_dir and not any(a.startswith("hydra.run.dir=") for a in sys.argv[1:]):
        sys.argv.append(f"hydra.run.dir={run_dir}")  # Hydra's own files go there too, not ./outputs
    _hydra_main()


if __name__ == "__main__":
    main()
