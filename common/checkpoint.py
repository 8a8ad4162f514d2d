"""Checkpoints for long searches: atomic writes, a settings fingerprint, and a journal of calls.

A search that can be killed (``kill -9``) at any point and resumed without repeating or losing an
evaluation needs three things, shared here by AutoQRA, MCCE and AgentXRay:

* :func:`atomic_write_bytes` / :func:`atomic_write_json` / :func:`atomic_pickle`: a file is either the
  old version or the new one, never half-written (write to a temporary file in the same folder, fsync,
  ``os.replace``).
* :func:`check_settings`: the folder remembers the settings it was made with (``settings.json``); a
  resume with other settings is refused with :class:`CheckpointMismatch` naming every key that differs.
* :class:`CallJournal`: an append-only JSON-lines record of expensive calls (LLM replies, oracle scores)
  keyed by call number, so the calls of an interrupted batch are replayed from disk instead of being
  repeated or lost. A torn last line (the process died mid-write) is ignored.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "CallJournal",
    "CheckpointMismatch",
    "atomic_pickle",
    "atomic_write_bytes",
    "atomic_write_json",
    "check_settings",
    "fingerprint",
    "load_pickle",
    "plain",
]


class CheckpointMismatch(ValueError):
    """A checkpoint folder was made with other settings than the run that tries to resume from it."""


def plain(obj: Any) -> Any:
    """``obj`` as JSON-able plain data: dataclasses and mappings by field, tuples as lists, paths as str."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if hasattr(obj, "tolist"):  # numpy scalars and arrays
        return obj.tolist()
    return repr(obj)


def fingerprint(settings: Any) -> str:
    """A stable sha256 of ``settings`` (canonical JSON of :func:`plain`)."""
    text = json.dumps(plain(settings), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the new one, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    """:func:`atomic_write_bytes` of ``obj`` as indented JSON."""
    atomic_write_bytes(path, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode())


def atomic_pickle(path: str | os.PathLike, obj: Any) -> None:
    """:func:`atomic_write_bytes` of ``pickle.dumps(obj)``."""
    atomic_write_bytes(path, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def load_pickle(path: str | os.PathLike) -> Any:
    """The object :func:`atomic_pickle` wrote (only load checkpoints this library wrote)."""
    with open(path, "rb") as fh:
        return pickle.load(fh)


def check_settings(
    folder: str | os.PathLike, settings: Any, *, name: str = "settings.json"
) -> bool:
    """Bind ``folder`` to ``settings``; return True when the folder already held matching settings.

    The first call writes ``folder/name``. A later call with different settings raises
    :class:`CheckpointMismatch` naming each differing key with both values, so a resume never mixes
    results made under other settings (another seed, budget or evaluator).
    """
    folder = Path(folder)
    want = plain(settings)
    if not isinstance(want, dict):
        raise TypeError(f"settings must be a dataclass or a mapping, got {type(settings).__name__}")
    path = folder / name
    if not path.exists():
        atomic_write_json(path, want)
        return False
    have = json.loads(path.read_text())
    if have == want:
        return True
    diffs = []
    for key in sorted(set(have) | set(want)):
        if have.get(key, "<absent>") != want.get(key, "<absent>"):
            diffs.append(
                f"{key}: folder has {have.get(key, '<absent>')!r}, this run has {want.get(key, '<absent>')!r}"
            )
    raise CheckpointMismatch(
        f"checkpoint folder {folder} was made with other settings ("
        + "; ".join(diffs)
        + "). Resume with the same settings, or choose another folder (or delete this one)."
    )


class CallJournal:
    """An append-only journal of expensive calls, replayed on resume.

    ``journal.call(fn, *args)`` returns the recorded result of the next call when the journal holds it
    (a resumed run replays what the killed run already paid for) and otherwise runs ``fn(*args)``,
    appends its JSON-able result with an fsync, and returns it. Calls are matched by their position
    and a ``tag`` (for example the prompt's hash): a replay whose tag differs raises, since it means
    the run diverged from the recorded one.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._records: list[dict[str, Any]] = []
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    self._records.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # a torn last line: the process died while writing it
            # Rewrite without the torn tail so later appends stay line-aligned.
            atomic_write_bytes(
                self.path, "".join(json.dumps(r) + "\n" for r in self._records).encode()
            )
        self.position = 0
        self.replayed = 0
        self.executed = 0

    def __len__(self) -> int:
        return len(self._records)

    def seek(self, position: int) -> None:
        """Start replaying at record ``position`` (the call count of the last full checkpoint)."""
        if not 0 <= position <= len(self._records):
            raise ValueError(f"position must be in [0, {len(self._records)}], got {position}")
        self.position = position

    def call(self, fn, *args, tag: str = "", **kwargs):
        if self.position < len(self._records):
            rec = self._records[self.position]
            if rec["tag"] != tag:
                raise CheckpointMismatch(
                    f"journal {self.path} call {self.position} was recorded with tag {rec['tag']!r}, "
                    f"this run asks {tag!r}: the resumed run diverged from the recorded one"
                )
            self.position += 1
            self.replayed += 1
            return rec["result"]
        result = fn(*args, **kwargs)
        rec = {"tag": tag, "result": result}
        line = json.dumps(rec) + "\n"
        with open(self.path, "a") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        self._records.append(rec)
        self.position += 1
        self.executed += 1
        return result
