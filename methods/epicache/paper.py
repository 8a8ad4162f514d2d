"""EpiCache's paper stages: ``profile`` (layer sensitivity) and ``eval`` (a benchmark end to end).

``icml26 experiment=epicache_paper method.stage=profile`` measures σ_l of ``model`` on one long
sample (official ``data/layer_scores/layer_profile.py``: BookSum sample 0, 16K tokens) and writes
``<run_dir>/sensitivity.json`` (and ``method.sensitivity_path`` when set).
``icml26 experiment=epicache_paper method.stage=eval`` runs one :class:`EpiCacheSession` per
conversation of every set of ``benchmark`` (official ``run_epicache.py`` + ``run_epicache_eval.py``):
token F1 per question category, the LLM-judge score (``method.judge_model``), episode counts, peak
cached tokens per head and latency per turn. ``method.scorer=<baseline>`` runs the paper's
block-prefill baselines (KVzip, SnapKV, KeyDiff, InfiniPot) through the same loop.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
import torch

from common.config import Run, dataset_source, model_id
from common.tracking import progress, write_results

from .config import EpiCacheRunConfig, ProfileConfig

logger = logging.getLogger(__name__)


def _load(run: Run):
    from common.models import load_model, load_tokenizer

    if run.model is None:
        raise ValueError("the paper stages need a model: select one with model=<name>")
    spec = model_id(run.model)
    kwargs = {}
    if run.model.attn_implementation:
        kwargs["attn_implementation"] = run.model.attn_implementation
    model = load_model(spec, dtype=run.model.dtype, **kwargs).eval()
    return model, load_tokenizer(spec), spec


def profile_text(p: ProfileConfig) -> str:
    """The profiling sample: ``p.text_path`` when set, else row ``p.index`` of the hub set."""
    if p.text_path:
        return Path(p.text_path).read_text(encoding="utf-8")
    from datasets import load_dataset

    ds = load_dataset(p.hub_id, split=p.split)
    return str(ds[int(p.index)][p.column])


@torch.no_grad()
def profile_stage(run: Run) -> dict[str, float]:
    """``stage=profile``: σ_l of ``model`` under the block mask; writes ``sensitivity.json``."""
    from .budget import profile_layer_sensitivity

    t0 = time.perf_counter()
    p: ProfileConfig = run.method.profile
    model, tok, spec = _load(run)
    text = profile_text(p)
    ids = tok(text, return_tensors="pt", add_special_tokens=False).input_ids[:, : p.max_tokens]
    sigma = profile_layer_sensitivity(
        model, ids.to(model.device), p.block, p.sink, p.overlap, p.window
    )
    prof = {
        "model": run.model.name,
        "loaded": spec,
        "sigma": sigma.tolist(),
        "block": p.block,
        "sink": p.sink,
        "overlap": p.overlap,
        "window": p.window,
        "n_tokens": int(ids.shape[1]),
    }
    outs = [Path(run.run_dir) / "sensitivity.json"]
    if run.method.sensitivity_path:
        outs.append(Path(run.method.sensitivity_path))
    for out in outs:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(prof, indent=1))
    logger.info("sensitivity profile of %s written to %s", spec, ", ".join(map(str, outs)))
    row = {f"sigma_{i}": float(s) for i, s in enumerate(sigma)}
    row.update(sigma_min=float(sigma.min()), sigma_max=float(sigma.max()))
    return write_results(
        run.run_dir, "epicache", {"profile": row}, cfg=run.cfg, wall_time_s=time.perf_counter() - t0
    )


def load_sensitivity(path: str, model_name: str, n_layers: int) -> np.ndarray:
    """σ_l from a ``profile`` JSON, checked against the model it is used with.

    Raises:
        ValueError: when the profile names another model or has another layer count.
    """
    prof = json.loads(Path(path).read_text())
    if prof.get("model") not in (None, model_name):
        raise ValueError(
            f"sensitivity profile {path} is for {prof.get('model')!r}, not {model_name!r}"
        )
    sigma = np.asarray(prof["sigma"], dtype=np.float64)
    if sigma.size != n_layers:
        raise ValueError(
            f"sensitivity profile {path} has {sigma.size} layers, the model {n_layers}"
        )
    return sigma


def _judge(mcfg: EpiCacheRunConfig):
    if not mcfg.judge_model:
        return None
    from common.llm import OpenAIChat

    # official run_gpt_eval.py: temperature 0
    return OpenAIChat(
        mcfg.judge_model,
        base_url=mcfg.judge_base_url,
        api_key_env=mcfg.judge_api_key_env,
        temperature=0.0,
    )


def evaluate_benchmark(run: Run, judge=None, embedder=None) -> dict[str, float]:
    """``stage=eval``: one session per conversation of every set of ``run.benchmark``.

    Args:
        run: the typed run (``run.model``, ``run.benchmark`` of format locomo / realtalk /
            longmemeval, ``run.method`` the knobs).
        judge: a ``common.llm`` chat client (default: ``method.judge_model`` through OpenAIChat, or
            none).
        embedder: anything with ``encode(list[str])`` (default: ``common.embeddings.Embedder``).
    """
    from .data import BENCHMARK_LOADERS
    from .metrics import llm_judge_score, token_f1
    from .pipeline import EpiCacheSession

    t0 = time.perf_counter()
    mcfg: EpiCacheRunConfig = run.method
    if run.benchmark is None:
        raise ValueError("stage=eval needs a benchmark: benchmark=locomo | realtalk | longmemeval")
    load = BENCHMARK_LOADERS[run.benchmark.format]
    loaded = {name: load(dataset_source(spec)) for name, spec in run.benchmark.sets.items()}
    model, tok, _ = _load(run)  # after the data: a bad file fails before the model loads
    if embedder is None:
        from common.embeddings import Embedder

        embedder = Embedder(mcfg.embedder_path or mcfg.embedder, device=str(model.device))
    sigma = None
    if mcfg.sensitivity_path:
        sigma = load_sensitivity(
            mcfg.sensitivity_path, run.model.name, int(model.config.num_hidden_layers)
        )
    judge = judge if judge is not None else _judge(mcfg)
    metrics: dict[str, dict[str, float]] = {}
    for set_name, spec in run.benchmark.sets.items():
        convs = loaded[set_name]
        limit = mcfg.n_eval or spec.limit
        if limit:
            convs = convs[:limit]
        per_cat: dict[str, list[float]] = {}
        judged: list[float] = []
        unparsed, peaks, lat = 0, [], []
        for conv in progress(convs, desc=f"epicache {set_name}", unit="conv"):
            sess = EpiCacheSession(model, tok, embedder, mcfg, sigma=sigma)
            sess.build(conv)
            peaks.append(sess.memory_report()["peak_tokens_per_head"])
            for qa in conv.qa:
                rec = sess.answer(qa.question)
                lat.append(rec.latency_s)
                per_cat.setdefault(qa.category or "all", []).append(token_f1(rec.text, qa.answer))
                if judge is not None:
                    score, ok = llm_judge_score(judge, qa.question, rec.text, qa.answer)
                    judged.append(score)
                    unparsed += int(not ok)
        if unparsed:
            logger.warning("%s: %d judge replies were unparsable (scored 0)", set_name, unparsed)
        row = {f"f1_{c}": float(np.mean(v)) for c, v in per_cat.items()}
        row["f1_avg"] = float(np.mean([x for v in per_cat.values() for x in v]))
        if judge is not None:
            row["judge"] = float(np.mean(judged))
            row["judge_unparsed"] = float(unparsed)
        row["peak_tokens_per_head"] = float(max(peaks))
        row["latency_per_turn_s"] = float(np.mean(lat))
        row["n_conversations"] = float(len(convs))
        arm = mcfg.name if mcfg.scorer == "patched" else mcfg.scorer
        metrics[arm if len(run.benchmark.sets) == 1 else f"{arm}_{set_name}"] = row
    return write_results(
        run.run_dir, "epicache", metrics, cfg=run.cfg, wall_time_s=time.perf_counter() - t0
    )


def eval_stage(run: Run) -> dict[str, float]:
    """``stage=eval`` (see :func:`evaluate_benchmark`)."""
    return evaluate_benchmark(run)
