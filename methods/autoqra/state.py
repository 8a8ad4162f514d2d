"""Checkpoint state of an AutoQRA search (our library design; not in the paper or the official code).

The official runner caches evaluation results by the SHA-1 of ``{q, r}`` plus the fidelity
(``evaluation/real_task.py``) but neither binds a folder to its settings nor caches Stage 2. Here:

* :class:`EvaluationCache`: every finished evaluation of both stages, keyed ``"<cfg key>:<fidelity>"``
  (Stage 1) or ``"bo:<cfg key>:high"`` (Stage 2), written atomically after each one, so a ``kill -9``
  loses at most the evaluation in flight and a resume repeats none. Counts come from the keys, so they
  are exact across any number of resumes.
* :func:`search_settings`: the flat settings a checkpoint folder is bound to (``common.checkpoint.
  check_settings``): Stage 1 knobs, budget, the Q/R/L space, the memory model, the priors, the seed,
  the evaluator's identity and settings and (for both stages) α, the BO iterations and k. A resume with
  any of them changed is refused with a message naming the key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from common.checkpoint import atomic_write_json, plain

from .evaluators import EvalResult, check_result
from .importance import Importance
from .memory import MemoryModel
from .space import QRConfig, SearchSpace

BO_PREFIX = "bo:"


class EvaluationCache:
    """Finished evaluations keyed by configuration and fidelity (JSON file, rewritten atomically).

    Source: official ``evaluation/real_task.py`` caches by config key and fidelity; covering Stage 2
    and the atomic file are our engineering.

    Args:
        path: the cache file (``None``: in memory only). An existing file is loaded.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        self.entries: dict[str, dict] = {}
        if self.path is not None and self.path.exists():
            self.entries = json.loads(self.path.read_text())

    def evaluate(self, evaluator, cfg: QRConfig, fidelity: str, prefix: str = "") -> EvalResult:
        """The cached result of ``(cfg, fidelity)``, or ``evaluator.evaluate`` saved before returning.

        Source: official ``evaluation/real_task.py`` (results cached by config key and fidelity);
        the file format is engineering.
        """
        key = f"{prefix}{cfg.key()}:{fidelity}"
        if key in self.entries:
            return EvalResult(**self.entries[key])
        res = check_result(evaluator.evaluate(cfg, fidelity), cfg, fidelity)
        self.entries[key] = asdict(res)
        if self.path is not None:
            atomic_write_json(self.path, self.entries)
        return res

    def counts(self, prefix: str = "") -> dict[str, int]:
        """Evaluations run per fidelity under ``prefix`` ("" = Stage 1, ``BO_PREFIX`` = Stage 2).

        Source: engineering, not in the paper.
        """
        out: dict[str, int] = {}
        for key in self.entries:
            stage = BO_PREFIX if key.startswith(BO_PREFIX) else ""
            if stage == prefix:
                fid = key.rsplit(":", 1)[1]
                out[fid] = out.get(fid, 0) + 1
        return out


def array_digest(*arrays: Any) -> str:
    """sha256 of the bytes of tensors / arrays (shape and dtype included): a data or weight identity.

    Source: engineering, not in the paper.
    """
    h = hashlib.sha256()
    for a in arrays:
        if hasattr(a, "detach"):  # a torch tensor; bf16 has no numpy dtype, fp32 holds it exactly
            t = a.detach().cpu().contiguous()
            a = (t.float() if str(t.dtype) == "torch.bfloat16" else t).numpy()
        a = np.ascontiguousarray(np.asarray(a))
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def evaluator_settings(evaluator) -> dict:
    """The evaluator's identity: its class and, where it defines one, its ``settings()`` dict.

    Source: engineering, not in the paper.

    A wrapper that should be transparent (a logger, a test's killer) returns ``{"class": ...}`` of the
    wrapped evaluator from ``settings()``. Without ``settings()`` only the class is compared.
    """
    cls = type(evaluator)
    out: dict[str, Any] = {"class": f"{cls.__module__}.{cls.__qualname__}"}
    if hasattr(evaluator, "settings"):
        out.update(evaluator.settings())
    return plain(out)


def _flatten(d: dict, prefix: str = "") -> dict:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def search_settings(
    space: SearchSpace,
    memory: MemoryModel,
    importance: Importance,
    evaluator,
    budget: float,
    evo,
    seed: int,
    **stage2: Any,
) -> dict[str, Any]:
    """The flat ``{key: value}`` settings a checkpoint folder is bound to (dotted keys for nesting).

    Source: engineering, not in the paper.

    ``stage2`` holds the Stage 2 knobs (``alpha``, ``bo_iters``, ``k_bo``, ``eps_ei``) when both stages
    share the folder.
    """
    settings = {
        "evolution": plain(evo),
        "budget": float(budget),
        "space": {"Q": list(space.Q), "R": list(space.R), "L": space.num_layers},
        "memory": {
            "layer_params": memory.layer_params.tolist(),
            "lora_params_per_rank": memory.lora_params_per_rank.tolist(),
            "layer_groups": memory.layer_groups.tolist(),
            "lora_bits": memory.lora_bits,
            "group_size": memory.group_size,
            "meta_bits": memory.meta_bits,
        },
        "importance": {
            "raw_q": importance.raw_q.tolist(),
            "raw_r": importance.raw_r.tolist(),
            "w_q": importance.w_q,
            "w_r": importance.w_r,
        },
        "seed": int(seed),
        "evaluator": evaluator_settings(evaluator),
        **plain(stage2),
    }
    return _flatten(plain(settings))
