"""The paper stage of ``icml26 experiment=mcce_paper`` (paper setting).

The API model (GPT-4o) through an OpenAI-compatible endpoint and the local model of the model group
(Qwen2.5-7B-Instruct) co-evolve on the 5-objective task with the TDC oracles; the training round's
TRL config comes from the ``dpo`` / ``sft`` / ``grpo`` trainer node.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from common.config import Run, model_id
from common.tracking import write_results

from .config import MCCERunConfig
from .optimizer import MCCEOptimizer
from .problems import load_init_smiles, paper_problem
from .toy import HV_NOTE
from .train import trainer_args_for


def build_paper(rc: MCCERunConfig, model: Any, run_dir: str | Path = ".") -> MCCEOptimizer:
    """The paper's setting (paper setting): GPT-4o + the model group's checkpoint, 5 objectives, TDC.

    The API model is an OpenAI-compatible ``common.llm.OpenAIChat`` (key read at request time);
    the local model (``model``, a ``common.config.ModelConfig``) is a :class:`TrainableChat`
    whose vLLM engine is rebuilt from the trained weights after every round (``on_update``).
    The oracles load lazily from ``oracle_dir``.
    """
    from common.llm import OpenAIChat
    from common.models import load_model, load_tokenizer

    from .local import TrainableChat

    if model is None:
        raise ValueError("stage=paper needs a model group: model=qwen2_5_7b_instruct")
    if rc.init_file is None:
        raise ValueError(
            "method.init_file must be a SMILES file (ZINC250K 'random1', 100 molecules)"
        )
    init = load_init_smiles(rc.init_file)  # before any model: a bad file fails in seconds
    ckpt = Path(rc.checkpoint_dir or Path(run_dir) / "ckpt")
    api = OpenAIChat(rc.api_model, base_url=rc.api_base_url, api_key_env=rc.api_key_env)
    spec = model_id(model)
    tok = load_tokenizer(spec)
    if getattr(tok, "chat_template", None) is None:
        raise ValueError(f"model {spec!r} has no chat template")
    policy = load_model(spec, dtype=model.dtype)
    local = TrainableChat(
        policy,
        tok,
        temperature=rc.local_temperature,
        top_p=rc.local_top_p,
        max_new_tokens=rc.local_max_new_tokens,
        use_vllm=rc.use_vllm,
        export_dir=str(ckpt / "local_policy"),
        vllm_kwargs={"gpu_memory_utilization": rc.vllm_gpu_memory_utilization},
    )
    return MCCEOptimizer(
        paper_problem(oracle_dir=rc.oracle_dir),
        api,
        local,
        rc.search,
        init,
        checkpoint_dir=str(ckpt),
        on_update=local.reload,  # paper setting: rebuild the vLLM engine from the weights after each round
        trainer_args=trainer_args_for(rc, rc.search.mode, str(ckpt / "trainer")),
    )


def run_paper(run: Run) -> dict[str, float]:
    """``stage=paper``: one co-evolution run of ``method.search.mode`` at the paper's setting."""
    rc: MCCERunConfig = copy.deepcopy(run.method)
    rc.search.seed = run.seed  # one search per process: the run's seed
    t0 = time.time()
    res = build_paper(rc, run.model, run.run_dir).run()
    table = {rc.search.mode: {k: float(v) for k, v in res.metrics.items()}}
    return write_results(
        run.run_dir,
        "mcce",
        table,
        cfg=run.cfg,
        extra={"train_log": res.train_log},
        wall_time_s=time.time() - t0,
        notes=HV_NOTE,
    )
