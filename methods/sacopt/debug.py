"""Solver-error debugging, the final step after the semantic loop (official ``execute_code.py``).

The official program prints ``model.objVal`` unconditionally, so a model that is infeasible or
unbounded crashes and goes to the debugger like any other error; ``debug_statuses`` reproduces that by
default and can be narrowed to ``("error",)`` (crashes only).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from common.llm import ChatLLM
from methods.sacopt import prompts
from methods.sacopt.backend import ExecResult, run_sandboxed
from methods.sacopt.parsing import parse_code_block

logger = logging.getLogger(__name__)

__all__ = ["DEBUG_STATUSES", "DebugRecord", "debug_loop"]

# statuses sent to the debugger by default: every non-optimal outcome, as in the official code
DEBUG_STATUSES: tuple[str, ...] = ("error", "infeasible", "unbounded", "infeasible_or_unbounded")


@dataclass
class DebugRecord:
    """What the debug loop did: one stderr tail per failed run, and the number of LLM repairs."""

    errors: list[str] = field(default_factory=list)
    n_repairs: int = 0


def debug_loop(
    llm: ChatLLM,
    description: str,
    code: str,
    tries: int = 3,
    run: Callable[[str], ExecResult] | None = None,
    debug_statuses: tuple[str, ...] = DEBUG_STATUSES,
) -> tuple[str, ExecResult, DebugRecord]:
    """Run the program; while its status is in ``debug_statuses``, ask the LLM for a full corrected
    program, up to ``tries`` times (official ``execute_and_debug``, ``max_tries=3``).

    By default crashes and infeasible / unbounded models are debugged (the official program crashes on
    them); ``debug_statuses=("error",)`` debugs crashes only. The reply's code is read from its
    ``=====`` block or, failing that, its ```` ```python ```` fence. Every error text is recorded.

    Args:
        llm: The chat model doing the repair.
        description: Problem text shown to the model.
        code: Program to run.
        tries: Repair attempts (>= 0).
        run: Executor (default :func:`run_sandboxed` with its defaults).
        debug_statuses: statuses that trigger a repair (``"error"`` must be among them).

    Returns:
        ``(final_code, last_result, record)``.
    """
    if not isinstance(tries, int) or tries < 0:
        raise ValueError(f"tries must be an int >= 0, got {tries!r}")
    if "error" not in debug_statuses:
        raise ValueError(f"debug_statuses must include 'error', got {debug_statuses!r}")
    run = run or run_sandboxed
    record = DebugRecord()
    result = run(code)
    for _ in range(tries):
        if result.status not in debug_statuses:
            break
        err = _error_text(result)
        record.errors.append(err[-2000:])
        reply = llm.chat(prompts.messages(prompts.debug_prompt(description, code, err)))
        record.n_repairs += 1
        fixed = parse_code_block(reply)
        if fixed:
            code = fixed
        else:
            logger.warning("debug answer had no ===== block; rerunning the previous program")
        result = run(code)
    if result.status in debug_statuses:
        record.errors.append(_error_text(result)[-2000:])
    return code, result, record


def _error_text(result: ExecResult) -> str:
    if result.status == "error":
        return result.stderr
    # a solved-but-not-optimal model: tell the debugger what the solver said
    return (
        f"The solver finished with status '{result.status}': no optimal solution.\n{result.stderr}"
    )
