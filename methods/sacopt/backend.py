"""Program assembly ``M = M_simp ⊕ M_sem`` (official model2data.py / run.py E5) and sandboxed execution.

``assemble_program`` writes the deterministic part (imports, model, data binding, variable
declarations) around the LLM-generated fragments. Fragments use a gurobipy-style surface
(``model.addConstr(...)``, ``quicksum``, ``model.setObjective(expr, GRB.MAXIMIZE)``), which both
backends accept: the open ``highspy`` backend (default; HiGHS's own modelling layer) and
``gurobipy`` (needs a licence; never used in tests).

``run_sandboxed`` is the only way generated code is ever executed: a separate Python process in a
fresh temporary directory, with a wall-clock timeout (the whole process group is killed), an
address-space limit, a file-size limit, a scrubbed environment (no API keys), no network (a
network namespace via ``unshare -rn`` when the kernel allows it, and in every case an audit hook
that refuses sockets), no subprocesses, and no writes outside the working directory.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

from common.sandbox import run_isolated
from methods.sacopt.schema import ProblemState

logger = logging.getLogger(__name__)

__all__ = ["BACKENDS", "RESULT_TAG", "ExecResult", "assemble_program", "run_sandboxed"]

BACKENDS = ("highspy", "gurobipy")
RESULT_TAG = "SACOPT_RESULT"

_PRELUDE = {
    "highspy": """\
import itertools
import json

import highspy

model = highspy.Highs()
model.silent()
quicksum = model.qsum


class GRB:
    MAXIMIZE = highspy.ObjSense.kMaximize
    MINIMIZE = highspy.ObjSense.kMinimize
    CONTINUOUS, INTEGER, BINARY = "continuous", "integer", "binary"


MAXIMIZE, MINIMIZE = GRB.MAXIMIZE, GRB.MINIMIZE


def _add_vars(name, dims, vtype):
    kind = highspy.HighsVarType.kContinuous if vtype == "continuous" else highspy.HighsVarType.kInteger
    ub = 1.0 if vtype == "binary" else highspy.kHighsInf

    def one(idx):
        return model.addVariable(lb=0.0, ub=ub, type=kind, name=name + str(list(idx)))

    if not dims:
        return one(())
    keys = itertools.product(*[range(d) for d in dims])
    return {(k if len(dims) > 1 else k[0]): one(k) for k in keys}
""",
    "gurobipy": """\
import json

import gurobipy as gp
from gurobipy import GRB, quicksum

model = gp.Model()
model.Params.OutputFlag = 0
MAXIMIZE, MINIMIZE = GRB.MAXIMIZE, GRB.MINIMIZE


def _add_vars(name, dims, vtype):
    t = {"continuous": GRB.CONTINUOUS, "integer": GRB.INTEGER, "binary": GRB.BINARY}[vtype]
    if not dims:
        return model.addVar(lb=0.0, vtype=t, name=name)
    return model.addVars(*dims, lb=0.0, vtype=t, name=name)
""",
}

_EPILOGUE = {
    "highspy": """\
model.run()
_raw = model.modelStatusToString(model.getModelStatus())
_map = {"Optimal": "optimal", "Infeasible": "infeasible", "Unbounded": "unbounded",
        "Primal infeasible or unbounded": "infeasible_or_unbounded"}
_status = _map.get(_raw, "other:" + _raw)
_obj = model.getInfo().objective_function_value if _status == "optimal" else None
print("%s " + json.dumps({"status": _status, "objective": _obj}))
""",
    "gurobipy": """\
model.optimize()
_map = {GRB.OPTIMAL: "optimal", GRB.INFEASIBLE: "infeasible", GRB.UNBOUNDED: "unbounded",
        GRB.INF_OR_UNBD: "infeasible_or_unbounded"}
_status = _map.get(model.Status, "other:" + str(model.Status))
_obj = model.ObjVal if _status == "optimal" else None
print("%s " + json.dumps({"status": _status, "objective": _obj}))
""",
}


def assemble_program(state: ProblemState, backend: str = "highspy") -> str:
    """Assemble a runnable solver program from a state (official model2data.py / run.py E5).

    ``M_simp``: imports, the model object, parameter values bound to their symbols (as Python
    lists, so ``P[i][j]``), variables declared from V (dicts keyed by index tuples, so ``x[i, j]``;
    lower bound 0 as in gurobipy). ``M_sem``: each constraint fragment, then the objective
    fragment, each under a comment naming its anchor. The program prints one line
    ``SACOPT_RESULT {"status", "objective"}``.

    Raises:
        ValueError: Unknown ``backend``, or a variable dimension that is not a known parameter.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    lines = [
        "# ---- M_simp: generated deterministically ----",
        _PRELUDE[backend],
        f"data = json.loads({json.dumps(json.dumps(state.data))})",
    ]
    for p in state.parameters:
        lines.append(f"{p.symbol} = data[{p.symbol!r}]")
    for v in state.variables:
        dims = []
        for d in v.shape:
            if isinstance(d, int):
                dims.append(str(d))
            elif d in state.data:
                dims.append(f"int({d})")
            else:
                raise ValueError(f"variable {v.symbol!r}: dimension {d!r} is not a parameter")
        lines.append(f"{v.symbol} = _add_vars({v.symbol!r}, [{', '.join(dims)}], {v.type!r})")
    lines.append("\n# ---- M_sem: one fragment per semantic anchor ----")
    for i, a in enumerate(state.constraints):
        lines.append(f"# --- anchor c{i}: {_one_line(a.text)} ---")
        lines.append(a.code.strip() or "pass")
    if state.objective is not None:
        lines.append(f"# --- anchor objective: {_one_line(state.objective.text)} ---")
        lines.append(state.objective.code.strip() or "pass")
    lines.append("\n# ---- solve and report ----")
    lines.append(_EPILOGUE[backend] % RESULT_TAG)
    return "\n".join(lines) + "\n"


def _one_line(text: str, width: int = 90) -> str:
    t = " ".join(text.split())
    return t if len(t) <= width else t[: width - 3] + "..."


@dataclass
class ExecResult:
    """Outcome of one sandboxed run.

    ``status`` is ``optimal``, ``infeasible``, ``unbounded``, ``infeasible_or_unbounded``,
    ``other:<solver status>`` or ``error`` (crash, timeout, memory, no result line);
    ``objective`` is set only when ``status == "optimal"``.
    """

    status: str
    objective: float | None
    stdout: str
    stderr: str
    returncode: int | None
    runtime_s: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        """The program ran and the solver reported a status (not a crash)."""
        return self.status != "error"


_BOOT = r"""
import os, runpy, sys
_WORK = os.path.realpath(sys.argv[1])
_ALLOW_READ_DEV = ("/dev/null", "/dev/urandom")


def _inside(path):
    try:
        p = os.path.realpath(os.fsdecode(path))
    except Exception:
        return False
    return p == _WORK or p.startswith(_WORK + os.sep) or p in _ALLOW_READ_DEV


def _hook(event, args):
    if event == "open":
        path, mode, flags = args
        if isinstance(path, int) or path is None:
            return
        writing = (mode is not None and any(c in str(mode) for c in "wax+")) or (
            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))
        if writing and not _inside(path):
            raise PermissionError(f"sandbox: writing outside the work dir is not allowed: {path}")
    elif event in ("os.remove", "os.rmdir", "os.mkdir", "os.truncate", "os.chmod", "os.symlink",
                   "os.link", "shutil.rmtree", "os.chown", "os.utime"):
        if args and not _inside(args[0]):
            raise PermissionError(f"sandbox: {event} outside the work dir is not allowed")
    elif event in ("os.rename", "shutil.move", "shutil.copyfile"):
        if not all(_inside(a) for a in args[:2]):
            raise PermissionError(f"sandbox: {event} outside the work dir is not allowed")
    elif event.startswith("socket.") and event not in ("socket.__new__",):
        raise PermissionError(f"sandbox: network access is not allowed ({event})")
    elif event == "socket.__new__":
        family = args[1] if len(args) > 1 else None
        if family not in (1,):  # AF_UNIX only
            raise PermissionError("sandbox: network sockets are not allowed")
    elif event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.fork",
                   "os.forkpty", "os.spawn", "pty.spawn", "os.kill", "os.killpg"):
        raise PermissionError(f"sandbox: {event} is not allowed")


sys.addaudithook(_hook)
sys.argv = [os.path.join(_WORK, "program.py")]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _parse_result(stdout: str) -> tuple[str, float | None] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_TAG + " "):
            try:
                rec = json.loads(line[len(RESULT_TAG) + 1 :])
                obj = rec.get("objective")
                return str(rec["status"]), (None if obj is None else float(obj))
            except (ValueError, KeyError, TypeError):
                return None
    return None


def run_sandboxed(
    code: str,
    timeout_s: float = 120,
    mem_mb: int = 4096,
    workdir: str | Path | None = None,
    fsize_mb: int = 64,
    isolation: str = "bwrap",
) -> ExecResult:
    """Run a generated program in the sandbox of :func:`common.sandbox.run_isolated`.

    The program runs under bubblewrap (no network, read-only root, only its temporary folder
    writable, an empty environment, every process killed at the timeout), behind an audit hook
    that also refuses writes, sockets and subprocesses at the Python level.

    Args:
        code: The full program (from :func:`assemble_program` or a debug answer).
        timeout_s: Wall-clock limit; on expiry every process of the run is killed, status ``error``.
        mem_mb: Address-space limit (``RLIMIT_AS``) in MiB.
        workdir: Parent for the temporary working directory (default: system temp).
        fsize_mb: Largest file the program may write.
        isolation: ``"bwrap"`` (refuses where bubblewrap cannot run) or
            ``common.sandbox.UNSAFE``, named explicitly, to run without namespaces.

    Returns:
        An :class:`ExecResult`; never raises for anything the program does.

    Raises:
        common.sandbox.SandboxUnavailableError: no isolation here and the unsafe mode not named.
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be str, got {type(code).__name__}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
    if not isinstance(mem_mb, int) or mem_mb < 64:
        raise ValueError(f"mem_mb must be an int >= 64, got {mem_mb!r}")
    with tempfile.TemporaryDirectory(prefix="sacopt_", dir=workdir) as tmp:
        tmp = os.path.realpath(tmp)
        Path(tmp, "program.py").write_text(code)
        Path(tmp, "_boot.py").write_text(textwrap.dedent(_BOOT))
        res = run_isolated(
            [sys.executable, "-I", "-B", os.path.join(tmp, "_boot.py"), tmp],
            tmp,
            timeout_s=timeout_s,
            mem_mb=mem_mb,
            fsize_mb=fsize_mb,
            isolation=isolation,
        )
    out, err, runtime = res.stdout, res.stderr, res.wall_s
    if res.timed_out:
        return ExecResult(
            "error",
            None,
            out,
            err + f"\nTimeoutError: killed after {timeout_s}s",
            res.returncode,
            runtime,
            timed_out=True,
        )
    parsed = _parse_result(out) if res.returncode == 0 else None
    if parsed is None:
        if res.returncode == 0:
            err += f"\nno '{RESULT_TAG}' line was printed"
        return ExecResult("error", None, out, err, res.returncode, runtime)
    status, obj = parsed
    return ExecResult(status, obj if status == "optimal" else None, out, err, 0, runtime)
