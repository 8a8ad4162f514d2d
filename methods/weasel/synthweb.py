"""SynthWeb: a seeded synthetic web-agent corpus for the CPU toy (our toy; not in the paper).

Twelve site templates (eight for training, four held out with disjoint element words) share three
interaction patterns: search (fill the search box, submit, open the result), menu (category →
subcategory → item) and form (fill fields, submit). Each trajectory has 4–6 essential steps and
about twice as many noise steps: ``scroll`` on an identical state, ``hover`` on an irrelevant promo
page, and an erroneous click followed by ``go_back``. Records are AgentLab-format chat messages, so
the library's pruning, parsing and selection run on them unchanged. A page lists the current target
and never another word of the goal, so the due element is identifiable from the goal and the page.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Sequence

__all__ = ["SITES", "make_synthweb", "policy_example"]

logger = logging.getLogger(__name__)

_WORDS = (
    "garden tools shovel rake hose seeds soil pots lamp sofa chair table shelf rug pillow blanket "
    "laptop phone tablet cable charger mouse keyboard monitor printer camera novel poetry comics "
    "atlas cookbook journal magazine guitar piano violin drums flute trumpet ukulele tent boots "
    "jacket gloves scarf helmet bike skates kayak paddle rope lantern stove kettle blender toaster "
    "oven mixer whisk ladle spoon fork plate bowl mug teapot candle vase mirror clock frame basket "
    "wallet purse belt watch ring necklace perfume soap shampoo brush comb towel robe slippers "
    "ticket flight hotel cruise train rental museum concert stadium theatre ferry bus taxi visa "
    "invoice ledger payroll budget report ticketing incident change request asset license vendor "
    "quartz amber cobalt indigo maroon olive"
).split()
_SITE_NAMES = (
    "homegoods electromart bookbarn musicland outdoorhub kitchenpro fashionfit wellness "
    "travelnow servicedesk citymarket archivebay"
).split()
_FILLER = "home about contact help cart account login deals news careers privacy terms".split()
_PROMO = "sale offer banner coupon newsletter promo popup advert sponsor".split()


def _site_pools() -> list[dict]:
    pools = []
    for k, name in enumerate(_SITE_NAMES):
        words = _WORDS[k * 10 : (k + 1) * 10]
        pools.append({"name": name, "words": words, "ood": k >= 8})
    return pools


SITES = _site_pools()


def _tree(rng: random.Random, site: str, names: Sequence[tuple[str, str]]) -> tuple[str, dict]:
    """AXTree text and a name -> bid map; bids are random distinct integers."""
    bids = rng.sample(range(10, 400), len(names))
    lines = [f"RootWebArea '{site}', focused"]
    bid_of = {}
    for (role, name), b in zip(names, bids):
        lines.append(f"\t[{b}] {role} '{name}'")
        bid_of[name] = str(b)
    return "\n".join(lines), bid_of


def _page(
    rng: random.Random,
    site: dict,
    must: Sequence[tuple[str, str]],
    n_lines: int,
    avoid: Sequence[str] = (),
) -> tuple[str, dict]:
    # ``avoid``: the goal's other words. Without it a menu page may list a later goal word beside
    # the current target, and the compact prompt (goal, tree, last action) cannot tell which one
    # is due: the target would not be identifiable from the input.
    blocked = {n for _, n in must} | set(avoid)
    others = [w for w in site["words"] if w not in blocked]
    extra = [("link", w) for w in rng.sample(others, min(len(others), 4))]
    extra += [("link", w) for w in rng.sample(_FILLER, max(0, n_lines - len(must) - len(extra)))]
    items = list(must) + extra
    rng.shuffle(items)
    return _tree(rng, site["name"], items)


def _prompt(goal: str, axtree: str, history: list[str]) -> str:
    hist = "\n".join(history[-3:]) if history else "none"
    return (
        "# Instructions\nYou are a web agent. Reply with <think> and <action>.\n\n"
        f"## Goal:\n{goal}\n\n# Observation of current step:\n## AXTree:\n{axtree}\n\n"
        f"# History of interaction with the task:\n{hist}\n\n"
        "# Action space:\nclick(bid) fill(bid, text) hover(bid) scroll(dx, dy) go_back()\n"
    )


def _record(goal: str, axtree: str, history: list[str], why: str, action: str, kind: str) -> dict:
    return {
        "messages": [
            {"role": "system", "content": "You are a helpful web agent."},
            {"role": "user", "content": _prompt(goal, axtree, history)},
            {"role": "assistant", "content": f"<think>{why}</think><action>{action}</action>"},
        ],
        "kind": kind,
    }


def _essential_plan(rng: random.Random, site: dict) -> tuple[str, list[tuple[str, str, str]]]:
    """Goal and a list of (page role, target name, action kind) for the essential steps."""
    w = rng.sample(site["words"], 4)
    pattern = rng.choice(["search", "menu", "form"])
    if pattern == "search":
        goal = f"search for {w[0]} and open the {w[1]} result"
        plan = [
            ("textbox", "search", "fill:" + w[0]),
            ("button", "submit", "click"),
            ("link", w[1], "click"),
            ("button", "add", "click"),
        ]
    elif pattern == "menu":
        goal = f"open {w[0]} then {w[1]} then the {w[2]} item"
        plan = [("link", w[0], "click"), ("link", w[1], "click"), ("link", w[2], "click")]
        plan.append(("link", w[3], "click"))
        goal += f" and {w[3]}"
    else:
        goal = f"fill the form with name {w[0]} and city {w[1]} then submit"
        plan = [
            ("textbox", "name", "fill:" + w[0]),
            ("textbox", "city", "fill:" + w[1]),
            ("button", "submit", "click"),
        ]
        plan.append(("link", "confirm", "click"))
    if rng.random() < 0.5:
        plan.append(("link", "done", "click"))
    if rng.random() < 0.3:
        plan.append(("link", "receipt", "click"))
    return goal, plan


def _trajectory(rng: random.Random, site: dict, noise: bool) -> list[dict]:
    goal, plan = _essential_plan(rng, site)
    goal_words = set(goal.split())
    history: list[str] = []
    recs: list[dict] = []
    for role, name, kind in plan:
        axtree, bid_of = _page(rng, site, [(role, name)], rng.randint(6, 10), goal_words - {name})
        b = bid_of[name]
        if kind.startswith("fill:"):
            text = kind.split(":", 1)[1]
            action, why = (
                f"fill('{b}', '{text}')",
                f"The goal mentions {text}, so I type it into {name}.",
            )
        else:
            action, why = f"click('{b}')", f"The goal needs {name}, so I click the {name} element."
        if noise:
            for _ in range(rng.choice([0, 1, 1, 2])):  # (a) redundant scroll, identical state
                recs.append(
                    _record(
                        goal,
                        axtree,
                        history,
                        "I scroll to see more of the page.",
                        "scroll(0, 300)",
                        "scroll",
                    )
                )
                history = history + ["scroll(0, 300)"]
            if rng.random() < 0.5:  # (b) hover on an irrelevant promo page
                promo, pbid = _tree(rng, "promo", [("link", p) for p in rng.sample(_PROMO, 5)])
                hb = rng.choice(list(pbid.values()))
                recs.append(
                    _record(
                        goal,
                        promo,
                        history,
                        "I hover over the banner to inspect it.",
                        f"hover('{hb}')",
                        "hover",
                    )
                )
                history = history + [f"hover('{hb}')"]
            if rng.random() < 0.5:  # (c) erroneous click, then go_back from an unrelated page
                wrong = rng.choice([n for n in bid_of if n != name])
                recs.append(
                    _record(
                        goal,
                        axtree,
                        history,
                        f"I click the {wrong} element.",
                        f"click('{bid_of[wrong]}')",
                        "error",
                    )
                )
                history = history + [f"click('{bid_of[wrong]}')"]
                off, _ = _page(rng, site, [("link", rng.choice(_FILLER))], rng.randint(6, 10))
                recs.append(
                    _record(
                        goal,
                        off,
                        history,
                        "This page does not match the goal, I go back.",
                        "go_back()",
                        "back",
                    )
                )
                history = history + ["go_back()"]
        recs.append(_record(goal, axtree, history, why, action, "essential"))
        history = history + [action]
    return recs


def make_synthweb(
    n_train_traj: int = 150, n_test_steps: int = 200, seed: int = 0
) -> tuple[list[dict], list[dict], list[dict]]:
    """``(train records, in-domain test steps, OOD test steps)``; test steps are essential only.

    Source: our construction (the CPU toy corpus), not in the paper.
    """
    rng = random.Random(seed)
    train_sites = [s for s in SITES if not s["ood"]]
    ood_sites = [s for s in SITES if s["ood"]]
    train = [
        r for _ in range(n_train_traj) for r in _trajectory(rng, rng.choice(train_sites), True)
    ]

    def _test(sites: list[dict]) -> list[dict]:
        out: list[dict] = []
        while len(out) < n_test_steps:
            out += _trajectory(rng, rng.choice(sites), False)
        return out[:n_test_steps]

    return train, _test(train_sites), _test(ood_sites)


def policy_example(rec: dict, name_first: bool = False) -> dict[str, str]:
    """Compact prompt/completion for the tiny policy: goal, AXTree, last action → action.

    Source: our choice for the toy (deviations table, "toy policy input"), not in the paper.

    ``name_first``: write each tree line as ``name role [bid]`` instead of ``[bid] role name``, so
    the bid follows the element name it must be looked up by (a causal model sees the name before
    it reaches the bid).
    """
    from .data import parse_agentlab_prompt

    sec = parse_agentlab_prompt(rec["messages"][1]["content"])
    last = sec["history"].split("\n")[-1]
    action = re.search(r"<action>(.*?)</action>", rec["messages"][2]["content"]).group(1)
    tree = re.sub(r"RootWebArea[^\n]*\n?", "", sec["axtree"]).replace("'", "")
    if name_first:
        tree = re.sub(r"\[(\w+)\] (\w+) ([^\n]+)", r"\3 \2 [\1]", tree)
    prompt = f"goal : {sec['goal']} tree : {tree} last : {last} action :"
    return {"prompt": " ".join(prompt.split()), "completion": " " + action}
