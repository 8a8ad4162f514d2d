"""The ``icml26`` command: Hydra entry point over the method registry.

    icml26 experiment=maxrl_toy                         # a method's CPU toy reproduction
    icml26 experiment=maxrl_toy seed=1 method.t1.steps=400
    icml26 experiment=maxrl_paper method.stage=train    # a stage of the paper's setting (GPU)
    accelerate launch --config_file configs/accelerate/single_gpu.yaml -m common.cli \\
        experiment=maxrl_paper method.stage=train       # the same under accelerate
    icml26 --help                                       # methods, stages and presets
    icml26 check experiment=maxrl_paper                 # what the run will touch, and is it here
    icml26 fetch experiment=maxrl_paper                 # download what is missing (network)

The composed config is checked against the schemas of :mod:`common.config` before Hydra prints it
(``--cfg job``) or creates the run folder; a config error prints one ``icml26: config error: ...``
line and exits with status 2.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

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
    ("icml26 check experiment=maxrl_paper", "list its models, data, files; exit 1 if missing"),
    ("icml26 fetch experiment=maxrl_paper", "download the missing ones (network, HF_TOKEN)"),
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


def _compose_check(argv: list[str]) -> None:
    """Composes and checks the command line's config before Hydra prints it or makes a run folder.

    Hydra creates the run folder (with ``cli.log``) before the task function runs, and prints
    ``--cfg job`` without running it at all; and its ``+``/``++`` overrides append a key even to a
    struct-mode schema node (by design: ``force_add``). So the same overrides go through
    :func:`common.registry.compose` first: every key against its dataclass (``+method.bogus=1``
    too) and, for a run, the whole :func:`common.config.validate`; ``--cfg``/``--info`` get the
    key check only (nothing heavy imported). Under ``--multirun`` each swept key is checked with
    its first value (each job validates its own). Options that change the config source
    (``--config-name`` ...) skip the check; Hydra then has its say.

    Raises:
        ConfigError: one line naming the key and what is wrong.
    """
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from common.registry import compose

    args = get_args_parser().parse_args(argv)
    if (
        args.hydra_help
        or args.shell_completion
        or args.config_path
        or args.config_name
        or args.config_dir
        or args.experimental_rerun
    ):
        return
    overrides = args.overrides
    if args.multirun:
        parsed = OverridesParser.create().parse_overrides(overrides)
        overrides = [
            f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}"
            if o.is_sweep_override()
            else o.input_line
            for o in parsed
        ]
    compose(overrides, full=not (args.cfg or args.info))


@hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    if cfg.get("run_dir") is None:
        with open_dict(cfg):
            cfg.run_dir = HydraConfig.get().runtime.output_dir
    error_file = Path(cfg.run_dir) / "error.txt"
    error_file.unlink(missing_ok=True)  # a reused run_dir= keeps no earlier run's error
    try:
        metrics = run_method(cfg)
    except ConfigError as err:  # raised by a stage (data it needs): the run folder says why
        if error_file.parent.is_dir():
            error_file.write_text(f"icml26: config error: {err}\n")
        _config_error(err)
    width = max((len(k) for k in metrics), default=10)
    print(f"\n{OmegaConf.select(cfg, 'method.name')} -> {cfg.run_dir}")
    for k, v in metrics.items():
        print(f"  {k:<{width}}  {v:.4g}")


def _config_error(err: Exception) -> None:
    print(f"icml26: config error: {err}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    """Console-script entry point (``icml26``); ``icml26 check|fetch ...`` go to
    :mod:`common.artifacts_cli`."""
    if sys.argv[1:2] in (["check"], ["fetch"]):
        from common.artifacts_cli import main as artifacts_main

        sys.exit(artifacts_main(sys.argv[1], sys.argv[2:]))
    if any(a in ("--help", "-h") for a in sys.argv[1:]):
        print(usage())
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    register_schemas()
    run_dir = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("run_dir=")), None)
    if run_dir and not any(a.startswith("hydra.run.dir=") for a in sys.argv[1:]):
        sys.argv.append(f"hydra.run.dir={run_dir}")  # Hydra's own files go there too, not ./outputs
    try:
        _compose_check(sys.argv[1:])  # before Hydra prints the config or creates the run folder
    except ConfigError as err:
        _config_error(err)
    _hydra_main()


if __name__ == "__main__":
    main()
