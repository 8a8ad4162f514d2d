"""Weasel experiments for the CLI: ``icml26 experiment=weasel_toy`` (spec §6) and ``weasel_paper``.

Toy ("SynthWeb"): one seeded corpus; five training sets at the same per-trajectory budget T0 except
Full: ``full`` (every step), ``random`` (T0 random steps per trajectory), ``weasel`` (λ = 1),
``importance_only`` (λ = 0) and ``diversity_only`` (Φ ≡ 0). Each set trains the same tiny GPT-2 with
TRL's SFTTrainer for each seed; the greedy-decoded action is scored on in-domain and held-out-site
(OOD) essential steps. Also reported: training tokens / wall-clock and the share of the selected
steps that are essential (not scroll / hover / error / go_back noise).

Paper (``task=paper``): the selection stage on an AgentLab-format JSON file (spec §7); SFT and
BrowserGym evaluation are launched by ``scripts/reproduce/weasel.sh``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from common.tracking import write_results

from .data import parse_records, segment_by_goal
from .pipeline import WeaselConfig, WeaselSelector
from .scoring import JaccardSimilarity, TokenMatchSimilarity

logger = logging.getLogger(__name__)

DEMO_OVERRIDES: list[str] = [
    "method.arms=[random,weasel]",
    "method.seeds=[0]",
    "method.n_train_traj=6",
    "method.n_test_steps=8",
    "method.epochs=1",
    "method.scorer=jaccard",
]
HEADLINE: tuple[str, str] = ("weasel/ood_action_token_acc", "random/ood_action_token_acc")

ARMS = ("full", "random", "weasel", "importance_only", "diversity_only")


@dataclass
class WeaselRunConfig:
    """``cfg.method``: selection settings, the toy's sizes and the paper stage's paths."""

    name: str = "weasel"
    task: str = "toy"  # toy | paper
    arms: list[str] = field(default_factory=lambda: list(ARMS))
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    selection: WeaselConfig = field(default_factory=WeaselConfig)
    scorer: str = "minilm"  # minilm (BERTScore-style on MiniLM) | jaccard (fast stand-in)
    scorer_model: str | None = None  # None: the offline MiniLM
    num_layers: int = 4
    max_length: int = 64
    # toy (spec §6)
    n_train_traj: int = 150
    n_test_steps: int = 200
    data_seed: int = 0
    epochs: float = 2.0
    lr: float = 1.0e-3
    batch_size: int = 16
    n_embd: int = 64
    # paper (spec §7)
    data_path: str | None = None
    output_path: str | None = None

    def __post_init__(self) -> None:
        bad = [a for a in self.arms if a not in ARMS]
        if bad:
            raise ValueError(f"arms must be drawn from {ARMS}, got {bad}")
        if self.task not in ("toy", "paper"):
            raise ValueError(f"task must be 'toy' or 'paper', got {self.task!r}")
        if self.scorer not in ("minilm", "jaccard"):
            raise ValueError(f"scorer must be 'minilm' or 'jaccard', got {self.scorer!r}")


def _config(cfg: DictConfig) -> WeaselRunConfig:
    fields_ = OmegaConf.to_container(cfg.method, resolve=True)
    selection = WeaselConfig(**(fields_.pop("selection", None) or {}))  # unknown keys: TypeError
    return WeaselRunConfig(selection=selection, **fields_)


def _similarity(rc: WeaselRunConfig):
    if rc.scorer == "jaccard":
        return JaccardSimilarity()
    return TokenMatchSimilarity(rc.scorer_model, num_layers=rc.num_layers, max_length=rc.max_length)


def _arm_indices(arm: str, records: list[dict], rc: WeaselRunConfig, sim, seed: int) -> list[int]:
    if arm == "full":
        return list(range(len(records)))
    if arm == "random":
        steps, _ = parse_records(records)
        rng = random.Random(seed)
        out: list[int] = []
        for tr in segment_by_goal(steps):
            k = min(rc.selection.budget_fixed, len(tr.index))
            out += sorted(rng.sample(tr.index, k))
        return out
    sel_cfg = dataclasses.replace(rc.selection, prune=False)  # already pruned once for all arms
    if arm == "importance_only":
        sel_cfg.lam = 0.0
    elif arm == "diversity_only":
        sel_cfg.importance_off = True
    return WeaselSelector(sim, sel_cfg).select_indices(records)[1]


def _run_toy(cfg: DictConfig, rc: WeaselRunConfig) -> dict[str, float]:
    import datasets
    import torch

    from .pruning import PruneStats, prune_record
    from .toy import (
        build_word_tokenizer,
        evaluate_policy,
        make_synthweb,
        policy_example,
        train_policy,
    )

    datasets.disable_progress_bars()
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    t0 = time.time()
    train, test_id, test_ood = make_synthweb(rc.n_train_traj, rc.n_test_steps, rc.data_seed)
    # Pruning (spec §3.2) applies to every arm's training prompts; test prompts stay unpruned.
    stats = PruneStats()
    s = rc.selection
    pruned = [prune_record(r, s.window, s.fallback, stats)[0] for r in train]
    for p, r in zip(pruned, train):
        p["kind"] = r["kind"]
    ex_train = [policy_example(r) for r in pruned]
    ex_id = [policy_example(r) for r in test_id]
    ex_ood = [policy_example(r) for r in test_ood]
    tok = build_word_tokenizer([e["prompt"] + e["completion"] for e in ex_train + ex_id + ex_ood])
    sim = _similarity(rc)
    per_arm: dict[str, list[dict[str, float]]] = {a: [] for a in rc.arms}
    t_sel: dict[str, float] = {}
    cached: dict[str, list[int]] = {}  # deterministic arms are selected once, not once per seed
    for seed in rc.seeds:
        seed = int(cfg.seed) + int(seed)
        for arm in rc.arms:
            ts = time.time()
            if arm in cached:
                idx = cached[arm]
            else:
                idx = _arm_indices(arm, pruned, rc, sim, seed)
                t_sel[arm] = time.time() - ts
                if arm != "random":
                    cached[arm] = idx
            kinds = [pruned[i]["kind"] for i in idx]
            model, info = train_policy(
                [ex_train[i] for i in idx],
                tok,
                seed=seed,
                epochs=rc.epochs,
                lr=rc.lr,
                batch_size=rc.batch_size,
                n_embd=rc.n_embd,
            )
            row = {f"ood_{k}": v for k, v in evaluate_policy(model, tok, ex_ood).items()}
            row.update({f"id_{k}": v for k, v in evaluate_policy(model, tok, ex_id).items()})
            row.update(info)
            row["essential_frac"] = kinds.count("essential") / max(len(kinds), 1)
            per_arm[arm].append(row)
            logger.info("weasel toy seed %d arm %s: %s", seed, arm, row)
    metrics: dict[str, dict[str, float]] = {}
    for arm, rows in per_arm.items():
        metrics[arm] = {k: statistics.mean(r[k] for r in rows) for k in rows[0]}
        if len(rows) > 1:
            metrics[arm]["ood_action_acc_std"] = statistics.stdev(r["ood_action_acc"] for r in rows)
            for key in ("id_action_acc", "ood_action_token_acc", "id_action_token_acc"):
                metrics[arm][f"{key}_std"] = statistics.stdev(r[key] for r in rows)
    if "full" in metrics:
        for arm in metrics:
            metrics[arm]["token_ratio_vs_full"] = (
                metrics["full"]["train_tokens"] / metrics[arm]["train_tokens"]
            )
    extra = {
        "prune": stats.as_dict(),
        "n_train_steps": len(train),
        "selection_seconds": t_sel,
        "scorer": rc.scorer,
    }
    return write_results(
        cfg.run_dir, "weasel", metrics, cfg=cfg, extra=extra, wall_time_s=time.time() - t0
    )


def _run_paper(cfg: DictConfig, rc: WeaselRunConfig) -> dict[str, float]:
    if not rc.data_path:
        raise ValueError(
            "method.data_path must point to an AgentLab-format JSON list of chat records"
        )
    t0 = time.time()
    records = json.loads(Path(rc.data_path).read_text())
    selector = WeaselSelector(_similarity(rc), rc.selection)
    out_path = Path(rc.output_path or Path(cfg.run_dir) / "weasel_selected.json")
    subset = selector.run(records, sidecar=out_path.with_suffix(".scores.json"))
    out_path.write_text(json.dumps(subset))
    metrics = {"weasel": {"n_input": float(len(records)), "n_selected": float(len(subset))}}
    metrics["weasel"].update({f"prune_{k}": v for k, v in selector.prune_stats.as_dict().items()})
    return write_results(cfg.run_dir, "weasel", metrics, cfg=cfg, wall_time_s=time.time() - t0)


def run(cfg: DictConfig) -> dict[str, float]:
    """Runs the toy (``method.task=toy``) or the paper selection stage (``task=paper``)."""
    rc = _config(cfg)
    if rc.task == "paper":
        return _run_paper(cfg, rc)
    return _run_toy(cfg, rc)
