"""Weasel's paper stages: ``select`` (prune → score → greedy → 10K subset) and ``sft`` (LoRA SFT).

``icml26 experiment=weasel_paper method.stage=select`` reads AgentLab-format chat records
(``method.data_path``; AgentTrek converted, official README) and writes the selected, pruned subset
to ``method.output_path`` with a JSON sidecar of the scores. ``method.stage=sft`` fine-tunes
``model`` on that subset with the paper's LoRA recipe (``method.trainer``, a
:class:`methods.weasel.sft.WeaselSFTConfig`). Serving the merged model with vLLM and evaluating it
with AgentLab / BrowserGym stay outside (``scripts/reproduce/weasel.sh``).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from common.config import Run, model_id, trainer_config
from common.tracking import write_results

from .data import LAYOUT, load_agentlab_file, parse_records
from .pipeline import WeaselSelector
from .toy import similarity_for

__all__ = ["select_stage", "sft_stage"]

logger = logging.getLogger(__name__)


def _subset_path(run: Run) -> Path:
    rc = run.method
    return Path(rc.output_path) if rc.output_path else Path(run.run_dir) / "weasel_selected.json"


def select_stage(run: Run) -> dict[str, float]:
    """``stage=select``: the selection pipeline on ``method.data_path``; writes the subset.

    Raises:
        ValueError: if ``method.data_path`` is unset, or its records are not AgentLab chat records
            with a ``## Goal:`` (checked before the scorer loads).
        FileNotFoundError: if it does not exist.
    """
    rc = run.method
    if not rc.data_path:
        raise ValueError(f"method.data_path must point to {LAYOUT}")
    path = Path(rc.data_path)
    if not path.is_file():
        raise FileNotFoundError(f"method.data_path does not exist: {path}")
    t0 = time.time()
    records = load_agentlab_file(path)
    # every record's goal is read before the scorer model loads (missing goals fail here)
    parse_records(records, allow_missing_goal=rc.selection.allow_missing_goal)
    selector = WeaselSelector(similarity_for(rc), rc.selection)
    out_path = _subset_path(run)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    subset = selector.run(records, sidecar=out_path.with_suffix(".scores.json"))
    out_path.write_text(json.dumps(subset))
    logger.info("weasel select: %d of %d records -> %s", len(subset), len(records), out_path)
    metrics = {"weasel": {"n_input": float(len(records)), "n_selected": float(len(subset))}}
    metrics["weasel"].update({f"prune_{k}": v for k, v in selector.prune_stats.as_dict().items()})
    return write_results(run.run_dir, "weasel", metrics, cfg=run.cfg, wall_time_s=time.time() - t0)


def sft_stage(run: Run) -> dict[str, float]:
    """``stage=sft``: LoRA SFT of ``run.model`` on the subset at ``method.output_path``.

    The adapter is saved in ``<run_dir>/sft`` (merge it with PEFT for vLLM serving).

    Raises:
        ValueError: if no model is configured.
    """
    import torch

    from common.models import load_model, load_tokenizer

    from .sft import WeaselSFTConfig, load_agentlab_records, train_sft

    if run.model is None:
        raise ValueError("stage=sft needs a model (override /model: <checkpoint>)")
    t0 = time.time()
    records = load_agentlab_records(_subset_path(run))
    out_dir = Path(run.run_dir) / "sft"
    args = trainer_config(
        WeaselSFTConfig,
        run.method.trainer,
        output_dir=str(out_dir),
        completion_only_loss=True,
        max_length=run.method.max_seq_length,
        report_to="none",
        use_cpu=not torch.cuda.is_available(),
        seed=run.seed,
    )
    spec = model_id(run.model)
    model = load_model(spec, dtype=run.model.dtype)
    tok = load_tokenizer(spec, padding_side="right")
    trainer = train_sft(model, tok, records, args)
    trainer.save_model(str(out_dir))
    tok.save_pretrained(str(out_dir))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    metrics = {
        "sft": {
            "n_train": float(len(records)),
            "steps": float(trainer.state.global_step),
            "final_loss": float(losses[-1]) if losses else float("nan"),
        }
    }
    return write_results(run.run_dir, "weasel", metrics, cfg=run.cfg, wall_time_s=time.time() - t0)
