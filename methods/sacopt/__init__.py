"""SAC-Opt: Semantic Anchors for Iterative Correction in Optimization Modeling.

Zhang, Kang, Chen, Wang, Han, Zhong, Yuan, Ma — ICML 2026, arXiv 2510.05115
(official code: github.com/Forrest-Stone/SAC-Opt).

Idea: extract one natural-language *semantic anchor* per constraint (and the objective), generate
a code fragment per anchor, back-translate each fragment into words, compare with the anchor, and
regenerate only the fragments that disagree — fixing silent modelling errors a solver never sees.
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from methods.sacopt.backend import ExecResult, assemble_program, run_sandboxed
    from methods.sacopt.codegen import LLMCoder, generate_fragment, reconstruct, static_check
    from methods.sacopt.data import (
        CLEAN_BENCHMARKS,
        ORProblem,
        load_clean_benchmark,
        write_problem_dirs,
    )
    from methods.sacopt.debug import debug_loop
    from methods.sacopt.extract import (
        ExtractionError,
        constraint_check,
        extract_constraints,
        extract_objective,
        extract_parameters,
        extract_state,
        extract_variables,
        redundancy_pass,
        self_check,
    )
    from methods.sacopt.loop import LoopTrace, SACOptLoop
    from methods.sacopt.paper import format_paper_table, load_problems, run_benchmark
    from methods.sacopt.parsing import (
        parse_code_block,
        parse_delimited_block,
        parse_json_from_end,
        parse_list_from_end,
        parse_score,
    )
    from methods.sacopt.pipeline import SACOptConfig, is_correct, solve_problem
    from methods.sacopt.schema import (
        Anchor,
        Parameter,
        ProblemState,
        Variable,
        shape_string_to_list,
        validate_state,
    )
    from methods.sacopt.verify import EmbeddingVerifier, LLMJudgeVerifier, Verifier

__all__ = [
    "CLEAN_BENCHMARKS",
    "Anchor",
    "EmbeddingVerifier",
    "ExecResult",
    "ExtractionError",
    "LLMCoder",
    "LLMJudgeVerifier",
    "LoopTrace",
    "ORProblem",
    "Parameter",
    "ProblemState",
    "SACOptConfig",
    "SACOptLoop",
    "Variable",
    "Verifier",
    "assemble_program",
    "constraint_check",
    "debug_loop",
    "extract_constraints",
    "extract_objective",
    "extract_parameters",
    "extract_state",
    "extract_variables",
    "format_paper_table",
    "generate_fragment",
    "is_correct",
    "load_clean_benchmark",
    "load_problems",
    "parse_code_block",
    "parse_delimited_block",
    "parse_json_from_end",
    "parse_list_from_end",
    "parse_score",
    "reconstruct",
    "redundancy_pass",
    "run_benchmark",
    "run_sandboxed",
    "self_check",
    "shape_string_to_list",
    "solve_problem",
    "static_check",
    "validate_state",
    "write_problem_dirs",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
