"""Solver-error debugging, the final step after the semantic loop (spec §3.2 lines 17-20)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from common.llm import ChatLLM
from methods.sacopt import prompts
from methods.sacopt.backend import ExecResult, run_sandboxed
from methods.sacopt.parsing import parse_delimited_block

logger = logging.getLogger(__name__)

__all__ = ["DebugRecord", "debug_loop"]


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
) -> tuple[str, ExecResult, DebugRecord]:
    """Run the program; on a crash, ask the LLM for a full corrected program, up to ``tries`` times.

    Only crashes (``status == "error"``) are debugged; a program that runs but is infeasible or
    unbounded is returned as is (the solver found nothing to fix). Every stderr is recorded.

    Args:
        llm: The chat model doing the repair.
        description: Problem text shown to the model.
        code: Program to run.
        tries: Repair attempts (>= 0).
        run: Executor (default :func:`run_sandboxed` with its defaults).

    Returns:
        ``(final_code, last_result, record)``.
    """
    if not isinstance(tries, int) or tries < 0:
        raise ValueError(f"tries must be an int >= 0, got {tries!r}")
    run = run or run_sandboxed
    record = DebugRecord()
    result = run(code)
    for _ in range(tries):
        if result.ok:
            break
        record.errors.append(result.stderr[-2000:])
        reply = llm.chat(prompts.messages(prompts.debug_prompt(description, code, result.stderr)))
        record.n_repairs += 1
        fixed = parse_delimited_block(reply)
        if fixed:
            code = fixed
        else:
            logger.warning("debug answer had no ===== block; rerunning the previous program")
        result = run(code)
    if not result.ok:
        record.errors.append(result.stderr[-2000:])
    return code, result, record
