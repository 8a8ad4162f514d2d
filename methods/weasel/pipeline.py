"""End-to-end Weasel selection (official README pipeline): prune → segment → score → greedy → subset."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .config import WeaselConfig
from .data import build_subset, parse_records, segment_by_goal
from .pruning import PruneStats, prune_record
from .scoring import TextSimilarity, distance_matrix, importance
from .select import compute_budget, greedy_select_many

__all__ = ["WeaselConfig", "WeaselSelector"]

logger = logging.getLogger(__name__)


class WeaselSelector:
    """Runs the Weasel pipeline over AgentLab-format chat records.

    Source: the paper's pipeline (abstract / project page), in the order of the official README
    (``prune_axtree.py``, ``prepare_scores.py``, ``select_greedy.py``, ``postprocess_dataset.py``).

    Args:
        sim: the text similarity (a BERTScore-style scorer).
        cfg: selection settings.

    Example:
        >>> sel = WeaselSelector(JaccardSimilarity(), WeaselConfig(budget_fixed=3))
        >>> subset = sel.run(records)  # list of pruned chat records
    """

    def __init__(self, sim: TextSimilarity, cfg: WeaselConfig | None = None) -> None:
        self.sim = sim
        self.cfg = cfg or WeaselConfig()
        self.prune_stats = PruneStats()
        self.scores: list[dict] = []

    def select_indices(self, records: Sequence[dict]) -> tuple[list[dict], list[int]]:
        """Returns ``(pruned records, selected record indices)`` in trajectory order."""
        c = self.cfg
        if c.prune:
            stats = PruneStats()
            pruned = [
                prune_record(r, c.window, c.fallback, stats, c.compat_repo_regex)[0]
                for r in records
            ]
            self.prune_stats = stats
        else:
            pruned = list(records)
        steps, _ = parse_records(pruned, allow_missing_goal=c.allow_missing_goal)
        by_index = {s.index: s for s in steps}
        trajs = segment_by_goal(steps)
        phis, dists, budgets = [], [], []
        for traj in trajs:
            tr = [by_index[i] for i in traj.index]
            n = len(tr)
            if c.importance_off:
                phi = np.zeros(n)
            else:
                phi = importance(traj.goal, [s.obs_history for s in tr], self.sim, c.normalize)
            phis.append(phi)
            dists.append(
                distance_matrix(
                    [s.axtree for s in tr], [s.assistant for s in tr], self.sim, c.combine
                )
            )
            # an empty trajectory selects nothing whatever its budget
            budgets.append(max(1, compute_budget(n, c.budget_mode, c.budget_fixed, c.budget_pct)))
        # one vectorised greedy over all trajectories (the same sets as greedy_select on each)
        chosen = greedy_select_many(phis, dists, budgets, c.lam)
        selected: list[int] = []
        self.scores = []
        for traj, phi, J in zip(trajs, phis, chosen):
            selected += [traj.index[j] for j in J]
            self.scores.append({"index": traj.index, "importance": phi.tolist(), "selected": J})
        return pruned, selected

    def run(self, records: Sequence[dict], sidecar: str | Path | None = None) -> list[dict]:
        """The selected, pruned, length-filtered and capped training records (official ``postprocess_dataset.py``)."""
        pruned, selected = self.select_indices(records)
        c = self.cfg
        out = build_subset(pruned, selected, c.max_user_chars, c.max_examples, c.seed)
        if sidecar is not None:
            Path(sidecar).write_text(
                json.dumps(
                    {
                        "config": asdict(c),
                        "prune": self.prune_stats.as_dict(),
                        "trajectories": self.scores,
                    }
                )
            )
        logger.info(
            "weasel: %d of %d steps selected, %d kept", len(selected), len(records), len(out)
        )
        return out
