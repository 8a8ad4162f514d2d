"""MCCE experiments for the CLI: ``icml26 experiment=mcce_toy`` (spec §6) and ``mcce_paper`` (spec §7).

Toy arms on the same seeds, initial population and warm-up model: the frozen SELFIES explorer alone
(``explorer_only``), the warmed-up tiny GPT alone (``local_only``), the two alternating without
training (``coevolve_frozen``) and MCCE, alternating with similarity-pair DPO rounds
(``coevolve_dpo``); ``coevolve_sft`` is optional. Writes results.json/.md and the
hypervolume-vs-evaluations curve.
"""

from __future__ import annotations

import copy
import logging
import random
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from .optimizer import MCCEConfig, MCCEOptimizer, MCCEResult
from .problems import load_nci_smiles, load_seed_smiles, paper_problem, toy_problem
from .toy import (
    SelfiesExplorer,
    TinyLMChat,
    build_selfies_tokenizer,
    pretrain_tiny_lm,
    selfies_vocab,
    tiny_gpt,
    warmup_pairs,
)

logger = logging.getLogger(__name__)

ARM_MODES = {
    "explorer_only": "single_api",
    "local_only": "single_local",
    "coevolve_frozen": "coevolve_frozen",
    "coevolve_dpo": "coevolve_dpo",
    "coevolve_sft": "coevolve_sft",
    "coevolve_rl": "coevolve_rl",
}

DEMO_OVERRIDES: list[str] = [
    "method.seeds=[0]",
    "method.arms=[coevolve_frozen,coevolve_dpo]",
    "method.warmup_steps=5",
    "method.warmup_molecules=300",
    "method.warmup_pairs=64",
    "method.search.budget=44",
    "method.search.n_pairs_max=8",
    "method.search.dpo.num_train_epochs=1",
    "method.search.dpo.per_device_train_batch_size=4",
    "method.search.pop_size=8",
    "method.local_max_new_tokens=32",
]
HEADLINE: tuple[str, str] = ("coevolve_dpo/hypervolume", "coevolve_frozen/hypervolume")

REPORTED = (
    "hypervolume",
    "top1_f",
    "top10_f",
    "top10_auc",
    "validity",
    "uniqueness",
    "diversity",
    "local_mean_f",
    "api_mean_f",
    "n_unique",
)


@dataclass
class MCCERunConfig:
    """``cfg.method`` of the CLI: the search settings plus the toy's / paper's model settings."""

    name: str = "mcce"
    task: str = "toy"  # toy | paper
    arms: list[str] = field(
        default_factory=lambda: ["explorer_only", "local_only", "coevolve_frozen", "coevolve_dpo"]
    )
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    search: MCCEConfig = field(default_factory=MCCEConfig)
    # toy: local model warm-up and sampling (spec §6)
    warmup_steps: int = 80
    warmup_batch: int = 16
    warmup_lr: float = 3e-3
    warmup_pairs: int = 2000
    warmup_molecules: int = 5000  # NCI molecules used for the vocabulary and warm-up parents
    max_parent_tokens: int = 24
    n_positions: int = 256
    local_temperature: float = 0.7  # repo: T=0.7, top_p=0.95
    local_top_p: float = 0.95
    local_max_new_tokens: int = 80  # repo: 128
    explorer_max_edits: int = 3
    init_max_f: float | None = None  # toy: keep only seeds with F below this (room to improve)
    # paper (spec §7)
    api_model: str = "gpt-4o-2024-05-13"
    api_base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    local_model: str = "Qwen/Qwen2.5-7B-Instruct"
    initial_population: str | None = None  # SMILES file (ZINC250K 'random1' in the repo)
    oracle_dir: str = "oracle"
    checkpoint_dir: str | None = None
    use_vllm: bool = True  # paper scale: vLLM generation, engine rebuilt after each DPO round
    local_dtype: str = "bfloat16"  # repo: bf16
    vllm_gpu_memory_utilization: float = 0.3  # vLLM shares the GPU with the DPO policy + reference

    def __post_init__(self) -> None:
        bad = [a for a in self.arms if a not in ARM_MODES]
        if bad:
            raise ValueError(f"arms must be among {sorted(ARM_MODES)}, got {bad}")
        if self.task not in ("toy", "paper"):
            raise ValueError(f"task must be 'toy' or 'paper', got {self.task!r}")


def to_config(method_cfg: DictConfig | dict) -> MCCERunConfig:
    """Strict merge of ``cfg.method`` into :class:`MCCERunConfig` (unknown keys fail)."""
    merged = OmegaConf.merge(OmegaConf.structured(MCCERunConfig), method_cfg)
    obj = OmegaConf.to_object(merged)
    return MCCERunConfig(**{f.name: getattr(obj, f.name) for f in fields(MCCERunConfig)})


def _seed_all(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_toy_models(rc: MCCERunConfig) -> tuple[Any, Any]:
    """Tokenizer and warmed-up tiny GPT on NCI molecules (shared by every arm and seed)."""
    import selfies as sf

    problem = toy_problem()
    smiles = load_nci_smiles(rc.warmup_molecules) + load_seed_smiles()
    enc = []
    for s in smiles:
        try:
            enc.append(sf.encoder(s))
        except Exception:  # selfies cannot encode some NCI valences
            continue
    tok = build_selfies_tokenizer(selfies_vocab(enc))
    _seed_all(0)
    model = tiny_gpt(
        len(tok), tok.pad_token_id, tok.eos_token_id, n_positions=rc.n_positions, seed=0
    )
    pairs = warmup_pairs(
        smiles,
        rc.warmup_pairs,
        SelfiesExplorer(seed=12345, max_edits=rc.explorer_max_edits),
        random.Random(0),
        max_tokens=rc.max_parent_tokens,
    )
    losses = pretrain_tiny_lm(
        model,
        tok,
        pairs,
        steps=rc.warmup_steps,
        batch_size=rc.warmup_batch,
        lr=rc.warmup_lr,
        seed=0,
    )
    logger.info(
        "warm-up: loss %.3f -> %.3f",
        losses[0] if losses else float("nan"),
        losses[-1] if losses else float("nan"),
    )
    del problem
    return tok, model


def _short_seeds(rc: MCCERunConfig) -> list[str]:
    """Initial population: the toy seeds whose SELFIES fit the prompt budget (and F < init_max_f)."""
    import selfies as sf

    from .core import Archive

    prob = toy_problem()
    out = []
    for s in load_seed_smiles():
        c = prob.canonicalize(s, "smiles")
        if c and len(list(sf.split_selfies(sf.encoder(c)))) <= rc.max_parent_tokens:
            out.append(s)
    if (
        rc.init_max_f is not None
    ):  # drop the strong seeds (celecoxib fragments) so search can improve
        arc = Archive(prob)
        f = {c.value: c.total for c in arc.add(out, representation="smiles")}
        out = [s for s in out if f.get(prob.canonicalize(s, "smiles"), 0.0) < rc.init_max_f]
    return out


def run_toy(rc: MCCERunConfig, run_dir: Path) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    from common.llm import ScriptedChat

    t0 = time.time()
    tok, warm = build_toy_models(rc)
    warm_s = time.time() - t0
    init = _short_seeds(rc)
    search = copy.deepcopy(rc.search)
    per_arm: dict[str, list[dict[str, float]]] = {a: [] for a in rc.arms}
    curves: dict[str, list[list[tuple[float, float]]]] = {a: [] for a in rc.arms}
    train_logs: dict[str, list[list[dict[str, float]]]] = {a: [] for a in rc.arms}
    local_gen_f: dict[str, list[float]] = {a: [] for a in rc.arms}
    for seed in rc.seeds:
        for arm in rc.arms:
            _seed_all(seed)
            cfg = copy.deepcopy(search)
            cfg.mode, cfg.seed = ARM_MODES[arm], seed
            api = ScriptedChat(SelfiesExplorer(seed=1000 + seed, max_edits=rc.explorer_max_edits))
            local = TinyLMChat(
                copy.deepcopy(warm),
                tok,
                max_new_tokens=rc.local_max_new_tokens,
                temperature=rc.local_temperature,
                top_p=rc.local_top_p,
                seed=seed,
            )
            ref = (
                copy.deepcopy(warm).eval() if cfg.mode in ("coevolve_dpo", "coevolve_rl") else None
            )
            t = time.time()
            res: MCCEResult = MCCEOptimizer(
                toy_problem(), api, local, cfg, init, ref_model=ref
            ).run()
            m = dict(res.metrics)
            m["wall_s"] = time.time() - t
            per_arm[arm].append(m)
            curves[arm].append([(h["n_unique"], h["hypervolume"]) for h in res.history])
            train_logs[arm].append(res.train_log)
            loc = [h["new_mean_f"] for h in res.history if h["model"] == "local" and h["new"] > 0]
            local_gen_f[arm].extend(loc[-3:])
            logger.info(
                "seed %d arm %s: HV %.4f top10 %.3f (%.1fs)",
                seed,
                arm,
                m["hypervolume"],
                m["top10_f"],
                m["wall_s"],
            )
    table: dict[str, dict[str, float]] = {}
    for arm, runs in per_arm.items():
        row: dict[str, float] = {}
        for k in REPORTED + ("wall_s",):
            vals = [r[k] for r in runs if k in r]
            if vals:
                row[k] = float(np.mean(vals))
                if k in ("hypervolume", "top10_f") and len(vals) > 1:
                    row[f"{k}_std"] = float(np.std(vals))
        if local_gen_f[arm]:
            row["local_late_new_mean_f"] = float(np.mean(local_gen_f[arm]))
        accs = [lg.get("dpo/accuracies_mean") for logs in train_logs[arm] for lg in logs]
        accs = [a for a in accs if a is not None]
        if accs:
            row["dpo_acc_first_round"] = float(
                np.mean(
                    [
                        logs[0]["dpo/accuracies_mean"]
                        for logs in train_logs[arm]
                        if logs and "dpo/accuracies_mean" in logs[0]
                    ]
                )
            )
            row["dpo_acc_last_round"] = float(
                np.mean(
                    [
                        logs[-1]["dpo/accuracies_mean"]
                        for logs in train_logs[arm]
                        if logs and "dpo/accuracies_mean" in logs[-1]
                    ]
                )
            )
            row["dpo_rounds"] = float(np.mean([len(logs) for logs in train_logs[arm]]))
        table[arm] = row
    _plot(curves, run_dir / "hv_curve.png", rc)
    extra = {"warmup_s": warm_s, "train_logs": train_logs, "n_initial": len(init)}
    return table, extra


def _plot(
    curves: dict[str, list[list[tuple[float, float]]]], path: Path, rc: MCCERunConfig
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from common.tracking import save_plot

    fig, ax = plt.subplots(figsize=(6, 4))
    for arm, runs in curves.items():
        for i, c in enumerate(runs):
            xs, ys = zip(*c)
            ax.step(
                xs,
                ys,
                where="post",
                label=arm if i == 0 else None,
                color=f"C{list(curves).index(arm)}",
                alpha=0.8,
            )
    ax.set_xlabel("unique valid molecules evaluated")
    ax.set_ylabel("hypervolume of top-100 (ref 1.1)")
    ax.set_title(f"MCCE toy: QED/SA/celecoxib-sim, seeds {rc.seeds}")
    ax.legend()
    save_plot(fig, path)


def build_paper(rc: MCCERunConfig) -> MCCEOptimizer:
    """The paper's setting (spec §7): GPT-4o + Qwen2.5-7B-Instruct, 5 objectives, TDC oracles.

    The API model is an OpenAI-compatible ``common.llm.OpenAIChat`` (key read at request time);
    the local model is a :class:`TrainableChat` whose vLLM engine is rebuilt from the trained
    weights after every preference round (``on_update``). The oracles load lazily from
    ``oracle_dir``.
    """
    from common.llm import OpenAIChat
    from common.models import load_model, load_tokenizer

    from .local import TrainableChat

    api = OpenAIChat(rc.api_model, base_url=rc.api_base_url, api_key_env=rc.api_key_env)
    tok = load_tokenizer(rc.local_model)
    if getattr(tok, "chat_template", None) is None:
        raise ValueError(f"local_model {rc.local_model!r} has no chat template")
    model = load_model(rc.local_model, dtype=rc.local_dtype)
    local = TrainableChat(
        model,
        tok,
        temperature=rc.local_temperature,
        top_p=rc.local_top_p,
        max_new_tokens=rc.local_max_new_tokens,
        use_vllm=rc.use_vllm,
        export_dir=str(Path(rc.checkpoint_dir or "outputs/mcce") / "local_policy"),
        vllm_kwargs={"gpu_memory_utilization": rc.vllm_gpu_memory_utilization},
    )
    if rc.initial_population is None:
        raise ValueError(
            "initial_population must be a SMILES file (ZINC250K 'random1', 100 molecules)"
        )
    with open(rc.initial_population) as fh:
        init = [ln.split()[0] for ln in fh if ln.strip()]
    return MCCEOptimizer(
        paper_problem(oracle_dir=rc.oracle_dir),
        api,
        local,
        rc.search,
        init,
        checkpoint_dir=rc.checkpoint_dir,
        on_update=local.reload,  # spec §7: rebuild the vLLM engine from the weights after each round
    )


def run(cfg: DictConfig) -> dict[str, float]:
    """CLI entry: run the toy (or the paper setting) and write results."""
    from common.tracking import write_results

    rc = to_config(cfg.method)
    run_dir = Path(cfg.run_dir or ".")
    run_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if rc.task == "paper":  # pragma: no cover - GPU + API
        res = build_paper(rc).run()
        table = {rc.search.mode: {k: float(v) for k, v in res.metrics.items()}}
        extra: dict[str, Any] = {"train_log": res.train_log}
    else:
        rc.seeds = [int(cfg.seed) + s for s in rc.seeds]
        table, extra = run_toy(rc, run_dir)
    return write_results(
        run_dir,
        "mcce",
        table,
        cfg=cfg,
        extra=extra,
        wall_time_s=time.time() - t0,
        notes="HV: top-100 by F, t(x) minimisation form, ref 1.1 (max 1.1^3 = 1.331).",
    )
