"""The end-to-end SAC-Opt pipeline on one problem and the answer check (official run.py).

:func:`solve_problem` chains the paper's stages (paper abstract, arXiv 2510.05115; the order of
the official code ``run.py``): structured extraction, the semantic-anchor correction loop
(:class:`~methods.sacopt.loop.SACOptLoop`), assembly ``M = M_simp + M_sem``, execution and the
final solver-error debugging (:func:`~methods.sacopt.debug.debug_loop`).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from common.llm import ChatLLM
from methods.sacopt.backend import assemble_program, run_sandboxed
from methods.sacopt.codegen import LLMCoder
from methods.sacopt.config import TOY_ARMS, SACOptRunConfig
from methods.sacopt.debug import debug_loop
from methods.sacopt.loop import SACOptLoop
from methods.sacopt.schema import ProblemState, validate_state
from methods.sacopt.verify import EmbeddingVerifier, LLMJudgeVerifier

logger = logging.getLogger(__name__)

# the run config is the method-level settings dataclass (methods/sacopt/config.py, light)
SACOptConfig = SACOptRunConfig

__all__ = ["TOY_ARMS", "SACOptConfig", "is_correct", "solve_problem"]


def is_correct(pred: Any, gt: Any, rtol: float = 1e-4, atol: float = 1e-6) -> bool:
    """``|pred - gt| <= max(atol, rtol * |gt|)`` (official model2data.py / run.py; tolerance: our
    inference, the paper states none).

    ``None``, NaN, inf or non-numeric values are never correct; ``gt == 0`` falls back to ``atol``.
    """
    try:
        p, g = float(pred), float(gt)
    except (TypeError, ValueError):
        return False
    if not (math.isfinite(p) and math.isfinite(g)):
        return False
    return abs(p - g) <= max(atol, rtol * abs(g))


def _extract(
    llm: ChatLLM, description: str, cfg: SACOptConfig, input_data: dict | None, rec: dict
) -> ProblemState | None:
    """Structured extraction (parameters, variables, objective and constraint anchors; official
    code run.py / parameters.py / variables.py / objective.py / constraint.py): the state, or ``None`` with ``rec['stage'/'error']`` set."""
    from methods.sacopt.extract import ExtractionError, extract_state

    try:
        checks: dict[str, int] = {}
        state = extract_state(
            llm,
            description,
            input_data=input_data,
            use_self_check=cfg.self_check,
            use_constraint_check=cfg.constraint_check,
            report=checks,
        )
        rec["extraction_checks"] = checks
        validate_state(state)
    except (ExtractionError, ValueError) as err:
        rec.update(stage="extract", error=str(err))
        return None
    return state


def _choose_backend(state: ProblemState, cfg: SACOptConfig, run) -> tuple[str, str] | None:
    """The program and its backend: gurobipy as configured, HiGHS when gurobipy is missing or
    licence-limited and ``solver_fallback`` allows it (our inference: the paper runs Gurobi), or
    ``None`` when it does not."""
    backend = cfg.backend
    code = assemble_program(state, backend)
    if backend == "gurobipy":
        first = run(code)
        if first.status == "error" and _gurobi_unavailable(first.stderr):
            if not cfg.solver_fallback:
                return None
            logger.warning("gurobipy unavailable or licence-limited; falling back to HiGHS")
            backend = "highspy"
            code = assemble_program(state, backend)
    return backend, code


def solve_problem(
    llm: ChatLLM, description: str, cfg: SACOptConfig, input_data: dict | None = None
) -> dict[str, Any]:
    """The full SAC-Opt pipeline on one description (paper abstract; official code run.py); never raises
    on model output.

    Returns a ``result.json`` record: ``status``, ``objective``, ``n_iters``, ``n_debug``,
    ``n_llm_calls``, ``runtime_s``, ``stage`` (where it stopped if it failed), ``state``.
    """
    t0 = time.monotonic()
    rec: dict[str, Any] = {"status": "error", "objective": None, "n_iters": 0, "n_debug": 0}
    state = _extract(llm, description, cfg, input_data, rec)
    if state is None:
        rec["runtime_s"] = time.monotonic() - t0
        return rec
    verifier = (
        LLMJudgeVerifier(llm, match=cfg.judge_match)
        if cfg.verifier == "llm_judge"
        else EmbeddingVerifier(tau=cfg.tau)
    )
    loop = SACOptLoop(
        LLMCoder(llm, cfg.recon_reference),
        verifier,
        t_max=cfg.t_max,
        verify_objective=cfg.verify_objective,
        freeze_verified=cfg.freeze_verified,
    )
    state, trace = loop.run(state)

    def run(c: str):
        return run_sandboxed(c, timeout_s=cfg.timeout_s, mem_mb=cfg.mem_mb)

    chosen = _choose_backend(state, cfg, run)
    if chosen is None:
        rec.update(
            stage="solver",
            error="gurobipy is not installed or its licence is too small for this model; "
            "set solver_fallback=true (HiGHS) or install a full licence",
            runtime_s=time.monotonic() - t0,
        )
        return rec
    backend, code = chosen
    code, result, dbg = debug_loop(
        llm,
        description,
        code,
        tries=cfg.debug_tries,
        run=run,
        debug_statuses=tuple(cfg.debug_statuses),
    )
    rec.update(
        backend=backend,
        status=result.status,
        objective=result.objective,
        n_iters=len(trace.rounds),
        n_debug=dbg.n_repairs,
        n_static_reject=trace.n_static_reject,
        n_judge_unparsed=getattr(verifier, "n_unparsed", 0),
        n_llm_calls=trace.n_llm_calls + dbg.n_repairs,
        trace=trace.rounds,
        stage="done",
        code=code,
        state=state.to_dict(),
        runtime_s=time.monotonic() - t0,
    )
    return rec


def _gurobi_unavailable(stderr: str) -> bool:
    """gurobipy missing, or the pip licence's size limit hit (error 10010)."""
    markers = ("No module named 'gurobipy'", "size-limited license", "Model too large", "10010")
    return any(m in stderr for m in markers)
