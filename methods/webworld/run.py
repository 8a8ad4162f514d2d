"""WebWorld's CPU toy for the CLI: ``icml26 experiment=webworld_toy`` (data layer only, spec §3.3).

What it measures (no model is trained yet; see docs/methods/webworld.md):

* format-conversion fidelity on generated A11y trees: App. G's parse-then-generate pipeline
  (``parse_a11y`` -> ``to_xml`` -> ``from_xml``) vs a naive line-by-line converter that ignores
  indentation; metrics are exact tree recovery, parent-link preservation and bid recall;
* trajectory cleaning on generated "Level-1" crawls: share of no-op transitions (``s_{t+1} == s_t``)
  left in the training data with ``drop_noop_transitions`` + ``filter_trajectory`` vs keeping all.
"""

from __future__ import annotations

import logging
import random
import statistics
import time
from dataclasses import dataclass, field

from omegaconf import DictConfig, OmegaConf

from common.tracking import write_results
from methods.webworld.a11y import from_xml, parse_a11y, to_a11y, to_xml
from methods.webworld.data import drop_noop_transitions, filter_trajectory
from methods.webworld.toy import naive_flat_xml_round_trip, parent_map, random_crawl, random_tree

logger = logging.getLogger(__name__)

DEMO_OVERRIDES = ["method.n_trees=40", "method.n_trajectories=40", "method.seeds=[0]"]
HEADLINE = ("webworld/parent_preserved", "naive/parent_preserved")


@dataclass
class ToyConfig:
    """Fields of ``configs/method/webworld.yaml`` (strictly merged: unknown keys raise)."""

    n_trees: int = 300
    tree_nodes: list[int] = field(default_factory=lambda: [5, 40])
    max_depth: int = 5
    n_trajectories: int = 500
    min_steps: int = 3
    max_steps: int = 10
    max_tokens: int = 30_000
    max_turns: int = 30
    blocklist: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    prompts: dict = field(default_factory=dict)


def _conversion(tc: ToyConfig, rng: random.Random, naive: bool) -> dict[str, float]:
    exact, parents, bids = [], [], []
    for _ in range(tc.n_trees):
        t = random_tree(rng, rng.randint(*tc.tree_nodes), tc.max_depth)
        text = to_a11y(t)
        back = naive_flat_xml_round_trip(text) if naive else from_xml(to_xml(parse_a11y(text)))
        exact.append(float(back == t))
        pa, pb = parent_map(t), parent_map(back)
        parents.append(statistics.mean(float(pb.get(i) == p) for i, p in pa.items()))
        want = [n.bid for n in t.walk() if n.bid]
        got = {n.bid for n in back.walk() if n.bid}
        bids.append(statistics.mean(float(b in got) for b in want) if want else 1.0)
    return {
        "tree_exact": statistics.mean(exact),
        "parent_preserved": statistics.mean(parents),
        "bid_recall": statistics.mean(bids),
    }


def _cleaning(tc: ToyConfig, rng: random.Random, clean: bool) -> dict[str, float]:
    kept_traj, trans, noop = 0, 0, 0
    for _ in range(tc.n_trajectories):
        t, _ = random_crawl(rng, min_steps=tc.min_steps, max_steps=tc.max_steps)
        if clean:
            t = drop_noop_transitions(t)
            if not filter_trajectory(
                t, max_tokens=tc.max_tokens, max_turns=tc.max_turns, blocklist=tc.blocklist
            ):
                continue
        kept_traj += 1
        trans += t.n_transitions
        noop += sum(a == b for a, b in zip(t.states, t.states[1:]))
    return {
        "noop_frac": noop / max(trans, 1),
        "transitions": float(trans),
        "trajectories": float(kept_traj),
    }


def run(cfg: DictConfig) -> dict[str, float]:
    """Runs the conversion-fidelity and no-op-cleaning toy per seed; writes results.{json,md}."""
    fields = OmegaConf.to_container(cfg.method, resolve=True)
    fields.pop("name", None)
    tc = ToyConfig(**fields)  # unknown keys raise TypeError
    t0 = time.time()
    per_seed = []
    for s in tc.seeds:
        seed = int(cfg.seed) + s
        row = {}
        for arm, naive in (("webworld", False), ("naive", True)):
            m = _conversion(tc, random.Random(seed), naive)
            m.update(_cleaning(tc, random.Random(seed + 10_000), clean=not naive))
            row[arm] = m
        per_seed.append(row)
    metrics = {
        arm: {k: statistics.mean(r[arm][k] for r in per_seed) for k in per_seed[0][arm]}
        for arm in per_seed[0]
    }
    return write_results(
        cfg.run_dir,
        "webworld",
        metrics,
        cfg=cfg,
        wall_time_s=time.time() - t0,
        notes=(
            f"{tc.n_trees} random A11y trees ({tc.tree_nodes[0]}-{tc.tree_nodes[1]} nodes, depth <= "
            f"{tc.max_depth}) converted A11y -> XML -> tree; {tc.n_trajectories} random crawls of "
            f"{tc.min_steps}-{tc.max_steps} steps; seeds {[int(cfg.seed) + s for s in tc.seeds]}. "
            "webworld = App. G stack parser + drop_noop_transitions + filter_trajectory; naive = "
            "line-by-line conversion ignoring indentation, no cleaning. No world model is trained."
        ),
    )
