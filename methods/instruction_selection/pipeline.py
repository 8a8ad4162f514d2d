"""The selection pipeline shared by the toy and the paper stages: the selector functions of the
run config and the similarity matrix of each representation (RDS+, EMBED, LESS with its LoRA warm-up).
"""

from __future__ import annotations

import copy
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .less import LESSFeaturizer, less_warmup
from .representations import RDSPlus, SentenceEmbed
from .selectors import doubly_greedy, knn_uniform, round_robin, uot
from .similarity import cosine_matrix
from .training import less_warmup_trainer

__all__ = ["selector_fns", "similarities"]

logger = logging.getLogger(__name__)


def selector_fns(cfg: Any) -> dict:
    """``{selector name: fn(S, B) -> ordering}`` with the run config's settings.

    Engineering: the paper's selectors and baselines by name."""
    reg_m = (float(cfg.uot_reg_m[0]), float(cfg.uot_reg_m[1]))
    return {
        "rr": round_robin,
        "dg": lambda S, B: doubly_greedy(S, B, tie_break=cfg.tie_break),
        "uot": lambda S, B: uot(S, B, eps=cfg.uot_eps, reg_m=reg_m, tie_break=cfg.tie_break),
        "knn_uniform": lambda S, B: knn_uniform(
            S, B, L=cfg.knn_L, alpha=cfg.knn_alpha, C=cfg.knn_C, fill="max_sim"
        ),
    }


def _attach_lora(model, cfg: Any, seed: int):
    from peft import LoraConfig, get_peft_model

    targets = cfg.lora_targets[0] if cfg.lora_targets == ["all-linear"] else list(cfg.lora_targets)
    from transformers.pytorch_utils import Conv1D

    lcfg = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
        # GPT-2's Conv1D stores weights [in, out]: say so (peft would switch it on with a warning)
        fan_in_fan_out=any(isinstance(m, Conv1D) for m in model.modules()),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_peft_model(model, lcfg)


def similarities(
    cfg, base, tok, pool, queries, seed, warm_rows=None, out_dir=None, warmup_args=None
) -> dict[str, np.ndarray]:
    """``{representation: S [M, N]}`` for every requested representation.

    LESS warms up on ``warm_rows`` (paper: the 10K warm-up set) or, when None, on ``warmup_n``
    random pool rows (toy); with ``cfg.warmup_trainer`` through HF ``Trainer`` in ``out_dir``
    (``warmup_args``: the ``TrainingArguments`` built from the ``warmup`` node; None: the toy's
    ``warmup_epochs`` / ``warmup_lr`` with the official batch 1 x 128 and 3 % warm-up).
    """
    out = {}
    for rep in cfg.representations:
        t0 = time.time()
        if rep == "rds":
            enc = RDSPlus(base, tok, batch_size=16, max_length=cfg.max_length)
            out[rep] = cosine_matrix(enc.encode_queries(queries), enc.encode_pool(pool))
        elif rep == "embed":
            enc = SentenceEmbed(cfg.embed_path or cfg.embed_model)
            out[rep] = cosine_matrix(enc.encode_queries(queries), enc.encode_pool(pool))
        else:
            model = _attach_lora(copy.deepcopy(base), cfg, seed)
            rng = np.random.default_rng(seed + 1)
            warm = [
                pool[i] for i in rng.choice(len(pool), min(cfg.warmup_n, len(pool)), replace=False)
            ]
            if warm_rows is not None:
                warm = list(warm_rows)
            if cfg.warmup_trainer:
                ckpts = less_warmup_trainer(
                    model,
                    tok,
                    warm,
                    str(Path(out_dir or tempfile.mkdtemp(prefix="less_warmup_")) / "warmup"),
                    epochs=cfg.warmup_epochs,
                    lr=cfg.warmup_lr,
                    seed=seed,
                    max_length=cfg.max_length,
                    args=warmup_args,
                )
            else:
                ckpts = less_warmup(
                    model,
                    tok,
                    warm,
                    cfg.warmup_epochs,
                    cfg.warmup_lr,
                    cfg.warmup_batch,
                    seed,
                    cfg.max_length,
                )
            less = LESSFeaturizer(
                model,
                tok,
                ckpts,
                cfg.proj_dim,
                cfg.proj_seed,
                cfg.max_length,
                grad_mode=cfg.less_grad_mode,
                add_special_tokens=cfg.less_add_special_tokens,
                feature_dtype=cfg.less_feature_dtype,
            )
            out[rep] = less.similarity(less.encode_queries(queries), less.encode_pool(pool))
        logger.info("representation %s: S %s in %.1f s", rep, out[rep].shape, time.time() - t0)
    return out
