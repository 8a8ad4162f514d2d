"""The SynthWeb toy (``stage=toy``): a tiny SFT policy per training subset, scored per field.

Five training sets at the same per-trajectory budget T0 except Full: ``full`` (every step),
``random`` (T0 random steps per trajectory), ``weasel`` (λ = 1), ``importance_only`` (λ = 0) and
``diversity_only`` (Φ ≡ 0). Each set trains the same tiny policy (a word-level tokenizer built from
the corpus; a 2-layer GPT-2 or ``common.tiny`` Llama, optionally warmed up once per seed on the
random-token lookup task of ``common.tiny.induction_warmup``) with TRL's ``SFTTrainer``
(prompt–completion, completion-only loss). The prompt is the goal, the AXTree and the last action;
the completion is the action call. The greedy-decoded action is scored per field (name, bid, text)
on in-domain and held-out-site (OOD) essential steps.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from .config import POLICY_ARCHS
from .synthweb import SITES, make_synthweb, policy_example
from .toy_eval import action_fields, evaluate_policy, score_actions
from .toy_policy import build_policy, build_word_tokenizer, train_policy

__all__ = [
    "POLICY_ARCHS",
    "SITES",
    "action_fields",
    "build_policy",
    "build_word_tokenizer",
    "evaluate_policy",
    "make_synthweb",
    "policy_example",
    "run_toy",
    "score_actions",
    "similarity_for",
    "train_policy",
]

logger = logging.getLogger(__name__)

_STD_KEYS = ("action_acc", "name_acc", "bid_acc", "text_acc", "action_token_acc", "tf_bid_acc")


def similarity_for(rc: Any) -> Any:
    """The run config's scorer: ``JaccardSimilarity`` or the BERTScore-style token matching."""
    from .scoring import JaccardSimilarity, TokenMatchSimilarity

    if rc.scorer == "jaccard":
        return JaccardSimilarity()
    model = rc.scorer_path or rc.scorer_model
    return TokenMatchSimilarity(model, num_layers=rc.num_layers, max_length=rc.max_length)


def _arm_indices(arm: str, records: list[dict], rc: Any, sim: Any, seed: int) -> list[int]:
    import dataclasses
    import random

    from .data import parse_records, segment_by_goal
    from .pipeline import WeaselSelector

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


@dataclass
class _Corpus:
    """One SynthWeb corpus, pruned once for every arm, as policy examples, with its tokenizer."""

    train: list[dict]
    pruned: list[dict]
    prune_stats: Any
    ex_train: list[dict[str, str]]
    ex_id: list[dict[str, str]]
    ex_ood: list[dict[str, str]]
    tok: Any


def _make_corpus(rc: Any) -> _Corpus:
    from .pruning import PruneStats, prune_record

    train, test_id, test_ood = make_synthweb(rc.n_train_traj, rc.n_test_steps, rc.data_seed)
    # Pruning (official prune_axtree.py) applies to every arm's training prompts; test
    # prompts stay unpruned.
    stats = PruneStats()
    s = rc.selection
    pruned = [prune_record(r, s.window, s.fallback, stats)[0] for r in train]
    for p, r in zip(pruned, train):
        p["kind"] = r["kind"]
    nf = rc.name_first_tree
    ex_train = [policy_example(r, nf) for r in pruned]
    ex_id = [policy_example(r, nf) for r in test_id]
    ex_ood = [policy_example(r, nf) for r in test_ood]
    tok = build_word_tokenizer([e["prompt"] + e["completion"] for e in ex_train + ex_id + ex_ood])
    return _Corpus(train, pruned, stats, ex_train, ex_id, ex_ood, tok)


def _initial_policy(tok: Any, rc: Any, seed: int) -> tuple[dict, dict[str, float]]:
    """One initial policy per seed, shared by every arm (warmed up once when asked)."""
    import copy

    from common.tiny import induction_warmup

    base = build_policy(tok, rc.arch, rc.n_embd, seed=seed)
    warm: dict[str, float] = {}
    if rc.induction_steps > 0:
        n_special = len(tok.all_special_ids)
        warm = induction_warmup(base, n_special, len(tok), rc.induction_steps, seed=seed)
    return copy.deepcopy(base.state_dict()), warm


def _train_and_score(
    c: _Corpus, idx: list[int], rc: Any, seed: int, init_state: dict, warm: dict[str, float]
) -> dict[str, float]:
    """SFT of the seed's initial policy on the steps ``idx``; per-field scores on OOD and ID."""
    policy = build_policy(c.tok, rc.arch, rc.n_embd, seed=seed)
    policy.load_state_dict(init_state)
    policy.train()
    model, info = train_policy(
        [c.ex_train[i] for i in idx],
        c.tok,
        seed=seed,
        epochs=rc.epochs,
        lr=rc.lr,
        batch_size=rc.batch_size,
        n_embd=rc.n_embd,
        model=policy,
    )
    row = {f"ood_{k}": v for k, v in evaluate_policy(model, c.tok, c.ex_ood).items()}
    row.update({f"id_{k}": v for k, v in evaluate_policy(model, c.tok, c.ex_id).items()})
    row.update(info)
    row.update(warm)
    kinds = [c.pruned[i]["kind"] for i in idx]
    row["essential_frac"] = kinds.count("essential") / max(len(kinds), 1)
    return row


def _aggregate(per_arm: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Mean over seeds per arm (:func:`common.metrics.mean_over_seeds`), the std of the headline
    keys, and the token ratio against Full."""
    from common.metrics import mean_over_seeds

    n_seeds = {len(rows) for rows in per_arm.values()}
    if len(n_seeds) != 1:
        raise ValueError(f"per_arm must hold the same number of seeds for every arm, got {n_seeds}")
    per_seed = [{arm: rows[i] for arm, rows in per_arm.items()} for i in range(n_seeds.pop())]
    std_keys = [f"{split}_{key}" for split in ("ood", "id") for key in _STD_KEYS]
    metrics = mean_over_seeds(per_seed, std_keys=std_keys)
    if "full" in metrics:
        for arm in metrics:
            metrics[arm]["token_ratio_vs_full"] = (
                metrics["full"]["train_tokens"] / metrics[arm]["train_tokens"]
            )
    return metrics


def run_toy(run: Any) -> dict[str, float]:
    """``stage=toy``: every arm on one SynthWeb corpus, for each seed; writes results."""
    import torch

    from common.threads import torch_threads

    with torch_threads(max(1, min(2, torch.get_num_threads()))):
        return _run_toy(run)


def _run_toy(run: Any) -> dict[str, float]:
    import time

    import datasets

    from common.tracking import write_results

    rc = run.method
    datasets.disable_progress_bars()
    t0 = time.time()
    c = _make_corpus(rc)
    sim = similarity_for(rc)
    per_arm: dict[str, list[dict[str, float]]] = {a: [] for a in rc.arms}
    t_sel: dict[str, float] = {}
    cached: dict[str, list[int]] = {}  # deterministic arms are selected once, not once per seed
    for seed in rc.seeds:
        seed = int(run.seed) + int(seed)
        init_state, warm = _initial_policy(c.tok, rc, seed)
        for arm in rc.arms:
            ts = time.time()
            if arm in cached:
                idx = cached[arm]
            else:
                idx = _arm_indices(arm, c.pruned, rc, sim, seed)
                t_sel[arm] = time.time() - ts
                if arm != "random":
                    cached[arm] = idx
            row = _train_and_score(c, idx, rc, seed, init_state, warm)
            per_arm[arm].append(row)
            logger.info("weasel toy seed %d arm %s: %s", seed, arm, row)
    extra = {
        "prune": c.prune_stats.as_dict(),
        "n_train_steps": len(c.train),
        "selection_seconds": t_sel,
        "scorer": rc.scorer,
        "per_seed": per_arm,
    }
    return write_results(
        run.run_dir,
        "weasel",
        _aggregate(per_arm),
        cfg=run.cfg,
        extra=extra,
        wall_time_s=time.time() - t0,
    )
