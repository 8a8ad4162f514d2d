"""The toy's SFT data (ours, not in the paper): CGKE vs uniform SFT at an equal number of items.

Today's toy (every knob at its default): CGKE gets its whole item pool (:func:`build_cgke_dataset`
with the toy's per-region counts), uniform SFT the same number of (question, gold) pairs drawn with
replacement, and both train ``sft_steps`` steps. The issue-43 knobs of :class:`ToyConfig`:

- ``sft_items_per_fact`` > 0 fixes the budget at that many items per fact for every arm; CGKE's items
  are then a random subset of its pool (or the pool, repeated, plus a random remainder), so its mix of
  regions and strategies is kept in expectation;
- ``sft_epochs`` > 0 trains ceil(epochs × items / batch) steps instead of ``sft_steps``;
- ``uniform_draw="cover"`` draws every fact once per shuffled round instead of with replacement;
- the ``cgke_plain`` arm takes CGKE's items (so its per-region counts) but replaces each by its plain
  (question, gold) pair: allocation without augmentation.
"""

from __future__ import annotations

import math
import random

from .augment import AugmentConfig, build_cgke_dataset
from .config import ToyConfig

UNIFORM_DRAWS = ("replacement", "cover")


def cgke_pool(world, profiles, cfg: ToyConfig, generator):
    """CGKE's full item pool: ``(pairs, questions, stats)``; ``questions[i]`` is the seed question
    whose augmentation produced ``pairs[i]`` (region-specific augmentation, paper Fig. 2)."""
    acfg = AugmentConfig(
        n_mastered=cfg.n_mastered,
        n_confused=cfg.n_confused,
        n_missing=cfg.n_missing,
        qa_template="{question}",
        answer_template="{answer} {rationale}",
    )
    ds, stats = build_cgke_dataset(profiles, generator, acfg, return_stats=True)
    pairs = [(m[0]["content"], m[1]["content"]) for m in ds["messages"]]
    return pairs, list(ds["id"]), stats


def budget(cfg: ToyConfig, n_facts: int, n_pool: int) -> int:
    """Items per arm: CGKE's pool size (default) or ``round(sft_items_per_fact × n_facts)``."""
    return (
        n_pool if cfg.sft_items_per_fact <= 0 else max(1, round(cfg.sft_items_per_fact * n_facts))
    )


def sft_steps(cfg: ToyConfig, n_items: int) -> int:
    """``sft_steps`` (default), or ceil(``sft_epochs`` × items / batch) when ``sft_epochs`` > 0."""
    if cfg.sft_epochs <= 0:
        return cfg.sft_steps
    return max(1, math.ceil(cfg.sft_epochs * n_items / cfg.batch_size))


def uniform_pairs(world, n: int, draw: str, seed: int) -> list[tuple[str, str]]:
    """``n`` plain (question, gold) pairs over all facts: with replacement (today's) or covering
    every fact once per shuffled round (``draw="cover"``)."""
    if draw not in UNIFORM_DRAWS:
        raise ValueError(f"uniform_draw must be one of {UNIFORM_DRAWS}, got {draw!r}")
    rng = random.Random(seed + 1)
    n_f = len(world.facts)
    if draw == "replacement":
        idx = [rng.randrange(n_f) for _ in range(n)]
    else:
        idx = []
        while len(idx) < n:
            idx += rng.sample(range(n_f), n_f)
        idx = idx[:n]
    return [(world.facts[i][0], world.facts[i][1]) for i in idx]


def subset_indices(n_pool: int, n: int, seed: int) -> list[int]:
    """Indices of ``n`` pool items: the whole pool while ``n`` ≥ its size (repeated), then a random
    sample without replacement for the remainder; ``n`` = pool size gives the pool in order."""
    idx = list(range(n_pool)) * (n // n_pool)
    return idx + sorted(random.Random(seed + 5).sample(range(n_pool), n % n_pool))


def sft_arm_pairs(world, pool, questions, cfg: ToyConfig, seed: int) -> dict[str, list]:
    """The SFT arms' pairs at equal budget: ``vanilla_sft``, ``cgke`` and ``cgke_plain``."""
    n = budget(cfg, len(world.facts), len(pool))
    idx = subset_indices(len(pool), n, seed)
    return {
        "vanilla_sft": uniform_pairs(world, n, cfg.uniform_draw, seed),
        "cgke": [pool[i] for i in idx],
        "cgke_plain": [(questions[i], world.gold[questions[i]]) for i in idx],
    }
