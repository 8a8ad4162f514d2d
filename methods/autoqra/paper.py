"""Paper-scale evaluator and the ``paper`` stage: quantised LoRA fine-tuning on Alpaca, WinoGrande accuracy.

A candidate ``(q, r)`` is scored as in the official real-task mode: quantise every block of the base model
to ``q_ℓ`` bits (HQQ on GPU, or the fake RTN backend on CPU), attach LoRA of rank ``r_ℓ`` (α = 2r, dropout
0.05), fine-tune the LoRA factors on a fraction of the Alpaca data for a fraction of an epoch (the fidelity),
then measure WinoGrande accuracy, 0-shot, by partial scoring: each option is substituted for the blank and
the log-likelihood of the text after the blank is compared (lm-evaluation-harness's ``winogrande`` rule).

The Alpaca and WinoGrande readers are in :mod:`methods.autoqra.paper_data`.

Command (GPU): ``icml26 experiment=autoqra_paper model=qwen3_4b`` (the ``paper`` stage; a local file
through ``method.paper.sft_data.path`` / ``benchmark.sets.winogrande.path``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common.train_loop import train_steps

from .apply import build_quantized_lora_model
from .evaluators import EvalResult
from .importance import Importance, compute_adapt_sensitivity, compute_quant_sensitivity
from .memory import MemoryModel
from .paper_data import (
    alpaca_features,
    alpaca_rows,
    collate,
    dataset_records,
    winogrande_accuracy,
    winogrande_rows,
)
from .space import QRConfig, SearchSpace

logger = logging.getLogger(__name__)


def sft_train(
    model: torch.nn.Module,
    feats: list[dict],
    steps: int,
    batch: int,
    lr: float,
    grad_accum: int = 1,
    pad_id: int = 0,
    seed: int = 0,
) -> float:
    """AdamW on the trainable (LoRA) parameters, ``steps`` optimiser steps of ``grad_accum`` micro-batches
    of ``batch`` rows drawn with replacement (AdamW at torch's default weight decay 0.01; our choice for the
    CPU-scale evaluator), through :func:`common.train_loop.train_steps`; returns the last step's loss (the
    mean over its micro-batches)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters (attach LoRA first)")
    gen = torch.Generator().manual_seed(seed)
    device = params[0].device

    def loss_fn(_micro: int) -> torch.Tensor:
        idx = torch.randint(0, len(feats), (batch,), generator=gen).tolist()
        b = {k: v.to(device) for k, v in collate([feats[i] for i in idx], pad_id).items()}
        return model(**b).loss

    losses = train_steps(
        model,
        loss_fn,
        steps,
        lr=lr,
        weight_decay=0.01,
        accumulation_steps=grad_accum,
        desc="autoqra sft",
    )
    return losses[-1] if losses else float("nan")


@dataclass
class PaperFidelity:
    """One fidelity of the real-task evaluator: data fraction, epochs, evaluation items (None = all)."""

    ratio: float
    epochs: float
    n_eval: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.ratio <= 1.0:
            raise ValueError(f"ratio must be in (0, 1], got {self.ratio}")
        if self.epochs <= 0:
            raise ValueError(f"epochs must be > 0, got {self.epochs}")


# Official real-task mode: low 5% of the data for 0.1 epoch, high 20% for 0.5 epoch (official search/phase2_evolution.py).
PAPER_FIDELITIES = {
    "low": PaperFidelity(0.05, 0.1),
    "high": PaperFidelity(0.2, 0.5),
    "full": PaperFidelity(1.0, 1.0),
}


class PaperEvaluator:
    """Real-task evaluator: quantise + LoRA, Alpaca SFT at the fidelity, ``perf`` = WinoGrande accuracy.

    Args:
        base: full-precision causal LM (Llama/Qwen layout; not modified), on its target device.
        tokenizer: its tokenizer.
        memory: Eq. 1 model (reports ``mem_bytes``).
        train_feats: tokenised Alpaca examples (``alpaca_features``).
        eval_items: WinoGrande items (``load_winogrande``).
        fidelities: ``{"low"|"high"|"full": PaperFidelity}`` (default ``PAPER_FIDELITIES``).
        backend: ``"hqq"`` (GPU, lazy import of ``hqq``) or ``"fake"`` (CPU RTN stand-in).
        group_size: quantisation group size (128 in the repo).
        lr, batch, grad_accum, lora_dropout: SFT settings (repo: 2e-4, 4, 4, 0.05).
        seed: LoRA init and batch-order seed.
    """

    def __init__(
        self,
        base: torch.nn.Module,
        tokenizer: Any,
        memory: MemoryModel,
        train_feats: list[dict],
        eval_items: list[dict],
        fidelities: dict[str, PaperFidelity] | None = None,
        backend: str = "hqq",
        group_size: int = 128,
        lr: float = 2e-4,
        batch: int = 4,
        grad_accum: int = 4,
        lora_dropout: float = 0.05,
        seed: int = 0,
    ) -> None:
        if backend not in ("hqq", "fake"):
            raise ValueError(f"backend must be 'hqq' or 'fake', got {backend!r}")
        if not train_feats or not eval_items:
            raise ValueError("train_feats and eval_items must be non-empty")
        self.base, self.tok, self.memory = base, tokenizer, memory
        self.train_feats, self.eval_items = train_feats, eval_items
        self.fidelities = dict(fidelities or PAPER_FIDELITIES)
        self.backend, self.group_size = backend, group_size
        self.lr, self.batch, self.grad_accum = lr, batch, grad_accum
        self.lora_dropout, self.seed = lora_dropout, seed
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.calls: dict[str, int] = {}

    def settings(self) -> dict:
        """What a checkpoint folder is bound to: the model's name and size, the SFT settings and
        digests of the training and evaluation data (``state.evaluator_settings``)."""
        from .state import array_digest

        ids = [np.asarray(f["input_ids"]) for f in self.train_feats]
        return {
            "model": getattr(self.base.config, "_name_or_path", type(self.base).__name__),
            "n_params": sum(p.numel() for p in self.base.parameters()),
            "fidelities": self.fidelities, "backend": self.backend, "group_size": self.group_size,
            "lr": self.lr, "batch": self.batch, "grad_accum": self.grad_accum,
            "lora_dropout": self.lora_dropout, "seed": self.seed,
            "train": array_digest(*ids),
            "eval": hashlib.sha256(
                json.dumps(self.eval_items, sort_keys=True, default=str).encode()
            ).hexdigest(),
        }  # fmt: skip

    def steps_for(self, fidelity: str) -> tuple[int, int]:
        """(optimiser steps, training examples) of a fidelity: ``ceil(ratio·N·epochs / (batch·accum))``."""
        fid = self.fidelities[fidelity]
        n = max(1, round(fid.ratio * len(self.train_feats)))
        steps = max(1, math.ceil(n * fid.epochs / (self.batch * self.grad_accum)))
        return steps, n

    def evaluate(self, cfg: QRConfig, fidelity: str) -> EvalResult:
        if fidelity not in self.fidelities:
            raise ValueError(f"fidelity must be one of {sorted(self.fidelities)}, got {fidelity!r}")
        t0 = time.perf_counter()
        steps, n = self.steps_for(fidelity)
        torch.manual_seed(self.seed)
        model = build_quantized_lora_model(
            self.base,
            cfg,
            backend=self.backend,
            group_size=self.group_size,
            lora_dropout=self.lora_dropout,
        )
        loss = sft_train(
            model,
            self.train_feats[:n],
            steps,
            self.batch,
            self.lr,
            self.grad_accum,
            self.pad_id,
            self.seed,
        )
        n_eval = self.fidelities[fidelity].n_eval
        acc = winogrande_accuracy(model, self.tok, self.eval_items[:n_eval])
        self.calls[fidelity] = self.calls.get(fidelity, 0) + 1
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        meta = {"acc": acc, "sft_loss": loss, "steps": steps, "n_train": n}
        return EvalResult(acc, self.memory.total_bytes(cfg), time.perf_counter() - t0, meta)


def paper_importance(
    model: torch.nn.Module, feats: list[dict], bits: int, group_size: int, n_batches: int = 8
) -> Importance:
    """``I_q`` (loss increase when one block is quantised to ``bits``) and ``I_r`` (gradient energy) on
    Alpaca batches of 4 (the repo uses WikiText-2 for ``I_q``; any calibration text works)."""
    device = next(model.parameters()).device
    batches = []
    for i in range(0, min(len(feats), 4 * n_batches), 4):
        ids = collate(feats[i : i + 4], 0)["input_ids"].to(device)
        batches.append(ids)
    raw_q = compute_quant_sensitivity(model, batches, bits=bits, group_size=group_size)
    raw_r = compute_adapt_sensitivity(model, batches)
    return Importance(raw_q, raw_r)


def paper_stage(run: Any) -> dict[str, float]:
    """The ``paper`` stage: the AutoQRA search on ``run.model`` with the real-task evaluator (the
    official real-task mode), WinoGrande from ``run.benchmark``; writes the Pareto set, the selection
    and results.json into ``run.run_dir``."""
    from common.config import model_id
    from common.models import load_model, load_tokenizer
    from common.tracking import write_results

    from .search import AutoQRA, EvolutionConfig

    c, p = run.method, run.method.paper
    if run.model is None or run.benchmark is None:
        raise ValueError(
            "the paper stage needs a `model` and a `benchmark` (experiment=autoqra_paper)"
        )
    if len(run.benchmark.sets) != 1:
        raise ValueError(
            f"benchmark must hold one WinoGrande set, got {sorted(run.benchmark.sets)}"
        )
    spec = model_id(run.model)
    # the data first: a bad file or hub set fails before the model loads
    alpaca = alpaca_rows(
        dataset_records(p.sft_data, "method.paper.sft_data", p.n_train), "method.paper.sft_data"
    )
    (wspec,) = run.benchmark.sets.values()
    items = winogrande_rows(dataset_records(wspec, "benchmark", p.n_eval))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = run.model.dtype if device == "cuda" else "float32"
    model = load_model(spec, dtype=dtype, device=device)
    tok = load_tokenizer(spec)
    feats = alpaca_features(alpaca, tok, p.max_len)
    layers = model.config.num_hidden_layers
    space = SearchSpace(Q=tuple(c.Q), R=tuple(c.R), num_layers=layers)
    memory = MemoryModel.from_hf_config(
        model.config, group_size=c.group_size, lora_bits=c.lora_bits, meta_bits=c.meta_bits
    )
    budget = memory.budget_from_reference(c.budget_bits, c.budget_rank, c.budget_slack)
    if p.importance:
        imp = Importance.from_json(p.importance, layers)
    else:
        imp = paper_importance(model, feats, min(c.Q), c.group_size)
    fids = {
        "low": PaperFidelity(p.lf_ratio, p.lf_epochs),
        "high": PaperFidelity(p.hf_ratio, p.hf_epochs),
        "full": PaperFidelity(1.0, 1.0),
    }
    evaluator = PaperEvaluator(
        model, tok, memory, feats, items, fids, backend=p.quant_engine, group_size=c.group_size,
        lr=p.lr, batch=p.batch, grad_accum=p.grad_accumulation, lora_dropout=p.lora_dropout, seed=run.seed,
    )  # fmt: skip
    evo = EvolutionConfig(
        pop=c.pop, gens=c.gens, promote_k=min(c.promote_k, c.pop), k_neighbors=c.k_neighbors,
        gamma=c.gamma, hv_eps=c.hv_eps, hv_window=c.hv_window,
        max_lowbit_fraction=c.max_lowbit_fraction, offspring_ops=tuple(c.offspring_ops),
        surrogate_training=c.surrogate_training, jitter_mode=c.jitter_mode,
        init_promotion=c.init_promotion, hv_include_init=c.hv_include_init,
    )  # fmt: skip
    out_dir = Path(run.run_dir)
    ckpt_dir = Path(c.checkpoint_dir) if c.checkpoint_dir else out_dir / "search"
    stage1, sel = AutoQRA(
        space, memory, imp, evaluator, budget, evo, c.alpha, c.bo_iters, c.k_bo, run.seed
    ).run(ckpt_dir)
    sel_cfg = QRConfig(tuple(sel.q), tuple(sel.r))
    metrics = {
        "selected": {
            "phigh": float(sel.phigh),
            "mem_gb": memory.total_bytes(sel_cfg) / 1e9,
            "mem_over_budget": memory.total_bytes(sel_cfg) / budget,
            "avg_bits": float(np.mean(sel.q)),
            "avg_rank": float(np.mean(sel.r)),
        },
        "search": {
            "n_lf": float(stage1.n_evals["low"]),  # from the cache: exact across resumes
            "n_hf": float(stage1.n_evals["high"] + sum("phigh" in h for h in sel.history)),
            "pareto_size": float(len(stage1.pareto)),
            "budget_gb": budget / 1e9,
        },
    }
    extra = {"q": list(sel.q), "r": list(sel.r), "calls": evaluator.calls}
    logger.info("selected q=%s r=%s", sel.q, sel.r)
    return write_results(out_dir, "autoqra", metrics, cfg=run.cfg, extra=extra)
