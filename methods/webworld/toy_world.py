"""Generated A11y pages and crawl trajectories for the CPU toy and tests (our toy design, data layer only).

The generator produces small sites of tab-indented A11y pages with bids, and random "Level-1" crawls
over them. Some actions (clicking static text, ``noop``, scrolling a short page) leave the page
unchanged, so the no-op filter of §3.3 has something to remove.
"""

from __future__ import annotations

import random

from methods.webworld.a11y import A11yNode, to_a11y
from methods.webworld.data import Trajectory

__all__ = ["naive_flat_xml_round_trip", "parent_map", "random_crawl", "random_page", "random_tree"]

_WORDS = ["home", "shop", "news", "about", "help", "sale", "cart", "blog", "team", "jobs", "docs"]
_LEAF_ROLES = ["link", "button", "StaticText", "checkbox", "textbox", "img", "heading"]
_BOX_ROLES = ["navigation", "list", "listitem", "group", "paragraph", "table", "row", "cell"]


def random_tree(rng: random.Random, n_nodes: int = 12, max_depth: int = 4) -> A11yNode:
    """A random A11y tree with ``n_nodes`` nodes under a ``RootWebArea``; bids are unique."""
    if n_nodes < 1:
        raise ValueError(f"n_nodes must be >= 1, got {n_nodes}")
    root = A11yNode("RootWebArea", rng.choice(_WORDS).title(), None, {"focused": ""})
    boxes: list[tuple[A11yNode, int]] = [(root, 0)]
    for i in range(n_nodes - 1):
        parent, d = rng.choice(boxes)
        boxy = d + 1 < max_depth and rng.random() < 0.35
        role = rng.choice(_BOX_ROLES if boxy else _LEAF_ROLES)
        name = " ".join(rng.sample(_WORDS, rng.randint(0, 2)))
        props: dict[str, str] = {}
        if role in ("link", "button", "checkbox", "textbox"):
            props["clickable"] = ""
        if role == "checkbox":
            props["checked"] = rng.choice(["'true'", "'false'"])
        if role == "textbox":
            props["value"] = "'" + rng.choice(["", "a, b", "x"]) + "'"
        bid = None if role == "StaticText" else str(10 + i)
        node = A11yNode(role, name, bid, props)
        parent.children.append(node)
        if boxy:
            boxes.append((node, d + 1))
    return root


def random_page(rng: random.Random, title: str, links: list[str]) -> str:
    """One A11y page: a title root, a navigation with links, a checkbox, a search box, some text."""
    root = A11yNode("RootWebArea", title, None, {"focused": ""})
    nav = A11yNode("navigation", "", "1")
    nav.children = [A11yNode("link", t, str(2 + i), {"clickable": ""}) for i, t in enumerate(links)]
    root.children = [
        nav,
        A11yNode("StaticText", f"welcome to {title.lower()} {rng.randint(0, 99)}"),
        A11yNode("checkbox", "remember", "40", {"clickable": "", "checked": "'false'"}),
        A11yNode("textbox", "search", "41", {"clickable": "", "value": "''"}),
    ]
    return to_a11y(root)


def random_crawl(rng: random.Random, n_pages: int = 5, min_steps: int = 3, max_steps: int = 8):
    """A random crawl over a generated site: returns ``(trajectory, n_noop)``.

    Actions: click a link (go to that page), click the checkbox (flip it), fill the search box,
    click static text or ``noop()`` / ``scroll(0, 100)`` (no visible change: a no-op transition).
    """
    titles = [w.title() for w in rng.sample(_WORDS, n_pages)]
    pages = {t: random_page(rng, t, [x for x in titles if x != t]) for t in titles}
    cur = rng.choice(titles)
    state = pages[cur]
    states, actions, n_noop = [state], [], 0
    for _ in range(rng.randint(min_steps, max_steps)):
        kind = rng.choice(["link", "link", "check", "fill", "noop"])
        if kind == "link":
            links = [x for x in titles if x != cur]
            j = rng.randrange(len(links))
            actions.append(f"click('{2 + j}')")
            cur = links[j]
            state = pages[cur]
        elif kind == "check":
            actions.append("click('40')")
            flip = "'true'" if "checked='false'" in state else "'false'"
            state = state.replace("checked='false'", "X").replace("checked='true'", "X")
            state = state.replace("X", f"checked={flip}")
        elif kind == "fill":
            q = rng.choice(_WORDS)
            actions.append(f"fill('41', '{q}')")
            lines = state.split("\n")
            lines = [
                ln.split(", value=")[0] + f", value='{q}'" if "[41]" in ln else ln for ln in lines
            ]
            state = "\n".join(lines)
        else:
            actions.append(rng.choice(["noop()", "scroll(0, 100)", "hover('1')"]))
        if state == states[-1]:
            n_noop += 1
        states.append(state)
    return Trajectory("", states, actions, source="level1"), n_noop


def naive_flat_xml_round_trip(text: str) -> A11yNode:
    """Baseline converter: each A11y line becomes a top-level XML element (indentation ignored).

    This is what a line-by-line regex rewrite does without App. G's depth stack; it keeps ids and
    names but loses every parent/child link below the top level.
    """
    from methods.webworld.a11y import _ROOT, from_xml, parse_a11y, to_xml

    flat = "\n".join(ln.strip() for ln in text.split("\n") if ln.strip())
    t = parse_a11y(flat)
    return from_xml(to_xml(t)) if t.role == _ROOT else A11yNode(_ROOT, children=[t])


def parent_map(t: A11yNode) -> dict[int, str]:
    """Pre-order index -> parent signature (role/bid/name of the parent, '' for top level)."""
    from methods.webworld.a11y import _ROOT

    out: dict[int, str] = {}
    idx = 0

    def rec(n: A11yNode, parent: str) -> None:
        nonlocal idx
        if n.role != _ROOT:
            out[idx] = parent
            idx += 1
            parent = f"{n.role}|{n.bid}|{n.name}"
        else:
            parent = ""
        for c in n.children:
            rec(c, parent)

    rec(t, "")
    return out
