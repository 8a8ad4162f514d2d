"""Every ``icml26`` command and config key the docs and reproduce scripts mention exists (issue 41).

Scanned: README.md, docs/*.md, docs/methods/*.md (fenced blocks, inline code, and the generated
paper-smoke blocks whose commands are bash comments) and scripts/reproduce/*.sh.

(a) Each ``icml26 ...`` / ``-m common.cli ...`` command is composed with its own overrides through
``common.registry.compose`` (never run). Overrides whose value is a placeholder (``<folder>``,
``$VAR``, ``{name}``) or a path (the file need not exist here) are left out of the composition and
only their key is looked up in the composed config; a ``+`` key or a key of a trainer node is looked
up among the fields of that node's TRL config. ``a|b`` alternatives compose with the first one; a
``-m`` sweep's ``a,b`` with its first value.

The generated "Run a paper stage on a tiny local model" blocks of the method docs are what
``python -m scripts.paper_smoke --write-docs`` writes from the ``PAPER_SMOKE`` tables now.

(b) Every ``method.<key>`` in the inline code of ``docs/methods/<slug>.md`` is a key of one of the
method's presets (``configs/experiment/<slug>_*.yaml``, composed) or a field of one of its trainer
nodes; README.md and docs/*.md keys may belong to any method.

What a doc names on purpose although it is wrong goes in ALLOWED with the reason.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import shlex
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

from common.config import ConfigError, _import_attr, method_schemas, register_schemas
from common.registry import CONFIG_DIR, compose, discover_methods

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "docs" / "methods").glob("*.md"))]  # fmt: skip
SCRIPTS = sorted((ROOT / "scripts" / "reproduce").glob("*.sh"))

# "<file>: <key or override as written>": why the doc names it although it does not compose.
ALLOWED = {
    "docs/adding_a_method.md: method.t1.steps=abc": "the example of a wrong type Hydra rejects",
    "docs/methods/georl.md: method.grounding": "the deviations table says this old switch is gone",
}
# A compose error a command may stop with on this machine, on purpose: the key check still runs.
EXPECTED_ERRORS = {
    r"paper path has several stages": "the docs show that a bare paper preset stops, naming them",
    r"CUDA": "a GPU-only stage (FlexAttention training) is refused on a CPU-only machine",
}

_CMD = re.compile(r"(?:^|[\s/`])(?:icml26|-m common\.cli)\s+(.*)")
_OVERRIDE = re.compile(r"^([+~]{0,2})([A-Za-z_][\w.]*)=(.*)$")
_PLACEHOLDER = re.compile(r"PLACEHOLDER|<[^<>]*>|\$\{?\w+\}?|\{\w+\}|\.\.\.")
_METHOD_KEY = re.compile(r"(?<![\w.$/-])method((?:\.\w+)+)(\.\*)?")
_PATHLIKE = re.compile(r"(^|_)(path|paths|dir|file|files|url|root|data)$")


# ----------------------------------------------------------------------------- extraction
def _md_lines(text: str) -> list[tuple[int, str]]:
    """(line number, command text) of every icml26 command of a page or script: continuation lines
    are joined, a command written as a bash comment (``#   icml26 ...``) counts, and on a line with
    inline code only the code spans are read."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        start, body = i, lines[i]
        if re.match(r"^\s*#\s*icml26 ", body):
            body = re.sub(r"^\s*#\s*", "", body)
        while body.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            body = body.rstrip()[:-1] + " " + re.sub(r"^\s*#?\s*", "", lines[i])
        spans = re.findall(r"`([^`]*)`", body) or [body]
        out += [(start + 1, span) for span in spans if _CMD.search(span)]
        i += 1
    return out


def _sh_vars(text: str) -> dict[str, str]:
    """``NAME=value`` / ``NAME=${NAME:-value}`` assignments of a script (the defaults)."""
    env = {}
    for name, value in re.findall(r"^\s*(?:export\s+)?(\w+)=(\S+)", text, re.M):
        value = value.strip("\"'")
        m = re.fullmatch(r"\$\{\w+:-([^}]*)\}", value)
        env[name] = m.group(1).strip("\"'") if m else value
    return env


def _sh_lines(text: str) -> list[tuple[int, str]]:
    env = _sh_vars(text)
    out = []
    for n, cmd in _md_lines(text):
        for name, value in env.items():
            if "$" not in value:
                cmd = re.sub(rf"\$\{{{name}\}}|\${name}\b", value, cmd)
        out.append((n, cmd))
    return out


@dataclasses.dataclass
class Command:
    where: str  # "<file>:<line>"
    overrides: list[str]


def _words(text: str) -> list[str]:
    text = re.sub(r"<[^<>]*>", "PLACEHOLDER", text)
    try:
        return shlex.split(text, comments=True)
    except ValueError:  # unbalanced quotes in prose
        return text.split()


def commands() -> list[Command]:
    out = []
    for path in [*DOCS, *SCRIPTS]:
        text = path.read_text()
        rel = str(path.relative_to(ROOT))
        for n, line in (_sh_lines if path.suffix == ".sh" else _md_lines)(text):
            rest = _CMD.search(line).group(1)
            words, sweep = [], False
            for w in _words(rest):
                if w in ("|", "||", "&&", ";", ">", "2>&1") or w.startswith(">"):
                    break
                sweep |= w in ("-m", "--multirun")
                if _OVERRIDE.match(w):
                    words.append(w)
            if any(w.startswith("experiment=") for w in words):
                if sweep:
                    words = [w.split(",")[0] if "[" not in w else w for w in words]
                out.append(Command(f"{rel}:{n}", words))
    return out


# ----------------------------------------------------------------------------- composition
@pytest.fixture(scope="module", autouse=True)
def _schemas_registered_once():
    """``compose`` stores every method's schema in Hydra's ConfigStore on each call (about half of
    its 0.35 s); the store is process-wide, so here it is filled once for the ~150 compositions."""
    import common.registry

    register_schemas()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(common.registry, "register_schemas", lambda: None, raising=False)
        yield


@functools.cache
def _compose(overrides: tuple[str, ...]) -> tuple[DictConfig | None, str]:
    """The composed config, or the config composed without validation and the error it stopped
    with (an EXPECTED_ERRORS one), or (None, error)."""
    try:
        return compose(list(overrides)), ""
    except ConfigError as err:
        if not any(re.search(p, str(err)) for p in EXPECTED_ERRORS):
            return None, str(err)
        if "full" in inspect.signature(compose).parameters:
            return compose(list(overrides), full=False), str(err)
        return None, str(err)


def _trainer_fields(cfg: DictConfig, node: str) -> set[str] | None:
    """Field names of the TRL config behind ``method.<node>``, or None if it is not a trainer node."""
    schema = method_schemas().get(OmegaConf.select(cfg, "method.name"))
    target = getattr(schema, "TRAINERS", {}).get(node) if schema else None
    return {f.name for f in dataclasses.fields(_import_attr(target))} if target else None


def key_exists(cfg: DictConfig, key: str) -> bool:
    """``key`` (dotted, ``a.b.*`` for any key below ``a.b``) is in ``cfg`` or is a field of the
    trainer node it falls under."""
    key = key.removesuffix(".*")
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if isinstance(node, DictConfig) and leaf in node:
        return True
    parts = key.split(".")
    if parts[0] == "method" and len(parts) >= 3:
        fields = _trainer_fields(cfg, parts[1])
        if fields is not None:
            return parts[2] in fields
    return False


def _split(words: list[str]) -> tuple[list[str], list[str]]:
    """Overrides to compose with, and keys to look up only (placeholder or path values)."""
    composed, lookup = [], []
    for w in words:
        prefix, key, value = _OVERRIDE.match(w).groups()
        value = value.split("|")[0] if "|" in value and "[" not in value else value
        leaf = key.rsplit(".", 1)[-1]
        if "." not in key:  # experiment, model, benchmark, seed, run_dir
            if key == "experiment" and _PLACEHOLDER.search(value):
                return [], []  # a generic command (experiment=<slug>_toy): nothing to compose
            if key != "run_dir" and not _PLACEHOLDER.search(value):
                composed.append(f"{key}={value}")  # model="$model": a choice made at run time
        elif _PLACEHOLDER.search(value) or _PATHLIKE.search(leaf) or "/" in value:
            lookup.append(key)
        else:
            composed.append(f"{prefix}{key}={value}")
    return composed, lookup


def _allowed(where: str, item: str) -> bool:
    return f"{where.split(':')[0]}: {item}" in ALLOWED


_COMMANDS = commands()


@pytest.mark.parametrize("cmd", _COMMANDS, ids=[c.where for c in _COMMANDS])
def test_documented_command_composes(cmd):
    composed, lookup = _split(cmd.overrides)
    if not composed:
        pytest.skip("a generic command (its experiment is a placeholder)")
    todo = [w for w in composed if not _allowed(cmd.where, w)]
    cfg, err = _compose(tuple(todo))
    assert cfg is not None, f"{cmd.where}: icml26 {' '.join(cmd.overrides)}\n  -> {err}"
    missing = [k for k in lookup if not key_exists(cfg, k) and not _allowed(cmd.where, k)]
    assert not missing, f"{cmd.where}: no such key {missing} in {todo[0]}"


# ----------------------------------------------------------------------------- inline keys
def _presets(slug: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / "experiment").glob(f"{slug}_*.yaml"))


@functools.cache
def _preset_configs(slug: str) -> tuple[DictConfig, ...]:
    out = []
    for preset in _presets(slug):
        cfg, _ = _compose((f"experiment={preset}",))
        if cfg is None:  # a multi-stage paper preset without `full`: pick its first stage
            stage = method_schemas()[slug].PAPER_STAGES[0]
            cfg, _ = _compose((f"experiment={preset}", f"method.stage={stage}"))
        out.append(cfg)
    return tuple(c for c in out if c is not None)


def _inline_keys(path: Path) -> list[tuple[int, str]]:
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        for span in re.findall(r"`([^`]*)`", line):
            if _CMD.search(span):
                continue  # a whole command: test_documented_command_composes
            for m in _METHOD_KEY.finditer(span):
                out.append((n, "method" + m.group(1) + (m.group(2) or "")))
    return out


def _key_cases() -> list[tuple[str, str, str]]:
    cases = []
    for path in DOCS:
        rel = str(path.relative_to(ROOT))
        slug = path.stem if path.parent.name == "methods" else None
        for n, key in _inline_keys(path):
            cases.append((f"{rel}:{n}", slug or "", key))
    return cases


_KEYS = _key_cases()


@pytest.mark.parametrize(("where", "slug", "key"), _KEYS, ids=[f"{w}:{k}" for w, _, k in _KEYS])
def test_documented_method_key_exists(where, slug, key):
    if _allowed(where, key):
        pytest.skip(ALLOWED[f"{where.split(':')[0]}: {key}"])
    slugs = [slug] if slug else ["maxrl", *discover_methods()]
    found = (key_exists(c, key) for s in slugs for c in _preset_configs(s))  # lazy: stops at one
    assert any(found), (
        f"{where}: `{key}` is not a key of {' / '.join(_presets(slug)) if slug else 'any method'}"
    )


def test_paper_smoke_doc_blocks_are_current():
    """The docs' paper-smoke blocks equal what the tables generate (they cannot go stale)."""
    from scripts.paper_smoke import write_docs

    stale = write_docs(check=True)
    assert not stale, f"stale: {stale}; regenerate with python -m scripts.paper_smoke --write-docs"
