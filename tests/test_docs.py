"""Every ```python block of README.md, docs/*.md and docs/methods/*.md runs as written, offline
(issue 31 point 6, issue 41).

A block is keyed ``"<file>#<index>"``, its index counted over the whole file. The quick blocks run
in ONE subprocess (the torch/transformers import is paid once), each in a fresh namespace, under a
timeout. A block that needs what this machine may lack (a GPU, an API key, a sandbox tool) is in
NEEDS and runs only where that is present (skipped with the reason elsewhere); an inherently heavy
block is in SLOW and runs in the slow tier. GIVEN builds, before a block, only what the page says
the user brings (their problem file, a served model); every other block (a new one included) is
self-contained and runs in the quick test. The last test fails when a listed block is gone, so the
lists only shrink.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.M | re.S)
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "docs" / "methods").glob("*.md"))]  # fmt: skip

# "<file>#<index>": (what it needs: "cuda", "env:<VAR>" or "bin:<program>", why).
NEEDS = {
    "docs/methods/agentxray.md#0": (
        "bin:bwrap",
        "the agents' generated code runs in common.sandbox, which needs bubblewrap (`bwrap`)",
    ),
    "docs/methods/sacopt.md#0": (
        "bin:bwrap",
        "the generated solver program runs in common.sandbox, which needs bubblewrap (`bwrap`)",
    ),
}

# "<file>#<index>": why the block is too heavy for the quick tier (it runs in the slow tier). CPU
# seconds measured on the shared 2-core machine under load; the quick blocks together take ~55.
SLOW = {
    "docs/methods/autoqra.md#0": (
        "a real AutoQRA search: Stage 1's evolution (pop 6, 2 generations) and Stage 2's BO, each "
        "evaluation a fake-quantised LoRA fine-tune of the tiny model (~130 CPU s)"
    ),
    "docs/methods/swordsman.md#0": (
        "trains the toy masked-diffusion model for 300 steps so that the decoders have a model "
        "worth decoding (~140 CPU s)"
    ),
    "docs/methods/sv_features.md#1": (
        "SAD over every head for 128 IOI prompts on GPT-2, then the Pythia checkpoint sweep "
        "(tiny stand-ins for both; ~20 CPU s)"
    ),
}

# "<file>#<index>": code run before the block, in its namespace, building what the block says the
# user brings (their problem file, a served model); see tests/docs_given.py. The block runs as written.
GIVEN = {
    "docs/methods/agentxray.md#0": "from tests import docs_given; docs_given.agentxray()",
    "docs/methods/autoqra.md#0": "from tests import docs_given; globals().update(docs_given.autoqra())",
    "docs/methods/sacopt.md#0": "from tests import docs_given; docs_given.sacopt()",
    "docs/methods/salo.md#0": "from tests import docs_given; globals().update(docs_given.salo())",
    "docs/methods/slicefine.md#0": (
        "from tests import docs_given; globals().update(docs_given.slicefine())"
    ),
    "docs/methods/sv_features.md#1": "from tests import docs_given; docs_given.sv_features_real()",
    "docs/methods/webworld.md#0": "from tests import docs_given; globals().update(docs_given.webworld())",
    "docs/methods/weasel.md#0": "from tests import docs_given; globals().update(docs_given.weasel())",
}


def doc_blocks() -> dict[str, str]:
    """Every ```python block of the pages, keyed ``"<file>#<index in the file>"``."""
    out = {}
    for f in PAGES:
        for i, block in enumerate(FENCE.findall(f.read_text())):
            out[f"{f.relative_to(ROOT)}#{i}"] = block
    return out


def missing_need(need: str) -> bool:
    """True when this machine lacks ``need`` ("cuda", "env:VAR", "bin:program")."""
    kind, _, name = need.partition(":")
    if kind == "cuda":
        import torch

        return not torch.cuda.is_available()
    if kind == "env":
        return not os.environ.get(name)
    if kind == "bin":
        return shutil.which(name) is None
    raise ValueError(f"unknown need {need!r}: use cuda, env:<VAR> or bin:<program>")


_RUNNER = """
import json, sys, traceback
sys.path.insert(0, ROOT)
blocks, given = json.loads(sys.stdin.read())
failed = {}
for key, code in blocks.items():
    try:
        ns = {"__name__": "__main__"}
        exec(compile(given.get(key, ""), key + " (given)", "exec"), ns)
        exec(compile(code, key, "exec"), ns)
    except BaseException:
        failed[key] = traceback.format_exc(limit=3)[-600:]
print("FAILED=" + json.dumps(failed))
"""


def run_blocks(keys: list[str], cwd: Path, timeout: int) -> None:
    """Runs the blocks in one subprocess (a scratch working folder, the checkout importable)."""
    blocks = doc_blocks()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ICML26_PROGRESS": "0"}
    r = subprocess.run(
        [sys.executable, "-c", f"ROOT = {str(ROOT)!r}\n" + _RUNNER],
        input=json.dumps([{k: blocks[k] for k in keys}, GIVEN]),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("FAILED=")][-1]
    failed = json.loads(line[len("FAILED=") :])
    assert not failed, "\n\n".join(f"{k}:\n{v}" for k, v in failed.items())


@pytest.mark.slow  # every Python block of README.md and docs/ (about 21 s): make test-all
def test_doc_blocks_run_offline(tmp_path):
    """Every block but the SLOW ones and those whose need this machine lacks, in one process."""
    keys = [k for k in doc_blocks() if k not in SLOW]
    keys = [k for k in keys if k not in NEEDS or not missing_need(NEEDS[k][0])]
    assert any(k.startswith("README.md") for k in keys), "README's python example is not run"
    run_blocks(keys, tmp_path, timeout=300)


@pytest.mark.parametrize("key", sorted(NEEDS))
def test_doc_block_needs_what_this_machine_has(key):
    """A NEEDS block runs in test_doc_blocks_run_offline where its need is met; here it is
    reported skipped, with the reason, where it is not."""
    need, why = NEEDS[key]
    if missing_need(need):
        pytest.skip(f"{key} needs {need}: {why}")


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(SLOW))
def test_slow_doc_block_runs(key, tmp_path):
    run_blocks([key], tmp_path, timeout=900)


def test_every_doc_block_is_run_or_listed():
    keys = set(doc_blocks())
    for name, listed in {"NEEDS": NEEDS, "SLOW": SLOW, "GIVEN": GIVEN}.items():
        assert set(listed) <= keys, f"{name} lists blocks that are gone: {set(listed) - keys}"
    assert not set(NEEDS) & set(SLOW), "a block is either NEEDS or SLOW"
    for need, _ in NEEDS.values():
        missing_need(need)  # a misspelt kind raises
