"""The ``icml26`` command: Hydra entry point over the method registry.

icml26 experiment=maxrl_toy                 # a method's CPU toy reproduction
icml26 experiment=maxrl_paper               # the paper's setting (GPU; see scripts/reproduce/)
icml26 experiment=maxrl_toy seed=1 method.num_steps=50
icml26 --help                               # registered methods and experiments
"""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict

from common.registry import CONFIG_DIR, discover_methods, run_method

logger = logging.getLogger(__name__)


def usage() -> str:
    experiments = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml"))
    methods = discover_methods()
    return "\n".join(
        [
            "usage: icml26 [experiment=<name>] [method=<slug>] [key=value ...]",
            "",
            "Runs one method of the icml26 collection (Hydra config in configs/).",
            "",
            f"registered methods ({len(methods)}): " + (", ".join(methods) or "(none yet)"),
            "experiments: " + (", ".join(experiments) or "(none yet)"),
            "",
            "examples:",
            "  icml26 experiment=<slug>_toy           CPU toy reproduction, offline",
            "  icml26 experiment=<slug>_paper         the paper's setting (GPU)",
            "  icml26 --cfg job experiment=<slug>_toy print the composed config",
            "  icml26 --hydra-help                    Hydra's own options",
        ]
    )


@hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    if cfg.get("run_dir") is None:
        with open_dict(cfg):
            cfg.run_dir = HydraConfig.get().runtime.output_dir
    metrics = run_method(cfg)
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
    _hydra_main()


if __name__ == "__main__":
    main()
