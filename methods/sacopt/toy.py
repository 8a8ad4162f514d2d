"""SAC-Opt's CPU toy experiment, the ``toy`` stage: ``icml26 experiment=sacopt_toy``.

Arms on the same 200 synthetic LPs and the same simulated-coder draws: one-pass generation,
solver-debug only, SAC-Opt with the judge stand-in, SAC-Opt with the MiniLM similarity verifier
(tau = 0.75), and SAC-Opt with the judge but without freezing verified anchors (ablation). A second
table measures each verifier's detection rate per injected error type.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from common.config import Run
from common.threads import torch_threads
from common.tracking import write_results
from methods.sacopt.backend import ExecResult, assemble_program, run_sandboxed
from methods.sacopt.debug import debug_loop
from methods.sacopt.loop import SACOptLoop
from methods.sacopt.pipeline import TOY_ARMS, SACOptConfig, is_correct
from methods.sacopt.toy_world import (
    ERROR_TYPES,
    FakeCoder,
    FakeDebugger,
    StructuralJudge,
    inject_error,
    make_toy_problem,
    render_fragment,
)
from methods.sacopt.verify import EmbeddingVerifier

logger = logging.getLogger(__name__)


class _MemoRunner:
    """Run each distinct program once (arms share most programs); thread-safe."""

    def __init__(self, cfg: SACOptConfig) -> None:
        self.cfg = cfg
        self.cache: dict[str, ExecResult] = {}
        self.lock = threading.Lock()
        self.n_runs = 0

    def __call__(self, code: str) -> ExecResult:
        with self.lock:
            hit = self.cache.get(code)
        if hit is not None:
            return hit
        res = run_sandboxed(code, timeout_s=self.cfg.timeout_s, mem_mb=self.cfg.mem_mb)
        with self.lock:
            self.cache[code] = res
            self.n_runs += 1
        return res


def run_arm(arm: str, pid: int, cfg: SACOptConfig, seed: int, runner, minilm) -> dict[str, Any]:
    """One arm on one toy problem; returns its record."""
    prob = make_toy_problem(seed * 100_003 + pid)
    coder = FakeCoder(prob, cfg.p_err, cfg.p_syntax, seed=seed * 7919 + pid)
    if arm in ("single_pass", "debug_only"):
        loop = SACOptLoop(coder, StructuralJudge(), t_max=0)
    elif arm == "sacopt_minilm":
        loop = SACOptLoop(coder, minilm, cfg.t_max, cfg.verify_objective)
    else:
        judge = StructuralJudge(cfg.judge_false_pass, cfg.judge_false_fail, seed=seed * 31 + pid)
        loop = SACOptLoop(
            coder,
            judge,
            cfg.t_max,
            cfg.verify_objective,
            freeze_verified=arm != "sacopt_judge_nofreeze",
        )
    state, trace = loop.run(prob.state)
    code = assemble_program(state, cfg.backend)
    tries = 0 if arm == "single_pass" else cfg.debug_tries
    _, res, dbg = debug_loop(FakeDebugger(coder, state), state.description, code, tries, runner)
    n_wrong = sum(a.meta.get("error") is not None for a in state.anchors())
    return {
        "correct": res.status == "optimal"
        and is_correct(res.objective, prob.optimum, cfg.rtol, cfg.atol),
        "correct_1e-2": res.status == "optimal"
        and is_correct(res.objective, prob.optimum, 1e-2, cfg.atol),
        "exec_error": res.status == "error",
        "silent_wrong": res.status != "error"
        and not is_correct(res.objective, prob.optimum, cfg.rtol, cfg.atol),
        "wrong_fragments": n_wrong,
        "llm_calls": trace.n_llm_calls + dbg.n_repairs,
        "rounds": len(trace.rounds),
        "regenerated": trace.n_regenerated,
        "initial_errors": sum(coder.injected.values()) if arm == "single_pass" else None,
    }


def detection_rates(cfg: SACOptConfig, seed: int, minilm, n: int) -> dict[str, dict[str, float]]:
    """Per error type, the fraction of wrong fragments each verifier flags (and false alarms)."""
    rng = random.Random(seed)
    judge = StructuralJudge(cfg.judge_false_pass, cfg.judge_false_fail, seed=seed)
    pairs: dict[str, list[tuple[str, str]]] = {k: [] for k in ("correct", *ERROR_TYPES)}
    for pid in range(n):
        prob = make_toy_problem(seed * 100_003 + pid)
        coder = FakeCoder(prob, 0.0, 0.0)
        for a in prob.state.anchors():
            truth = a.meta["truth"]
            a.code = render_fragment(truth)
            pairs["correct"].append((a.text, coder.reconstruct(prob.state, a)))
            for kind in ERROR_TYPES:
                bad = inject_error(truth, kind, rng, prob)
                if bad is not None:
                    a.code = render_fragment(bad)
                    pairs[kind].append((a.text, coder.reconstruct(prob.state, a)))
    out: dict[str, dict[str, float]] = {}
    for name, verifier in (("judge", judge), ("minilm", minilm)):
        row = {}
        for kind, ps in pairs.items():
            if isinstance(verifier, EmbeddingVerifier):
                passed = verifier.batch([a for a, _ in ps], [b for _, b in ps])
                sims = verifier.similarity([a for a, _ in ps], [b for _, b in ps])
                row[f"mean_cos_{kind}"] = float(np.mean(sims))
            else:
                passed = [verifier(a, b) for a, b in ps]
            flagged = 1.0 - float(np.mean(passed))
            row["false_alarm" if kind == "correct" else f"detect_{kind}"] = flagged
        out[f"verifier_{name}"] = row
    return out


def run_toy(
    cfg: SACOptConfig, seed: int = 0, run_dir: str | Path | None = None
) -> dict[str, dict[str, float]]:
    """All arms on ``cfg.n_problems`` toy LPs; returns ``{arm: {metric: value}}``."""
    if cfg.n_problems < 1:
        raise ValueError(f"n_problems must be >= 1, got {cfg.n_problems}")
    t0 = time.monotonic()
    arms = [a for a in TOY_ARMS if a in cfg.arms]
    need_minilm = "sacopt_minilm" in arms or cfg.detection_problems > 0
    minilm = EmbeddingVerifier(tau=cfg.tau) if need_minilm else None
    if minilm is not None:
        minilm("warm up", "warm up text")  # load the model once, before the threads start
    runner = _MemoRunner(cfg)
    tasks = [(arm, pid) for pid in range(cfg.n_problems) for arm in arms]
    with ThreadPoolExecutor(max_workers=cfg.toy_workers) as pool:
        recs = list(
            pool.map(lambda t: (t[0], run_arm(t[0], t[1], cfg, seed, runner, minilm)), tasks)
        )
    metrics: dict[str, dict[str, float]] = {}
    for arm in arms:
        rs = [r for a, r in recs if a == arm]
        metrics[arm] = {
            "accuracy": float(np.mean([r["correct"] for r in rs])),
            "accuracy_1e-2": float(np.mean([r["correct_1e-2"] for r in rs])),
            "exec_error_rate": float(np.mean([r["exec_error"] for r in rs])),
            "silent_wrong_rate": float(np.mean([r["silent_wrong"] for r in rs])),
            "mean_llm_calls": float(np.mean([r["llm_calls"] for r in rs])),
            "mean_rounds": float(np.mean([r["rounds"] for r in rs])),
            "mean_regenerated": float(np.mean([r["regenerated"] for r in rs])),
        }
    if cfg.detection_problems > 0:
        metrics.update(detection_rates(cfg, seed, minilm, cfg.detection_problems))
    metrics["run"] = {
        "n_problems": float(cfg.n_problems),
        "n_sandbox_runs": float(runner.n_runs),
        "seconds": time.monotonic() - t0,
    }
    return metrics


@torch_threads(1)  # tiny matmuls: extra OpenMP threads only spin on a busy machine
def toy_stage(run: Run) -> dict[str, float]:
    """The ``toy`` stage: every arm on the toy LPs; results.json / results.md in ``run.run_dir``."""
    metrics = run_toy(run.method, seed=run.seed, run_dir=run.run_dir)
    return write_results(run.run_dir, "sacopt", metrics, cfg=run.cfg)
