"""``icml26 check`` and ``icml26 fetch``: what a run will touch, and getting it here (issue 42).

    icml26 check experiment=apo_paper                    # every artifact of the stage, with its status
    icml26 check experiment=maxrl_paper method.stage=eval benchmark=math500
    icml26 fetch experiment=apo_paper                    # download what is missing (network, HF_TOKEN)

``check`` composes the run as ``icml26`` does (the same overrides, key check only: no torch, no
transformers, no datasets imported), prints one aligned line per artifact (:mod:`common.artifacts`)
and exits 0 only when every one is present (or written by an earlier stage of the listing), 1
otherwise, 2 on a config error. ``fetch`` downloads the missing hub checkpoints and data sets with
``huggingface_hub.snapshot_download`` (``HF_TOKEN`` honoured, progress bars shown) into the cache
``check`` reads, prepares data sets with ``datasets`` so that the run can go offline, skips what is
present, and refuses gated ids without a token and loading-script sets, naming the one step each
needs; it exits like ``check`` does afterwards.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import TextIO

from common import artifacts as af
from common.config import ConfigError

USAGE = """usage: icml26 check [experiment=<preset>] [key=value ...]
       icml26 fetch [experiment=<preset>] [key=value ...]

check: list every model, data set, local file and endpoint the chosen stage reads, and whether each
is here (HF cache: HF_HUB_CACHE or HF_HOME; data sets prepared in HF_DATASETS_CACHE). Exit 0 when
all are present, 1 when something is missing, 2 on a config error.
fetch: download the missing hub artifacts (huggingface_hub; HF_TOKEN for gated ids), then check."""
MODEL_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja", "*.py"]


def compose_for_check(overrides: list[str]):
    """The run's config as ``icml26`` composes it, before any run-time validation imports TRL."""
    from common.registry import compose

    return compose(list(overrides), full=False)


def render(rows: list[af.Status], stages: tuple[str, ...]) -> str:
    """One aligned line per artifact (state, kind, name, size, key[, stages]) and its detail below."""
    head = ["state", "kind", "artifact", "size", "key"] + (["stages"] if len(stages) > 1 else [])
    table = [head]
    for st in rows:
        a = st.artifact
        size = f"{a.size_gb:g} GB" if a.size_gb else ""
        table.append(
            [st.state, a.kind, a.label, size, a.key] + [",".join(a.stages)] * (len(head) - 5)
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    lines = []
    for i, row in enumerate(table):
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if i and not rows[i - 1].ok:  # the one step that makes it present
            lines.append(" " * (4 + widths[0]) + "-> " + rows[i - 1].detail)
    return "\n".join(lines)


def summary(rows: list[af.Status]) -> str:
    """``N artifacts: k present, m missing, ...`` and the disk the known sizes add up to."""
    counts: dict[str, int] = {}
    for st in rows:
        counts[st.state] = counts.get(st.state, 0) + 1
    parts = ", ".join(f"{n} {s}" for s, n in counts.items())
    todo = sum(st.artifact.size_gb or 0 for st in rows if st.state in ("missing", "gated"))
    disk = f"; about {todo:g} GB to download (known sizes)" if todo else ""
    return f"{len(rows)} artifacts: {parts or 'none'}{disk}"


def check(overrides: list[str], out: TextIO = sys.stdout) -> int:
    """``icml26 check``: prints the listing; 0 when everything the stages need is present."""
    try:
        cfg = compose_for_check(overrides)
        stages = af.resolve_stages(cfg)
        rows = af.statuses(cfg, stages)
    except ConfigError as err:
        print(f"icml26: config error: {err}", file=sys.stderr)
        return 2
    name = cfg.method.name
    print(f"icml26 check {' '.join(overrides)}".rstrip(), file=out)
    print(f"  method {name}, stage(s) {', '.join(stages)}; HF cache {af.hub_cache()}", file=out)
    if not rows:
        print(
            "  nothing to fetch: this stage runs offline on built-in data and tiny models", file=out
        )
        return 0
    print(render(rows, stages), file=out)
    print(summary(rows), file=out)
    return 0 if all(st.ok for st in rows) else 1


def prepare_dataset(art: af.Artifact) -> None:
    """Loads the set once with ``datasets`` so that its prepared copy serves offline runs."""
    from datasets import load_dataset

    load_dataset(art.name, art.config, split=art.split)


def _download(art: af.Artifact) -> None:
    """``snapshot_download`` of one hub artifact into :func:`common.artifacts.hub_cache`."""
    from huggingface_hub import snapshot_download

    repo_type = "model" if art.kind == "model" else "dataset"
    kw = {"repo_type": repo_type, "revision": art.revision, "cache_dir": str(af.hub_cache())}
    kw["token"] = af.hf_token()
    if repo_type == "model":  # safetensors first; the .bin copy only when there is no other
        snap = snapshot_download(art.name, allow_patterns=MODEL_PATTERNS, **kw)
        if af.weights_complete(af.snapshot(art.name, "model", art.revision) or snap):
            snapshot_download(art.name, allow_patterns=["*.bin", "*.json"], **kw)
        return
    patterns = None
    if art.config:  # only the config's files when the repo keeps them in a folder or prefix
        patterns = [f"{art.config}/*", f"*/{art.config}/*", f"{art.config}*", "*.md"]
    snap = snapshot_download(art.name, allow_patterns=patterns, **kw)
    if patterns and not any(p.suffix in af.DATA_SUFFIXES for p in af.files_in(Path(snap))):
        snapshot_download(art.name, **kw)  # the config's files are named otherwise
    if importlib.util.find_spec("datasets") is not None:
        prepare_dataset(art)


def fetch(overrides: list[str], out: TextIO = sys.stdout) -> int:
    """``icml26 fetch``: downloads the missing hub artifacts, then reports like :func:`check`."""
    try:
        cfg = compose_for_check(overrides)
        stages = af.resolve_stages(cfg)
        rows = af.statuses(cfg, stages)
    except ConfigError as err:
        print(f"icml26: config error: {err}", file=sys.stderr)
        return 2
    for st in rows:
        a = st.artifact
        if st.ok:
            print(f"  present  {a.label}", file=out)
        elif st.state == "missing" and a.kind in ("model", "dataset") and not a.local:
            print(f"  fetch    {a.label} ({a.kind})", file=out, flush=True)
            try:
                _download(a)
            except Exception as err:  # network, auth, a repo that moved: report and go on
                print(f"  failed   {a.label}: {type(err).__name__}: {err}", file=out)
        else:
            print(f"  refused  {a.label}: {st.detail}", file=out)
    print("", file=out)
    return check(overrides, out)


def main(command: str, argv: list[str]) -> int:
    """Entry point of ``icml26 check|fetch [overrides]``."""
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return 0
    bad = [a for a in argv if a.startswith("-")]
    if bad:
        print(f"icml26 {command}: unknown option {bad[0]!r} (takes key=value overrides)\n{USAGE}",
              file=sys.stderr)  # fmt: skip
        return 2
    return (check if command == "check" else fetch)(argv)


# ----- scripts/reproduce/README.md: the artifacts of every paper preset ---------------------------
README = Path(__file__).resolve().parents[1] / "scripts" / "reproduce" / "README.md"
BEGIN, END = "<!-- artifacts:begin (python -m common.artifacts_cli) -->", "<!-- artifacts:end -->"


def _note(art: af.Artifact) -> str:
    if art.name in af.SCRIPT_BASED:
        return "script-based: local conversion"
    if art.gated:
        return f"gated: {art.gated} + HF_TOKEN"
    if art.made_by:
        return f"written by stage {art.made_by}"
    if art.kind == "endpoint":
        return "served locally" if art.url else f"API key ${art.env[0]}"
    return "local file" if art.local else ""


def preset_block(preset: str) -> str:
    """The README section of one paper preset: its artifacts, gated ones, disk, fetch command."""
    cfg = compose_for_check([f"experiment={preset}"])
    stages = af.resolve_stages(cfg)
    arts = af.list_artifacts(cfg, stages)
    lines = [f"#### `{preset}` ({cfg.method.name}; stages {', '.join(stages)})", ""]
    if not arts:
        return "\n".join([*lines, "Nothing to fetch.", ""])
    lines += ["| kind | artifact | key | stages | note | size |", "|---|---|---|---|---|---|"]
    for a in arts:
        size = f"{a.size_gb:g} GB" if a.size_gb else ""
        label = a.label.replace("|", "\\|")
        lines.append(
            f"| {a.kind} | `{label}` | `{a.key}` | {', '.join(a.stages)} | {_note(a)} | {size} |"
        )
    known = sum(a.size_gb or 0 for a in arts)
    unknown = sum(1 for a in arts if not a.local and a.kind != "endpoint" and not a.size_gb)
    parts = [f"about {known:g} GB"] if known else []
    parts += [f"{unknown} hub set(s) of unlisted size"] if unknown else []
    disk = " + ".join(parts) or "nothing from the hub"
    lines += ["", f"Disk: {disk}. Fetch: `icml26 fetch experiment={preset}`; check: "
              f"`icml26 check experiment={preset}`.", ""]  # fmt: skip
    return "\n".join(lines)


def readme_section() -> str:
    """Every ``*_paper*`` preset's block, composed with the configs' own defaults (the
    ``${oc.env:...}`` variables set in this shell are ignored, so the text is the same everywhere)."""
    from common.registry import CONFIG_DIR

    texts = [p.read_text() for p in (CONFIG_DIR).rglob("*.yaml")]
    names = {v for t in texts for v in re.findall(r"\$\{oc\.env:([A-Za-z0-9_]+)", t)}
    saved = {v: os.environ.pop(v) for v in names if v in os.environ}
    try:
        presets = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*_paper*.yaml"))
        blocks = [preset_block(p) for p in presets]
    finally:
        os.environ.update(saved)
    return "\n".join([BEGIN, "", *blocks, END])


def write_readme(path: Path = README) -> bool:
    """Replaces the generated section of ``path`` (appends it the first time); True if it changed."""
    text = path.read_text()
    new = readme_section()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        out = head + new + rest.split(END, 1)[1]
    else:
        out = text.rstrip("\n") + "\n\n" + new + "\n"
    path.write_text(out)
    return out != text


if __name__ == "__main__":
    print("changed" if write_readme() else "up to date", README)
