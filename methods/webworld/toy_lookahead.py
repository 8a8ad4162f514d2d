"""The toy's lookahead experiment: "reach page X" episodes, greedy vs best-of-k (paper §5.2, Table 6).

A noisy agent (the correct link with probability ``agent_p``, else a random meaningful action) acts
on a held-out site; each step it samples ``k`` candidates, a simulator predicts the next page of each
without committing and the value (1 if the predicted title is the target) picks one, ties going to
the first sample (:func:`methods.webworld.search.lookahead_search`). Simulators: the ground-truth
browser (oracle), a copy model (no change), the learned world model, and a noisy oracle that returns
the true page with probability ``noisy_acc`` and otherwise a page with a wrong title (the diagnosis
arm of docs/methods/webworld.md "Diagnosis"). ``log`` collects one record per decision: candidates,
true and predicted next titles, values, the chosen index, the target.
"""

from __future__ import annotations

import copy
import math
import random
import statistics

from common.metrics import ci_halfwidth
from methods.webworld.search import lookahead_search
from methods.webworld.simulator import WebWorldSimulator
from methods.webworld.toy_sites import ToyBrowser, page_title, shortest_path_actions

ARMS = ("greedy", "bon_copy", "bon_learned", "bon_oracle", "bon_noisy")


class OracleSim:
    """The ground-truth browser behind the ``peek`` interface."""

    def __init__(self, browser: ToyBrowser) -> None:
        self.b = browser

    def peek(self, actions):
        return [(copy.deepcopy(self.b).step(a), {}) for a in actions]


class CopySim:
    """A world model that predicts no change (the "copy" baseline)."""

    def __init__(self, browser: ToyBrowser) -> None:
        self.b = browser

    def peek(self, actions):
        return [(self.b.state(), {}) for _ in actions]


class NoisyOracleSim:
    """The true next page with probability ``acc``; otherwise, with ``error="title"``, a one-line
    page whose title is drawn uniformly from the site's other titles (so a wrong prediction can name
    the target: a false positive), with ``error="copy"`` the current page (no change: never a false
    positive). ``rng`` is the sim's own stream, so the agent's samples stay paired with greedy."""

    def __init__(
        self, browser: ToyBrowser, acc: float, rng: random.Random, error: str = "title"
    ) -> None:
        if not 0.0 <= acc <= 1.0:
            raise ValueError(f"acc must lie in [0, 1], got {acc}")
        if error not in ("title", "copy"):
            raise ValueError(f"error must be 'title' or 'copy', got {error!r}")
        self.b, self.acc, self.rng, self.error = browser, acc, rng, error

    def peek(self, actions):
        out = []
        for true in OracleSim(self.b).peek(actions):
            if self.rng.random() < self.acc:
                out.append(true)
                continue
            if self.error == "copy":
                out.append((self.b.state(), {}))
                continue
            wrong = [t for t in sorted(self.b.site.pages) if t != page_title(true[0])]
            out.append((f"RootWebArea '{self.rng.choice(wrong)}', focused", {}))
        return out


class _Recording:
    """Wraps a simulator's ``peek``: keeps each candidate's prediction for the decision record and,
    with ``min_conf > 0``, replaces a prediction whose confidence (geometric-mean token probability,
    ``WebWorldSimulator(return_logprobs=True)``) is below ``min_conf`` by the current page (no
    information: it can never name the target)."""

    def __init__(self, sim, browser: ToyBrowser, min_conf: float = 0.0) -> None:
        self.sim, self.b, self.min_conf = sim, browser, min_conf
        self.preds: dict[str, tuple[str, dict]] = {}

    def peek(self, actions):
        out = []
        for a, (s, info) in zip(actions, self.sim.peek(actions), strict=True):
            conf = info.get("confidence")
            if self.min_conf > 0 and conf is not None and not conf >= self.min_conf:
                s = self.b.state()
            self.preds[a] = (s, info)
            out.append((s, info))
        return out


def _learned_sim(gen, tc, state: str) -> WebWorldSimulator:
    sim = WebWorldSimulator(
        gen,
        window=10,
        temperature=0.0,
        max_tokens=tc.title_tokens,
        stop_at_first_line=True,
        prompts=tc.prompts or None,
        return_logprobs=True,  # confidence for the threshold and the decision records
    )
    sim.reset(state)
    return sim


def _peeker(arm: str, b: ToyBrowser, sim, tc, noise_rng: random.Random):
    if arm == "bon_copy":
        return CopySim(b)
    if arm == "bon_oracle":
        return OracleSim(b)
    if arm == "bon_noisy":
        return NoisyOracleSim(b, tc.noisy_acc, noise_rng, tc.noisy_error)
    return _Recording(sim, b, tc.lookahead_min_conf)


def _decide(arm, agent, b, sim, tc, target, noise_rng, log, t) -> str:
    """One step's action; with ``log``, appends the decision record."""
    if arm == "greedy":  # the first of the same k samples (common random numbers)
        return [agent() for _ in range(tc.k)][0]
    rec = _peeker(arm, b, sim, tc, noise_rng)
    rec = rec if isinstance(rec, _Recording) else _Recording(rec, b)
    a, info = lookahead_search(agent, rec, lambda s: float(page_title(s) == target), k=tc.k)
    if log is not None:
        cands = info["candidates"]
        got = [rec.preds.get(c, ("", {})) for c in cands]
        log.append(
            dict(
                arm=arm,
                step=t,
                target=target,
                current=b.title,
                cands=cands,
                true=[page_title(s) for s, _ in OracleSim(b).peek(cands)],
                pred=[page_title(s) for s, _ in got],
                conf=[i.get("confidence") for _, i in got],
                values=info["values"],
                chosen=info["chosen"],
            )
        )
    return a


def run_episode(
    site, rng: random.Random, arm: str, tc, gen=None, log: list | None = None, noise_seed: int = 0
) -> float:
    """One "reach page X" episode (start and target drawn from ``rng``; X two or more links away
    when possible; budget = shortest path + ``tc.extra_steps``); returns 1.0 on success. The noisy
    oracle draws its errors from its own stream (``noise_seed``), so the agent's samples stay the
    same as in the other arms."""
    b = ToyBrowser(site)
    pages = sorted(site.pages)
    start = rng.choice(pages)
    dist = {p: len(shortest_path_actions(site, start, p) or []) for p in pages}
    far = [p for p in pages if dist[p] >= 2] or [p for p in pages if p != start]
    target = rng.choice(far)
    b.reset(start)
    noise_rng = random.Random(noise_seed)
    sim = _learned_sim(gen, tc, b.state()) if arm == "bon_learned" else None

    def agent() -> str:
        acts = b.actions(rng)
        cur = b.view.page
        if cur in site.pages and rng.random() < tc.agent_p:
            nxt = shortest_path_actions(site, cur, target)[0]
            return next(f"click('{bid}')" for bid, t in site.pages[cur].links if t == nxt)
        return rng.choice(acts)

    for t in range(dist[target] + tc.extra_steps):
        a = _decide(arm, agent, b, sim, tc, target, noise_rng, log, t)
        s = b.step(a)
        if sim is not None:
            sim.commit(a, s)
        if b.title == target:
            return 1.0
    return 0.0


def lookahead(tc, test_sites: list, gen, seed: int, log: list | None = None) -> dict:
    """Every arm of ``tc.lookahead_arms`` on ``tc.episodes`` episodes per seed of ``tc.seeds``
    (common random numbers: episode ``e`` of seed ``s`` draws the same start, target and agent
    samples in every arm). Returns ``{arm: {"success", "success_ci95", "success_seed<s>"}}``; the
    per-episode outcomes are in ``[arm]["_episodes"]`` (a list per seed) for paired statistics."""
    out: dict[str, dict] = {}
    for arm in tc.lookahead_arms:
        per_seed, episodes = [], []
        for s in tc.seeds:
            succ = []
            for e in range(tc.episodes):
                rng = random.Random(1_000_003 * (seed + s) + e)
                rec = None
                if log is not None:
                    rec = []
                succ.append(
                    run_episode(
                        test_sites[e % len(test_sites)],
                        rng,
                        arm,
                        tc,
                        gen,
                        rec,
                        noise_seed=7_919 * (seed + s) + e,
                    )
                )
                if log is not None:
                    log.extend(dict(r, seed=s, episode=e) for r in rec)
            per_seed.append(statistics.mean(succ))
            episodes.append(succ)
        out[arm] = {"success": statistics.mean(per_seed), "success_ci95": ci_halfwidth(per_seed)}
        out[arm].update({f"success_seed{s}": v for s, v in zip(tc.seeds, per_seed, strict=True)})
        out[arm]["_episodes"] = episodes
    return out


def decision_stats(log: list[dict]) -> dict[str, float]:
    """In-context statistics of the simulator from the decision records of one arm.

    ``title_acc``: predicted next title = true next title, over all candidates; ``title_acc_change``
    over the candidates whose true next title differs from the current page; ``recall``: share of the
    candidates that truly reach the target whose prediction names it; ``false_pos``: share of the
    others whose prediction names it; ``tie``: decisions whose values are all equal; ``decisive``:
    decisions where the true values differ (some but not all candidates reach the target);
    ``changed``: decisions whose chosen index is not 0 (greedy's choice); ``action_sensitive``:
    among decisions with link clicks to two or more different pages, the share whose predicted titles
    for those clicks differ (0 = the simulator ignores which link is clicked); ``n_decisions``.
    """
    cands = [(r, i) for r in log for i in range(len(r["cands"]))]
    hit = [r["pred"][i] == r["true"][i] for r, i in cands]
    change = [r["pred"][i] == r["true"][i] for r, i in cands if r["true"][i] != r["current"]]
    pos = [r["pred"][i] == r["target"] for r, i in cands if r["true"][i] == r["target"]]
    neg = [r["pred"][i] == r["target"] for r, i in cands if r["true"][i] != r["target"]]
    truev = [[float(t == r["target"]) for t in r["true"]] for r in log]
    sens = []
    for r in log:
        idx = [i for i, c in enumerate(r["cands"]) if c.startswith("click")]
        idx = [i for i in idx if r["true"][i] != r["current"]]
        if len({r["true"][i] for i in idx}) >= 2:
            sens.append(len({r["pred"][i] for i in idx}) > 1)

    def mean(x):
        return statistics.mean(x) if x else math.nan

    return {
        "title_acc": mean(hit),
        "title_acc_change": mean(change),
        "recall": mean(pos),
        "false_pos": mean(neg),
        "tie": mean([len(set(r["values"])) == 1 for r in log]),
        "decisive": mean([len(set(v)) > 1 for v in truev]),
        "changed": mean([r["chosen"] != 0 for r in log]),
        "action_sensitive": mean(sens),
        "n_multi_link": float(len(sens)),
        "n_decisions": float(len(log)),
        "n_positive": float(len(pos)),
    }
