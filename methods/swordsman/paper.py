"""The paper stage of Swordsman: accuracy and TPS / latency / NFE of ``model`` (the paper's main table,
Table 2, as reproduced in the authors' ``rebuttal.md`` Table 5).

``engine="lm_eval"`` runs lm-evaluation-harness on ``method.eval.tasks`` with the few-shot counts of
the official ``llada/test.sh`` (batch 1, greedy, G = 512), once with Swordsman and once with the
Fast-dLLM baseline, and writes one JSON per (task, decoder) beside ``results.json``.
``engine="local"`` decodes the sets of ``benchmark`` (``format: math``) here, 0-shot, and scores the
last number of the answer against the reference; it exists so the stage can be checked on a CPU.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from typing import Any

from common.config import model_id
from common.tracking import write_results
from methods.swordsman.config import SwordsmanRunConfig
from methods.swordsman.eval_harness import (
    SwordsmanHarnessLM,
    generate_text,
    register_lm_eval,
    summarize,
)

logger = logging.getLogger(__name__)

_NUMBER = re.compile(r"-?\d[\d,]*\.?\d*")


def _last_number(text: str) -> str | None:
    """Answer of the local engine: the last number of the text (our inference, deviations table
    "local engine"; the paper scores with lm-evaluation-harness)."""
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "").rstrip(".") if found else None


def _decoders(rc: SwordsmanRunConfig) -> dict[str, tuple[str | None, dict[str, Any]]]:
    """Arm -> (baseline, decoder fields): Swordsman and, optionally, Fast-dLLM (official comparison)."""
    arms = {"swordsman": (None, dataclasses.asdict(rc.decoder))}
    if rc.eval.baseline:
        fixed = dataclasses.asdict(rc.decoder) | {
            "max_block_len": rc.eval.baseline_block_len,
            "tau_max": rc.eval.baseline_tau,
        }
        arms["fast_dllm"] = ("fixed", fixed)
    return arms


def _local(run, spec: str, dtype: str) -> tuple[dict, dict]:
    from common.tasks.math_sets import load_math_set
    from methods.swordsman.config import SwordsmanConfig

    rc: SwordsmanRunConfig = run.method
    if run.benchmark is None or not run.benchmark.sets:
        raise ValueError("method.eval.engine=local needs benchmark=<suite> (configs/benchmark/)")
    adapter, tok, chat, bos = SwordsmanHarnessLM.load(spec, rc.eval.family, dtype)
    chat = chat and run.model.chat_template
    metrics, extra = {}, {}
    for name, set_spec in run.benchmark.sets.items():
        if rc.eval.limit is not None:
            set_spec = dataclasses.replace(set_spec, limit=rc.eval.limit)
        data = load_math_set(set_spec)
        for arm, (baseline, fields) in _decoders(rc).items():
            cfg = SwordsmanConfig(**fields)
            stats, correct = [], 0
            for problem, answer in zip(data["problem"], data["answer"], strict=True):
                out = generate_text(adapter, tok, problem, cfg, None, chat, bos, baseline)
                stats.append(out)
                correct += _last_number(out["text"]) == _last_number(str(answer))
            metrics[f"{arm}_{name}"] = {"accuracy": correct / len(data), **summarize(stats)}
        extra[name] = {"n": len(data)}
    return metrics, extra


def _lm_eval(run, spec: str, dtype: str) -> tuple[dict, dict]:
    rc: SwordsmanRunConfig = run.method
    cls = register_lm_eval()  # ImportError with the install hint when lm-eval is missing
    import lm_eval

    metrics, extra = {}, {}
    for arm, (baseline, fields) in _decoders(rc).items():
        lm = cls(spec, family=rc.eval.family, baseline=baseline, dtype=dtype, **fields)
        for task, shots in rc.eval.tasks.items():
            res = lm_eval.simple_evaluate(
                model=lm,
                tasks=[task],
                num_fewshot=shots,
                batch_size=1,  # official: adaptive decoding is batch 1
                limit=rc.eval.limit,
                confirm_run_unsafe_code=True,
            )
            if res is None:  # non-zero ranks get no results under data parallel
                continue
            scores = {
                k.split(",")[0]: float(v)
                for k, v in res["results"][task].items()
                if isinstance(v, int | float) and "stderr" not in k
            }
            metrics[f"{arm}_{task}"] = scores | lm.throughput()
            out = run.run_dir / f"{task}_{arm}_{rc.decoder.cache}.json"
            out.write_text(
                json.dumps({"results": res["results"], "throughput": lm.throughput()}, default=str)
            )
            extra[f"{arm}_{task}"] = str(out)
    return metrics, extra


def paper_stage(run) -> dict[str, float]:
    """``stage=paper``: Swordsman and Fast-dLLM on ``model`` (see the module docstring)."""
    rc: SwordsmanRunConfig = run.method
    t0 = time.time()
    spec = model_id(run.model)
    dtype = "bfloat16" if run.model.dtype == "auto" else run.model.dtype
    metrics, extra = (_local if rc.eval.engine == "local" else _lm_eval)(run, spec, dtype)
    return write_results(
        run.run_dir,
        "swordsman",
        metrics,
        cfg=run.cfg,
        extra={"files": extra},
        wall_time_s=time.time() - t0,
        notes=f"model {spec}, engine {rc.eval.engine}, cache {rc.decoder.cache}, G = {rc.decoder.gen_length}",
    )
