"""Config schemas shared by every method: the stage switch, the model and benchmark groups.

The CLI composes ``configs/config.yaml`` against these dataclasses (Hydra structured configs), so a
misspelt key or a wrong type fails at composition, before any model loads. :class:`RootConfig` types
the top level; :class:`MethodConfig` is the base of every ``methods/<slug>/config.py`` schema
(ConfigStore ``method/<slug>``; its ``stage`` is the one switch between toy and paper stages);
:class:`ModelConfig` and :class:`BenchmarkConfig` type ``configs/model/`` and ``configs/benchmark/``.
:func:`validate` checks what a schema cannot express (known stage, trainer-node keys of the TRL
config, supported model kind and benchmark format) and returns the typed :class:`Run` a stage
receives. Nothing heavy is imported here (no torch), so the CLI loads every schema fast.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from omegaconf import MISSING, DictConfig, OmegaConf

REPO_ROOT = Path(__file__).resolve().parents[1]
METHODS_DIR = REPO_ROOT / "methods"
MODEL_KINDS = ("causal_lm", "vision_language", "masked_diffusion", "encoder", "vision_encoder")


class ConfigError(ValueError):
    """A composed config that the method cannot run; the message names the key and the fix."""


class Logger(str, enum.Enum):
    """Where metrics go besides ``metrics.jsonl`` (``logger=none|wandb``)."""

    none = "none"
    wandb = "wandb"


@dataclass
class ModelConfig:
    """One checkpoint (``configs/model/<name>.yaml``).

    Attributes:
        name: hub id (``Qwen/Qwen3-4B-Base``) or ``tiny-<arch>`` (built in-process, tests and toys).
        path: a local folder to load instead of downloading ``name`` (same weights, or a tiny
            stand-in in tests). The run records which one it loaded.
        kind: what the checkpoint is, checked against the method's ``MODEL_KINDS``.
        dtype: ``auto`` (bf16 on capable GPUs, else fp32), ``float32``, ``bfloat16``, ``float16``.
        attn_implementation: passed to ``from_pretrained`` when set (``sdpa``, ``eager``,
            ``flex_attention``, ``flash_attention_2``).
        revision: hub revision (branch, tag or commit).
        chat_template: whether prompts are rendered through the tokenizer's chat template.
    """

    name: str = MISSING
    path: str | None = None
    kind: str = "causal_lm"
    dtype: str = "auto"
    attn_implementation: str | None = None
    revision: str | None = None
    chat_template: bool = True


@dataclass
class DatasetSpec:
    """One evaluation set of a benchmark: a hub id or a local file/folder (which wins)."""

    hub_id: str | None = None
    config: str | None = None
    split: str = "test"
    path: str | None = None
    limit: int | None = None
    columns: dict[str, str] = field(default_factory=dict)  # format field -> this set's column


@dataclass
class BenchmarkConfig:
    """An evaluation suite (``configs/benchmark/<name>.yaml``).

    Attributes:
        name: the suite's name (the file's stem).
        format: the record layout its loader reads (``math``, ``flashrag``, ...), checked against
            the method's ``BENCHMARK_FORMATS``.
        sets: the sets of the suite, by short name.
    """

    name: str = MISSING
    format: str = MISSING
    sets: dict[str, DatasetSpec] = field(default_factory=dict)


@dataclass
class MethodConfig:
    """Base of every method's run-config schema (``methods/<slug>/config.py``).

    Subclasses set ``name`` (the slug), the default ``stage`` and these class variables:

    * ``STAGES``: stage name -> one-line description (the toy stages and the paper's stages);
    * ``PAPER_STAGES``: what ``stage=paper`` stands for; when ``"paper"`` is not a stage itself,
      ``stage=paper`` stops with a message naming these;
    * ``TRAINERS``: name of a trainer-node field -> ``"module:Class"`` of its TRL/HF config;
    * ``MODEL_KINDS``: the ``model.kind`` values the paper stages accept (empty: no model group);
    * ``BENCHMARK_FORMATS``: the ``benchmark.format`` values the loaders read (empty: none).
    """

    STAGES: ClassVar[dict[str, str]] = {}
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ()
    TRAINERS: ClassVar[dict[str, str]] = {}
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ()
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ()

    name: str = MISSING
    stage: str = "toy"


@dataclass
class RootConfig:
    """The top level of every composed config (``configs/config.yaml``)."""

    method: Any = None
    model: ModelConfig | None = None
    benchmark: BenchmarkConfig | None = None
    seed: int = 0
    run_dir: str | None = None
    logger: Logger = Logger.none


@dataclass
class Run:
    """What a stage function receives: the typed configs of one run.

    Attributes:
        method: the method's run config (its ``methods/<slug>/config.py`` dataclass).
        model: the selected checkpoint, or None when the preset selects none.
        benchmark: the selected evaluation suite, or None.
        seed: the run's seed (already applied to python, numpy and torch by the registry).
        run_dir: the run folder (exists).
        cfg: the whole composed config, for :func:`common.tracking.write_results`.
    """

    method: Any
    model: ModelConfig | None
    benchmark: BenchmarkConfig | None
    seed: int
    run_dir: Path
    cfg: DictConfig


def model_id(model: ModelConfig) -> str:
    """The spec to load: the local ``path`` when set, else ``name``."""
    return model.path or model.name


def dataset_source(spec: DatasetSpec) -> str:
    """The local ``path`` when set, else the ``hub_id``.

    Raises:
        ConfigError: when neither is set.
    """
    source = spec.path or spec.hub_id
    if not source:
        raise ConfigError("a benchmark set needs `hub_id` or `path`")
    return source


# ----- schema discovery and registration -------------------------------------------------------
def method_schemas() -> dict[str, type[MethodConfig]]:
    """``slug -> run-config schema`` for every method folder with a ``config.py`` schema."""
    out = {}
    for folder in sorted(METHODS_DIR.iterdir()):
        if not (folder / "run.py").exists() or not (folder / "config.py").exists():
            continue
        module = importlib.import_module(f"methods.{folder.name}.config")  # packages load lazily
        schemas = [
            obj
            for obj in vars(module).values()
            if isinstance(obj, type)
            and issubclass(obj, MethodConfig)
            and obj is not MethodConfig
            and obj.__module__ == module.__name__
            and getattr(obj, "name", None) == folder.name
        ]
        if len(schemas) == 1:
            out[folder.name] = schemas[0]
        elif len(schemas) > 1:
            raise TypeError(
                f"methods/{folder.name}/config.py defines {len(schemas)} MethodConfig subclasses "
                f"with name={folder.name!r}; keep one"
            )
    return out


_STORED: dict[str, Any] = {}


def register_schemas() -> None:
    """Stores the root, model, benchmark and every method schema in Hydra's ConfigStore, once per
    store and set of schemas (converting the dataclasses costs ~1 s, most of a compose)."""
    from hydra.core.config_store import ConfigStore

    cs, schemas = ConfigStore.instance(), method_schemas()
    key = (id(cs), tuple((slug, id(schema)) for slug, schema in schemas.items()))
    if _STORED.get("key") == key:
        return
    cs.store(name="root_schema", node=RootConfig)
    cs.store(group="model", name="model_schema", node=ModelConfig)
    cs.store(group="benchmark", name="benchmark_schema", node=BenchmarkConfig)
    for slug, schema in schemas.items():
        cs.store(group="method", name=slug, node=schema)
    _STORED["key"] = key


# ----- validation ------------------------------------------------------------------------------
def _close(name: str, options) -> str:
    """`` (did you mean a, b?)`` for the nearest names (difflib); else every name, when few."""
    options = [str(o) for o in options]
    near = difflib.get_close_matches(name, options, n=3)
    if near:
        return f" (did you mean {', '.join(near)}?)"
    return f" (valid keys: {', '.join(options)})" if len(options) <= 40 else ""


def unknown_key_message(key: str, typ: type) -> str:
    """One line naming ``key`` (a dotted path), the dataclass that lacks it and its nearest fields."""
    names = [f.name for f in dataclasses.fields(typ)]
    return f"{key}: not a field of {typ.__name__}{_close(key.rsplit('.', 1)[-1], names)}"


def check_keys(node: DictConfig, prefix: str = "") -> None:
    """Rejects keys that no dataclass field declares, at any depth (``+method.bogus=1`` too).

    Hydra's ``+key=value`` and ``++key=value`` append with ``force_add``, which opens a
    struct-mode structured config for the new key by design, so Hydra composes them silently;
    this walks the composed node against the dataclass types OmegaConf recorded for it.
    ``check_keys(cfg)`` walks the whole config from the root (:class:`RootConfig`).

    Raises:
        ConfigError: naming the key, its dataclass and the closest field names.
    """
    typ = OmegaConf.get_type(node)
    names = {f.name for f in dataclasses.fields(typ)} if dataclasses.is_dataclass(typ) else None
    for key in node:
        path = f"{prefix}.{key}" if prefix else str(key)
        if names is not None and key not in names:
            raise ConfigError(unknown_key_message(path, typ))
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none() and not child._is_missing():
            check_keys(child, path)


def _import_attr(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


_SIMPLE = {"bool": (bool,), "int": (int,), "float": (int, float), "str": (str,)}


def _expected_types(f: dataclasses.Field) -> tuple[type, ...] | None:
    """The simple types a field accepts, from its annotation (else its default), or None."""
    ann = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", repr(f.type))
    ann = ann.replace("typing.", "").replace(" ", "")
    for wrap in ("Optional[", "Union["):
        if ann.startswith(wrap):
            ann = ann[len(wrap) : -1]
    parts = [p for p in ann.replace("|", ",").split(",") if p not in ("None", "NoneType")]
    if len(parts) == 1 and parts[0] in _SIMPLE:
        return _SIMPLE[parts[0]]
    default = f.default if f.default is not dataclasses.MISSING else None
    for typ, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str")):
        if isinstance(default, typ) and len(parts) <= 1:
            return _SIMPLE[name]
    return None


def check_trainer_node(config_cls: type, node: dict[str, Any], key: str) -> None:
    """Checks a trainer node's keys and value types against a TRL/HF config dataclass.

    Only names and simple types are checked (the dataclass itself runs its own ``__post_init__``
    when the stage builds it): an unknown key, or a value whose type differs from the field's
    annotation (or, for an annotation that is not a simple type, its default's type) raises.

    Raises:
        ConfigError: naming ``key.<field>``, the expected type and the value.
    """
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    for name, value in node.items():
        if name not in fields:
            raise ConfigError(
                f"{key}.{name}: not a field of {config_cls.__name__}{_close(name, fields)}"
            )
        expected = _expected_types(fields[name])
        if expected is None or value is None:
            continue
        if isinstance(value, bool) and bool not in expected or not isinstance(value, expected):
            raise ConfigError(
                f"{key}.{name}: expected {expected[-1].__name__} (as {config_cls.__name__}."
                f"{name}), got {value!r} of type {type(value).__name__}"
            )


def trainer_config(config_cls: type, node: dict[str, Any] | None = None, **defaults: Any):
    """Builds a TRL/HF config: ``defaults`` (the stage's choices) overridden by the YAML node.

    Raises:
        ConfigError: on a key or type the config class does not accept.
    """
    node = dict(node or {})
    check_trainer_node(config_cls, node, "trainer")
    return config_cls(**checkpointing_kwargs(config_cls, {**defaults, **node}))


class CheckpointingNames:
    """Mixin for this project's TRL / HF config subclasses (listed first among the bases).

    TRL's configs default ``gradient_checkpointing=True``, a name transformers 5 deprecates for
    ``activation_checkpointing``: an unset new name takes the old one's value before the base
    ``__post_init__`` runs (no deprecation warning, same meaning); a set new name wins, as upstream.
    """

    def __post_init__(self):
        for old, new in _RENAMED:
            if getattr(self, new, False) is None and getattr(self, old, None) is not None:
                setattr(self, new, getattr(self, old))
        super().__post_init__()


_RENAMED = (
    ("gradient_checkpointing", "activation_checkpointing"),
    ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"),
)


def checkpointing_kwargs(config_cls: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with transformers 5's names for activation checkpointing, the value kept.

    The kwargs-side twin of :class:`CheckpointingNames`: the old names (still accepted in presets)
    move to the new ones, and an unset new name takes the class's old-name default.

    Raises:
        ConfigError: when both the old and the new name of one setting are given.
    """
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    out = dict(kwargs)
    for old, new in _RENAMED:
        if new not in fields:
            continue  # an older transformers: nothing to rename
        if old in out and new in out:
            raise ConfigError(f"give {new!r} or its deprecated alias {old!r}, not both")
        if old in out:
            out[new] = out.pop(old)
        elif new not in out and old in fields and fields[old].default is not None:
            out[new] = fields[old].default
    return out


def validate(cfg: DictConfig, schema: type[MethodConfig] | None = None) -> Run:
    """Converts a composed config into a typed :class:`Run`, before anything heavy runs.

    Checks, beyond the structured-config types: every key is a field of its dataclass
    (:func:`check_keys`, which catches keys appended with ``+``), the stage is one of the method's ``STAGES``
    (``stage=paper`` maps to its single paper stage or stops naming the sub-stages), every trainer
    node only sets fields of its TRL config, the model's kind and the benchmark's format are ones
    the method supports. ``__post_init__`` checks of the dataclasses run here too.

    Raises:
        ConfigError: with the key, what was expected and what was received.
    """
    name = OmegaConf.select(cfg, "method.name")
    if schema is None:
        schemas = method_schemas()
        if name not in schemas:
            raise ConfigError(f"method {name!r} has no config schema; known: {sorted(schemas)}")
        schema = schemas[name]
    check_keys(cfg)
    stage = OmegaConf.select(cfg, "method.stage")
    stages = schema.STAGES
    if stage == "paper" and "paper" not in stages:
        subs = ", ".join(f"{s} ({stages.get(s, '')})" for s in schema.PAPER_STAGES)
        raise ConfigError(
            f"method.stage=paper: {name}'s paper path has several stages; choose one with "
            f"method.stage=<stage>: {subs or '(none: this method has no paper stage)'}"
        )
    if stage not in stages:
        raise ConfigError(
            f"method.stage={stage!r} is not a stage of {name}; valid: {', '.join(stages)}"
        )
    try:
        method = OmegaConf.to_object(cfg.method)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"method: {err}") from err
    for key, target in schema.TRAINERS.items():
        check_trainer_node(_import_attr(target), dict(getattr(method, key) or {}), f"method.{key}")
    model = OmegaConf.to_object(cfg.model) if cfg.get("model") is not None else None
    is_paper = stage in schema.PAPER_STAGES or stage == "paper"
    if (
        model is not None
        and is_paper
        and schema.MODEL_KINDS
        and model.kind not in schema.MODEL_KINDS
    ):
        raise ConfigError(
            f"model={model.name}: kind {model.kind!r} is not supported by {name} "
            f"(supported kinds: {', '.join(schema.MODEL_KINDS)})"
        )
    check_model = getattr(method, "check_model", None)  # a method's own model/config checks
    if model is not None and is_paper and callable(check_model):
        try:
            check_model(model)
        except ValueError as err:
            raise ConfigError(f"model={model.name}: {err}") from err
    bench = OmegaConf.to_object(cfg.benchmark) if cfg.get("benchmark") is not None else None
    if bench is not None and is_paper:
        if not schema.BENCHMARK_FORMATS:
            raise ConfigError(f"benchmark={bench.name}: {name} takes no benchmark group")
        if bench.format not in schema.BENCHMARK_FORMATS:
            raise ConfigError(
                f"benchmark={bench.name} (format {bench.format!r}) is not supported by {name}; "
                f"supported formats: {', '.join(schema.BENCHMARK_FORMATS)}"
            )
    if model is not None and is_paper and model.path and not Path(model.path).expanduser().exists():
        raise ConfigError(
            f"model.path={model.path!r}: no such folder (a local checkpoint; set it to null to "
            f"load model.name={model.name!r} from the hub or its cache)"
        )
    run_dir = cfg.get("run_dir")
    return Run(
        method=method,
        model=model,
        benchmark=bench,
        seed=int(cfg.seed),
        run_dir=Path(run_dir) if run_dir else Path("."),
        cfg=cfg,
    )
