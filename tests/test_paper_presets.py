"""Every paper preset, as shipped, runs end to end on the CPU (one or two steps of each stage).

Each method's test module (``tests/methods/test_<slug>.py``) declares ``PAPER_SMOKE``: a paper stage
(or ``"<preset>/<stage>"`` for a variant preset) -> the Hydra overrides that shrink the run; the
cases, placeholders and tiny models come from ``scripts/paper_smoke.py``, which runs the same cases
for a reader (``python -m scripts.paper_smoke <slug> <stage>``) and writes them into each method
doc's "Run a paper stage on a tiny local model" block. Those
overrides may only point the model and the data at local files (tiny models, fixtures in the
benchmarks' real formats), shrink sizes (steps, lengths, batch, sample counts) or switch engines and
precision off (bf16, vLLM): never an algorithm key; :func:`_check_override` enforces it. An optional
``paper_smoke_setup(tmp_path) -> dict[str, str]`` in the module builds more placeholders.

Placeholders in overrides: ``{tmp}``, ``{repo}``, ``{tiny_qwen2}``, ``{tiny_llama}``, ``{tiny_qwen3}``,
``{tiny_llava}`` and whatever ``paper_smoke_setup`` returns.
"""

from __future__ import annotations

import copy
import functools
import json
import re

import pytest
from omegaconf import open_dict

from common.config import ConfigError, method_schemas, validate
from common.registry import CONFIG_DIR, REPO_ROOT, compose, discover_methods, run_method
from scripts.paper_smoke import cases, format_override, smoke_module

# Leaf names an override may set: paths, sizes and device/engine switches (see the module doc).
_ALLOWED_LEAF = re.compile(
    r"(^|_)(path|paths|dir|root|file|files|url|data|steps|step|length|len|batch|size|sizes|"
    r"limit|samples|count|epochs|tokens|n|num|max|workers|generations|accumulation|"
    r"bf16|fp16|tf32|use_vllm|vllm|engine|impl|device|dtype|report|seeds|problems|examples|"
    r"conversations|queries|questions|items|rounds|iterations|pop|gens|evals|budget)($|_)"
)
_ALGORITHM_KEYS = {"loss_type", "beta", "epsilon", "learning_rate", "lr", "temperature", "top_p"}


def _check_override(override: str) -> None:
    key = override.split("=", 1)[0].lstrip("+~")
    if key.startswith("model."):
        assert key in ("model.path", "model.dtype"), f"{override}: only model.path/dtype may change"
        return
    if key.startswith("benchmark."):
        assert key.rsplit(".", 1)[-1] in ("path", "limit"), f"{override}: only set paths/limits"
        return
    leaf = key.rsplit(".", 1)[-1]
    assert leaf not in _ALGORITHM_KEYS, f"{override}: {leaf} is an algorithm key"
    assert _ALLOWED_LEAF.search(leaf), (
        f"{override}: a paper smoke may only override paths, sizes and engine switches"
    )


@pytest.mark.slow  # paper-preset contract runs: make test-all
@pytest.mark.parametrize(("slug", "preset", "stage"), cases())
def test_paper_preset_runs_end_to_end(slug, preset, stage, tmp_path, tiny_model_dirs):
    module = smoke_module(slug)
    key = stage if preset == f"{slug}_paper" else f"{preset}/{stage}"
    values = {"tmp": str(tmp_path), "repo": str(REPO_ROOT), **tiny_model_dirs}
    setup = getattr(module, "paper_smoke_setup", None)
    if setup is not None:
        values.update(setup(tmp_path))
    overrides = [format_override(o, values) for o in module.PAPER_SMOKE[key]]
    for o in overrides:
        _check_override(o)
    assert (CONFIG_DIR / "experiment" / f"{preset}.yaml").exists()
    run_dir = tmp_path / "run"
    cfg = compose([f"experiment={preset}", f"method.stage={stage}", *overrides], run_dir=run_dir)
    metrics = run_method(cfg)
    assert all(isinstance(v, float) for v in metrics.values())
    payload = json.loads((run_dir / "results.json").read_text())
    assert payload["method"] == slug
    model_path = cfg.model.path if cfg.get("model") is not None else None
    if model_path and payload["models_loaded"]:
        # the run records the checkpoint it actually loaded: the local override, not the hub id
        assert any(model_path in e["spec"] for e in payload["models_loaded"]), payload[
            "models_loaded"
        ]


@pytest.mark.parametrize("slug", discover_methods())
def test_paper_preset_composes_and_selects_a_paper_stage(slug):
    path = CONFIG_DIR / "experiment" / f"{slug}_paper.yaml"
    assert path.exists(), f"configs/experiment/{slug}_paper.yaml is missing"
    schemas = method_schemas()
    if slug not in schemas:
        pytest.xfail(f"{slug} is not on the stage switch yet")
    schema = schemas[slug]
    try:
        cfg = compose([f"experiment={slug}_paper"])
    except ConfigError as err:  # stage=paper with several sub-stages: the message names them
        assert schema.PAPER_STAGES and all(s in str(err) for s in schema.PAPER_STAGES)
        return
    assert cfg.method.stage in (*schema.PAPER_STAGES, "paper")
    assert cfg.method.stage != "toy"


def test_stage_paper_never_falls_back_to_the_toy():
    with pytest.raises(ConfigError, match=r"method.stage=paper: maxrl's paper path .*train.*eval"):
        compose(["experiment=maxrl_paper"])
    with pytest.raises(ConfigError, match="not a stage of maxrl; valid: toy, maze, train"):
        compose(["experiment=maxrl_paper", "method.stage=trian"])


def _composable_stage(slug: str, schema) -> str:
    """The first paper stage whose preset composes on this machine (flex attention needs CUDA)."""
    stages = schema.PAPER_STAGES or ("paper",)
    for stage in stages:
        try:
            compose([f"experiment={slug}_paper", f"method.stage={stage}"])
            return stage
        except ConfigError:
            continue
    return stages[0]


@pytest.mark.parametrize("slug", sorted(method_schemas()))
def test_model_swap_and_unsupported_kinds(slug):
    """``model=<another>`` swaps the checkpoint; a kind the method cannot load is rejected."""
    schema = method_schemas()[slug]
    if not schema.MODEL_KINDS:
        pytest.skip(f"{slug} loads no model")
    stage = _composable_stage(slug, schema)
    kinds = {"causal_lm": "tiny-llama", "vision_language": "tiny-llava"}
    for kind, model in kinds.items():
        overrides = [f"experiment={slug}_paper", f"method.stage={stage}", f"model={model}"]
        if kind in schema.MODEL_KINDS:
            assert compose(overrides).model.name == model
        else:
            with pytest.raises(ConfigError, match="supported kinds"):
                compose(overrides)


@functools.cache
def _benchmark_group(stem: str):
    """A benchmark group's node, composed once per session (shared by the swap tests)."""
    return compose(["benchmark=" + stem]).benchmark


def _benchmark_stems() -> list[str]:
    return sorted(path.stem for path in (CONFIG_DIR / "benchmark").glob("*.yaml"))


@pytest.mark.parametrize("slug", sorted(method_schemas()))
def test_benchmark_swap_is_accepted_or_rejected_by_validation(slug):
    """Every benchmark group, put in place of the paper preset's, passes :func:`validate` when its
    format is one the method supports and is rejected by name otherwise (the preset is composed once;
    the full Hydra composition of every pair is the slow test below)."""
    schema = method_schemas()[slug]
    stage = _composable_stage(slug, schema)
    base = compose([f"experiment={slug}_paper", f"method.stage={stage}"])
    for stem in _benchmark_stems():
        cfg = copy.deepcopy(base)
        with open_dict(cfg):
            cfg.benchmark = copy.deepcopy(_benchmark_group(stem))
        if _benchmark_group(stem).format in schema.BENCHMARK_FORMATS:
            assert validate(cfg).benchmark.name == stem
        else:
            with pytest.raises(ConfigError, match=f"benchmark={stem}"):
                validate(cfg)


@pytest.mark.slow  # 22 Hydra compositions per method (about 3.5 s each method): make test-all
@pytest.mark.parametrize("slug", sorted(method_schemas()))
def test_benchmark_swap_or_rejection(slug):
    """Every benchmark either composes with the method (same format) or is rejected by name."""
    schema = method_schemas()[slug]
    stage = _composable_stage(slug, schema)
    for stem in _benchmark_stems():
        overrides = [f"experiment={slug}_paper", f"method.stage={stage}", f"benchmark={stem}"]
        if _benchmark_group(stem).format in schema.BENCHMARK_FORMATS:
            assert compose(overrides).benchmark.name == stem
        else:
            with pytest.raises(ConfigError, match=f"benchmark={stem}"):
                compose(overrides)
