"""Know before you run: every artifact a composed run will touch, and whether it is here (issue 42).

:func:`list_artifacts` reads a composed config (:func:`common.registry.compose`, key check only, so
nothing heavy is imported) and returns what the chosen stage reads (every paper stage when
``method.stage=paper`` stands for several), from the table of :mod:`common.artifact_needs`:
checkpoints, hub data sets, local files and folders, OpenAI-compatible endpoints. :func:`status`
says, for one of them:

* ``present``: in the local Hugging Face cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``; a data set
  that ``datasets`` prepared in ``HF_DATASETS_CACHE`` also loads offline), on disk, served, or keyed;
* ``gated``: missing, and the hub asks for an accepted licence and a token (``HF_TOKEN``);
* ``script``: a loading-script data set that ``datasets`` >= 4 refuses (a local conversion is needed);
* ``later``: written by an earlier stage of the same listing;
* ``missing`` / ``unset``: anything else, with the one step that makes it present.

The CLI (``icml26 check`` / ``icml26 fetch``) lives in :mod:`common.artifacts_cli`.
"""

from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlparse

from omegaconf import DictConfig, OmegaConf

from common import artifact_needs as an
from common.artifact_needs import GATED, SCRIPT_BASED, SIZE_GB
from common.config import ConfigError, method_schemas

DATA_SUFFIXES = {".parquet", ".json", ".jsonl", ".jsonlines", ".csv", ".tsv", ".arrow", ".txt"}
DATA_SUFFIXES |= {".gz", ".zip", ".tar", ".zst", ".xz", ".bz2", ".tgz"}
WEIGHT_SUFFIXES = {".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack"}
OK_STATES = ("present", "later")


@dataclass(frozen=True)
class Artifact:
    """One thing a stage reads.

    Attributes:
        kind: ``model``, ``dataset``, ``file`` or ``endpoint``.
        name: hub id, local path, or the served model's name (endpoint); "" when the key is unset.
        key: the config key that names it (override it on the command line).
        local: True for a path on disk (a ``model.path``, a set's ``path``, a file).
        revision, config, split: hub revision, data set config and split.
        url: the endpoint's base URL (None: api.openai.com or ``OPENAI_BASE_URL``).
        env: environment variables: the endpoint's API key, or those that override a path.
        made_by: the stage that writes it; hub_alt: the hub id a local set also names.
        stages: the stages of the listing that read it.
    """

    kind: str
    name: str
    key: str
    local: bool = False
    revision: str | None = None
    config: str | None = None
    split: str | None = None
    url: str | None = None
    env: tuple[str, ...] = ()
    made_by: str | None = None
    hub_alt: str | None = None
    stages: tuple[str, ...] = ()

    @property
    def ident(self) -> tuple:
        return (self.kind, self.name, self.local, self.revision, self.config, self.split, self.url)

    @property
    def label(self) -> str:
        """The name (with a hub set's config/split and a revision), as printed."""
        pairs = (("config", self.config), ("split", self.split), ("revision", self.revision))
        extra = [f"{k}={v}" for k, v in pairs if v and not self.local]
        url = f" @ {self.url}" if self.url else ""
        return (self.name or "(unset)") + url + (f" [{', '.join(extra)}]" if extra else "")

    @property
    def gated(self) -> str | None:
        """What to accept when the hub id is gated, else None."""
        if self.local or self.kind not in ("model", "dataset"):
            return None
        org = self.name.split("/", 1)[0]
        return GATED.get(self.name) or GATED.get(f"{org}/*")

    @property
    def size_gb(self) -> float | None:
        hub = not self.local and self.kind in ("model", "dataset")
        return SIZE_GB.get(self.name) if hub else None


@dataclass(frozen=True)
class Status:
    """An artifact's state (one of the module docstring's) and the detail or the step to take."""

    artifact: Artifact
    state: str
    detail: str

    @property
    def ok(self) -> bool:
        return self.state in OK_STATES


# ----- where the caches are ---------------------------------------------------------------------
def _hf_home() -> Path:
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(xdg).expanduser() / "huggingface"


def hub_cache() -> Path:
    """The hub cache, as huggingface_hub resolves it (``HF_HUB_CACHE``, else ``HF_HOME/hub``)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    return _hf_home() / "hub"


def datasets_cache() -> Path:
    """Where ``datasets`` keeps prepared sets (``HF_DATASETS_CACHE``, else ``HF_HOME/datasets``)."""
    if os.environ.get("HF_DATASETS_CACHE"):
        return Path(os.environ["HF_DATASETS_CACHE"]).expanduser()
    return _hf_home() / "datasets"


def hf_token() -> str | None:
    """``HF_TOKEN`` (or the token file ``hf auth login`` writes), else None."""
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if os.environ.get(var):
            return os.environ[var]
    path = Path(os.environ.get("HF_TOKEN_PATH") or _hf_home() / "token").expanduser()
    return (path.read_text().strip() or None) if path.is_file() else None


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("0", "", "false", "no")


# ----- what a config names ----------------------------------------------------------------------
def resolve_stages(cfg: DictConfig) -> tuple[str, ...]:
    """The stages a run of ``cfg`` executes: ``method.stage``, or every paper stage when
    ``stage=paper`` stands for several (the run itself then asks to choose one).

    Raises:
        ConfigError: no method selected, or a stage the method does not have.
    """
    slug, stage = OmegaConf.select(cfg, "method.name"), OmegaConf.select(cfg, "method.stage")
    schema = method_schemas().get(slug)
    if schema is None:
        raise ConfigError("no method selected: pass experiment=<preset> or method=<slug>")
    if stage == "paper" and "paper" not in schema.STAGES:
        return tuple(schema.PAPER_STAGES)
    if stage not in schema.STAGES:
        raise ConfigError(
            f"method.stage={stage!r} is not a stage of {slug}; valid: {', '.join(schema.STAGES)}"
        )
    return (stage,)


def _env_names(cfg: DictConfig, key: str) -> tuple[str, ...]:
    """Variables of ``${oc.env:VAR,default}`` interpolations in the raw value at ``key``."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if not isinstance(node, DictConfig) or leaf not in node:
        return ()
    raw = OmegaConf.to_container(node, resolve=False).get(leaf)
    return tuple(re.findall(r"\$\{oc\.env:([A-Za-z0-9_]+)", str(raw)))


def _dataset(cfg: DictConfig, key: str, made_by: str | None = None) -> Artifact:
    node = an.get(cfg, key)
    node = node if isinstance(node, DictConfig) else {}
    hub, path = node.get("hub_id"), node.get("path")
    common = {"config": node.get("config"), "split": node.get("split"), "made_by": made_by}
    if path:
        env = _env_names(cfg, f"{key}.path")
        return Artifact("dataset", str(path), f"{key}.path", True, env=env, hub_alt=hub, **common)
    if hub:
        return Artifact("dataset", str(hub), f"{key}.hub_id", **common)
    return Artifact("dataset", "", f"{key}.path", True, made_by=made_by)


def _files(need: an.FileNeed, cfg: DictConfig) -> list[Artifact]:
    value = an.get(cfg, need.key)
    if isinstance(value, DictConfig):
        value = [v.get("path") if isinstance(v, DictConfig) else v for v in value.values()]
    values = [str(v) for v in (value if not isinstance(value, (str, type(None))) else [value]) if v]
    if not values and need.optional:
        return []
    values = values or [need.default or ""]
    env = _env_names(cfg, need.key)
    return [Artifact("file", v, need.key, True, env=env, made_by=need.made_by) for v in values]


def _expand(need, cfg: DictConfig) -> list[Artifact]:
    """The artifacts one need names in ``cfg``."""
    if isinstance(need, an.ModelNeed):
        path = an.get(cfg, need.path) if need.path else None
        if path:
            return [Artifact("model", str(path), need.path, True)]
        rev = an.get(cfg, need.revision) if need.revision else None
        return [Artifact("model", str(an.get(cfg, need.name) or ""), need.name, revision=rev)]
    if isinstance(need, an.BenchNeed):
        sets = an.get(cfg, "benchmark.sets")
        if sets is None:
            return [Artifact("dataset", "", "benchmark", True)]
        only = list(an.get(cfg, need.only) or []) if need.only else []
        return [_dataset(cfg, f"benchmark.sets.{n}") for n in sets if not only or n in only]
    if isinstance(need, an.DataNeed):
        if need.key.endswith(".*"):
            base = need.key[:-2]
            return [_dataset(cfg, f"{base}.{n}", need.made_by) for n in an.get(cfg, base) or {}]
        return [_dataset(cfg, need.key, need.made_by)]
    if isinstance(need, an.FileNeed):
        return _files(need, cfg)
    if isinstance(need, an.ApiNeed):
        url = an.get(cfg, need.url) if need.url else None
        # the variable OpenAIChat reads (common/llm.py): the config's, else OPENAI_API_KEY
        env = str((an.get(cfg, need.key_env) if need.key_env else None) or "OPENAI_API_KEY")
        name = str(an.get(cfg, need.model) or "")
        return [Artifact("endpoint", name, need.model, url=url, env=(env,))]
    if isinstance(need, an.LmEvalNeed):
        out = []
        for task in an.get(cfg, need.key) or ():
            hub, config = an.LM_EVAL_TASK_DATA.get(task, (f"lm_eval:{task}", None))
            out.append(Artifact("dataset", hub, f"{need.key}.{task}", config=config))
        return out
    raise TypeError(f"unknown need {need!r}")


def list_artifacts(cfg: DictConfig, stages: tuple[str, ...] | None = None) -> list[Artifact]:
    """Every artifact the ``stages`` of ``cfg``'s method read (default: :func:`resolve_stages`),
    once each, in the order the stages name them; ``Artifact.stages`` says which stages read it."""
    slug = OmegaConf.select(cfg, "method.name")
    found: dict[tuple, Artifact] = {}
    for stage in stages or resolve_stages(cfg):
        for need in an.stage_needs(slug, stage) or ():
            if not an.applies(need, cfg):
                continue
            for art in _expand(need, cfg):
                old = found.get(art.ident)
                found[art.ident] = replace(old or art, stages=(*(old.stages if old else ()), stage))
    return list(found.values())


# ----- is it here? ------------------------------------------------------------------------------
def repo_folder(repo_id: str, repo_type: str) -> Path:
    """The cache folder of a hub repo (``models--org--name``, ``datasets--org--name``)."""
    return hub_cache() / f"{repo_type}s--{repo_id.replace('/', '--')}"


def snapshot(repo_id: str, repo_type: str, revision: str | None = None) -> Path | None:
    """The cached snapshot folder of ``repo_id`` at ``revision`` (a branch, tag or commit)."""
    from huggingface_hub import try_to_load_from_cache

    if repo_type == "model":  # the file every checkpoint has, through huggingface_hub's own lookup
        hit = try_to_load_from_cache(
            repo_id, "config.json", cache_dir=hub_cache(), revision=revision, repo_type=repo_type
        )
        if isinstance(hit, str):
            return Path(hit).parent
    folder = repo_folder(repo_id, repo_type)
    ref = folder / "refs" / (revision or "main")
    commit = ref.read_text().strip() if ref.is_file() else (revision or "")
    snap = folder / "snapshots" / commit
    return snap if commit and snap.is_dir() else None


def files_in(snap: Path) -> list[Path]:
    """Files of a snapshot whose link resolves (a broken link is an unfinished download)."""
    return [p for p in snap.rglob("*") if p.is_file() and p.name != ".gitattributes"]


def weights_complete(snap: Path) -> str | None:
    """None when the snapshot holds its weights (every shard an index lists), else what is missing."""
    for index in sorted(snap.glob("*.index.json")):
        shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
        lost = sorted(s for s in shards if not (snap / s).is_file())
        if lost:
            return (
                f"{len(lost)} of {len(shards)} weight shards of {index.name} missing ({lost[0]}...)"
            )
        return None
    if any(p.suffix in WEIGHT_SUFFIXES for p in files_in(snap)):
        return None
    return "no weight file in the cached snapshot"


def _snake(name: str) -> str:
    """``datasets.naming.camelcase_to_snakecase`` (the prepared-cache folder name)."""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z\d])([A-Z])", r"\1_\2", name).lower()


def prepared(repo_id: str, config: str | None, split: str | None) -> Path | None:
    """The folder where ``datasets`` prepared ``repo_id`` (loads offline), or None."""
    *org, name = repo_id.split("/")
    root = datasets_cache() / "___".join([*org, _snake(name)])
    for info in sorted(root.glob(f"{config or '*'}*/*/*/dataset_info.json")):
        here = info.parent
        if not split or any(here.glob(f"*-{split}.arrow")) or any(here.glob(f"*-{split}-*.arrow")):
            return here
    return None


def _absent(art: Artifact) -> Status:
    """A hub artifact that is not cached: gated, script-based or plainly missing."""
    url = f"https://huggingface.co/{'datasets/' if art.kind == 'dataset' else ''}{art.name}"
    if art.name in SCRIPT_BASED:
        return Status(
            art, "script", f"loading script (datasets >= 4 refuses it): {SCRIPT_BASED[art.name]}"
        )
    if art.gated and not hf_token():
        return Status(art, "gated", f"accept {art.gated} at {url}, then export HF_TOKEN=<token> "
                      "(or `hf auth login`) and run icml26 fetch")  # fmt: skip
    gated = f" (gated: accept {art.gated} at {url} with that token's account)" if art.gated else ""
    return Status(art, "missing", f"not in the HF cache: icml26 fetch downloads it{gated}")


def _hub_status(art: Artifact) -> Status:
    if art.name.startswith("tiny-"):
        return Status(art, "present", "built in-process (common.tiny)")
    if art.name.startswith("lm_eval:"):
        return Status(art, "missing", "lm-eval task without a known hub set: add it to "
                      "common.artifact_needs.LM_EVAL_TASK_DATA")  # fmt: skip
    repo_type = "model" if art.kind == "model" else "dataset"
    snap = snapshot(art.name, repo_type, art.revision)
    if repo_type == "model":
        problem = weights_complete(snap) if snap else "absent"
        return Status(art, "present", f"HF cache: {snap}") if not problem else (
            _absent(art) if problem == "absent" else Status(art, "missing", f"{problem}: icml26 fetch completes it"))  # fmt: skip
    ready = prepared(art.name, art.config, art.split)
    if ready:
        return Status(art, "present", f"prepared by datasets (loads offline): {ready}")
    files = files_in(snap) if snap else []
    if (
        files
        and not any(p.suffix in DATA_SUFFIXES for p in files)
        and any(p.suffix == ".py" for p in files)
    ):
        return Status(art, "script", SCRIPT_BASED.get(art.name, "a loading-script data set: "
                      "convert it to parquet/jsonl locally and point the set's path at it"))  # fmt: skip
    if any(p.suffix in DATA_SUFFIXES for p in files):
        if _offline():
            return Status(art, "missing", f"hub files cached ({snap}) but not prepared, and "
                          "HF_HUB_OFFLINE is set: run icml26 fetch online once")  # fmt: skip
        return Status(art, "present", f"HF cache: {snap} (datasets prepares it on first load)")
    return _absent(art)


def _endpoint_status(art: Artifact) -> Status:
    host = urlparse(art.url).hostname if art.url else None
    if host in ("localhost", "127.0.0.1", "0.0.0.0", "::1"):
        port = urlparse(art.url).port or 80
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return Status(art, "present", "a server answers there (not queried)")
        except OSError:
            return Status(art, "missing", f"nothing listens at {art.url}: serve {art.name} there "
                          f"(e.g. `vllm serve {art.name} --port {port}`)")  # fmt: skip
    var = art.env[0] if art.env else None
    if var and not os.environ.get(var) and not art.url:
        return Status(art, "missing", f"export {var}=<key> (the endpoint is "
                      f"{os.environ.get('OPENAI_BASE_URL') or 'api.openai.com'})")  # fmt: skip
    return Status(art, "present", f"key in ${var} (not contacted)" if var else "not contacted")


def status(art: Artifact, produced: tuple[str, ...] = ()) -> Status:
    """Where ``art`` stands now; ``produced``: stages listed before the one that reads it."""
    if not art.name:
        if art.made_by and art.made_by in produced:
            return Status(art, "later", f"written by stage {art.made_by}; then set {art.key}")
        what = {
            "model.name": "model=<checkpoint> (configs/model/)",
            "benchmark": "benchmark=<suite>",
        }
        return Status(art, "unset", f"choose {what.get(art.key, art.key + '=<value>')}")
    if art.kind == "endpoint":
        return _endpoint_status(art)
    if not art.local:
        return _hub_status(art)
    if "<run_dir>" not in art.name and Path(art.name).expanduser().exists():
        return Status(art, "present", "on disk")
    if art.made_by and art.made_by in produced:
        return Status(art, "later", f"written by stage {art.made_by} of this listing")
    steps = [f"written by method.stage={art.made_by}; or set {art.key}"] if art.made_by else []
    if art.env:
        steps.append(f"or set {' / '.join(art.env)} to the folder that holds it")
    if art.hub_alt:
        steps.append(f"or set {art.key}=null to load {art.hub_alt} from the hub")
    return Status(art, "missing", "; ".join(["not on disk", *steps]))


def statuses(cfg: DictConfig, stages: tuple[str, ...] | None = None) -> list[Status]:
    """:func:`status` of every artifact of :func:`list_artifacts` (earlier stages count as producers)."""
    stages = stages or resolve_stages(cfg)
    out = []
    for art in list_artifacts(cfg, stages):
        first = stages.index(art.stages[0])
        out.append(status(art, produced=stages[:first]))
    return out
