"""Shared skip markers of the test suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from common import sandbox

# Why model-generated code cannot run isolated here (None when bubblewrap works). `make test`
# installs bubblewrap as root; elsewhere these tests skip with the reason instead of failing.
SANDBOX_REASON = sandbox.sandbox_unavailable_reason()
needs_bwrap = pytest.mark.skipif(
    SANDBOX_REASON is not None,
    reason=f"needs the bubblewrap sandbox: {SANDBOX_REASON}",
)


def path_without(tool: str, scratch: Path) -> str:
    """``$PATH`` with ``tool`` hidden: each folder that holds it is replaced by a folder of links to
    everything else in it (how a machine without the tool looks to a subprocess)."""
    dirs = []
    for i, d in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        if d and (Path(d) / tool).exists():
            shadow = scratch / f"path{i}"
            shadow.mkdir(parents=True)
            for entry in Path(d).iterdir():
                if entry.name != tool:
                    (shadow / entry.name).symlink_to(entry)
            d = str(shadow)
        dirs.append(d)
    return os.pathsep.join(dirs)
