"""Synthetic A11y websites with a deterministic browser, for the our toy design "MiniWorld" toy and tests.

Each :class:`ToySite` has a few pages. A page shows its title as the ``RootWebArea`` name, links to
other pages (a link's name is the target page's title), a site-specific text, a search textbox with
a ``Search`` button and a checkbox. :class:`ToyBrowser` is the ground-truth environment:

* ``click(link)`` opens the target page (its title equals the link name);
* ``fill(textbox, q)`` sets ``value='q'`` on the same page;
* ``click(Search)`` with a non-empty value opens a page titled ``Results for q``;
* ``click(checkbox)`` flips ``checked``;
* ``go_back()`` restores the previous page exactly (this needs the history).

Bids and texts are site-specific: a site has one navigation (the link to a page carries the same bid
on every page), one header (search box, Search button, checkbox) and one footer text, while the set of
links differs per page. On a held-out site the *main effect* of an action is predictable from the
visible state (the clicked link's name) and, for ``go_back``, from the history; which links a newly
opened page shows is not.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from methods.webworld.a11y import A11yNode, parse_a11y, to_a11y
from methods.webworld.actions import ActionParseError, parse_action
from methods.webworld.data import Trajectory, drop_noop_transitions

__all__ = [
    "TITLE_WORDS",
    "ToyBrowser",
    "ToySite",
    "crawl",
    "make_sites",
    "page_title",
    "shortest_path_actions",
]

TITLE_WORDS = (
    "home shop news about help sale cart blog team jobs docs forum music books games travel food "
    "sport cars maps photos video mail chat store deals login tickets events weather"
).split()
QUERY_WORDS = "red blue shoes lamp phone desk tea rice pasta bike tent boots hat coat sofa".split()
BODY_WORDS = "alpha beta gamma delta omega sigma kappa lambda zeta theta iota rho tau".split()


@dataclass
class ToyPage:
    """Static layout of one page: bids are site-specific."""

    title: str
    links: list[tuple[str, str]]  # (bid, target title)
    body: str
    textbox: str
    search: str
    checkbox: str


@dataclass
class ToySite:
    """A generated site: pages keyed by title, and the start page."""

    pages: dict[str, ToyPage]
    start: str
    results_body: str = ""
    bids: dict[str, str] = field(default_factory=dict)  # results page: link bid

    def graph(self) -> dict[str, list[str]]:
        """Adjacency: page title -> titles it links to."""
        return {t: [x for _, x in p.links] for t, p in self.pages.items()}


def make_sites(n: int, rng: random.Random, n_pages: int = 6, n_links: tuple[int, int] = (2, 3)):
    """Generates ``n`` sites of ``n_pages`` pages each (a ring plus random extra links).

    Raises:
        ValueError: if ``n < 1`` or ``n_pages`` is outside ``[2, len(TITLE_WORDS)]``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not 2 <= n_pages <= len(TITLE_WORDS):
        raise ValueError(f"n_pages must be in [2, {len(TITLE_WORDS)}], got {n_pages}")
    sites = []
    for _ in range(n):
        titles = rng.sample(TITLE_WORDS, n_pages)
        # a site-wide navigation and header: the link to a page has the same bid on every page of the
        # site, as do the search box, the Search button and the checkbox; the footer text is the
        # site's own. What a page links to is drawn per page.
        drawn = [str(b) for b in rng.sample(range(10, 100), n_pages + 3)]
        nav, controls = dict(zip(titles, drawn[:n_pages], strict=True)), drawn[n_pages:]
        body = " ".join(rng.sample(BODY_WORDS, 2))
        pages = {}
        for i, t in enumerate(titles):
            others = [x for x in titles if x != t]
            ring = titles[(i + 1) % n_pages]
            k = min(rng.randint(*n_links), len(others))
            targets = [ring] + rng.sample([x for x in others if x != ring], k - 1)
            rng.shuffle(targets)
            pages[t] = ToyPage(
                title=t,
                links=[(nav[x], x) for x in targets],
                body=body,
                textbox=controls[0],
                search=controls[1],
                checkbox=controls[2],
            )
        site = ToySite(pages, start=titles[0], results_body=rng.choice(BODY_WORDS))
        site.bids["results_link"] = nav[site.start]
        sites.append(site)
    return sites


def page_title(state: str) -> str | None:
    """The ``RootWebArea`` name of an A11y state, or None if the first line has none."""
    first = state.strip().split("\n", 1)[0] if state.strip() else ""
    if not first.lstrip().startswith(("RootWebArea", "[")):
        return None
    try:
        node = parse_a11y(first.strip())
    except ValueError:
        return None
    return node.name if node.role == "RootWebArea" else None


@dataclass
class _View:
    page: str  # title, or "\x00results:q"
    value: str = ""
    checked: bool = False


class ToyBrowser:
    """Deterministic ground-truth browser over one :class:`ToySite` (the toy's oracle simulator)."""

    def __init__(self, site: ToySite) -> None:
        self.site = site
        self.reset()

    def reset(self, page: str | None = None) -> str:
        """Opens ``page`` (default: the site's start page) with a fresh history; returns the state."""
        page = page or self.site.start
        if page not in self.site.pages:
            raise ValueError(f"page must be one of {sorted(self.site.pages)}, got {page!r}")
        self.memory: dict[str, tuple[str, bool]] = {}
        self.view = _View(page)
        self.back: list[_View] = []
        return self.state()

    def _render(self, v: _View) -> str:
        if v.page.startswith("\x00results:"):
            q = v.page.split(":", 1)[1]
            root = A11yNode("RootWebArea", f"Results for {q}", None, {"focused": ""})
            root.children = [
                A11yNode("StaticText", f"{self.site.results_body} results"),
                A11yNode(
                    "link", self.site.start, self.site.bids["results_link"], {"clickable": ""}
                ),
            ]
            return to_a11y(root)
        p = self.site.pages[v.page]
        root = A11yNode("RootWebArea", p.title, None, {"focused": ""})
        root.children = [A11yNode("link", t, b, {"clickable": ""}) for b, t in p.links]
        root.children += [
            A11yNode("StaticText", p.body),
            A11yNode("textbox", "search", p.textbox, {"clickable": "", "value": f"'{v.value}'"}),
            A11yNode("button", "Search", p.search, {"clickable": ""}),
            A11yNode(
                "checkbox",
                "remember",
                p.checkbox,
                {"clickable": "", "checked": "'true'" if v.checked else "'false'"},
            ),
        ]
        return to_a11y(root)

    def state(self) -> str:
        """The current page state (A11y text)."""
        return self._render(self.view)

    @property
    def title(self) -> str:
        """The current page's title."""
        return page_title(self.state()) or ""

    def _open(self, page: str) -> None:
        self.memory[self.view.page] = (self.view.value, self.view.checked)
        self.back.append(self.view)
        value, checked = self.memory.get(page, ("", False))
        self.view = _View(page, value, checked)

    def step(self, action: str) -> str:
        """Applies one action string; unknown bids and unsupported actions leave the page as is."""
        try:
            a = parse_action(action)
        except ActionParseError:
            return self.state()
        v = self.view
        if a.name == "go_back":
            if self.back:
                self.memory[v.page] = (v.value, v.checked)
                self.view = self.back.pop()
            return self.state()
        if v.page.startswith("\x00results:"):
            if a.name == "click" and a.bid == self.site.bids["results_link"]:
                self._open(self.site.start)
            return self.state()
        p = self.site.pages[v.page]
        if a.name == "click":
            for b, t in p.links:
                if a.bid == b:
                    self._open(t)
                    return self.state()
            if a.bid == p.checkbox:
                v.checked = not v.checked
            elif a.bid == p.search and v.value:
                self._open("\x00results:" + v.value)
        elif a.name == "fill" and a.bid == p.textbox and len(a.args) >= 2:
            v.value = str(a.args[1])
        return self.state()

    def actions(self, rng: random.Random) -> list[str]:
        """Every action that is meaningful on the current page (one random query for ``fill``)."""
        if self.view.page.startswith("\x00results:"):
            out = [f"click('{self.site.bids['results_link']}')"]
        else:
            p = self.site.pages[self.view.page]
            out = [f"click('{b}')" for b, _ in p.links]
            out += [
                f"fill('{p.textbox}', '{rng.choice(QUERY_WORDS)}')",
                f"click('{p.search}')",
                f"click('{p.checkbox}')",
            ]
        if self.back:
            out.append("go_back()")
        return out


def crawl(
    site: ToySite, rng: random.Random, min_steps: int = 3, max_steps: int = 8, drop_noops=True
) -> Trajectory:
    """A "Level-1" random crawl: uniformly random meaningful actions (links weighted x2)."""
    b = ToyBrowser(site)
    states, actions = [b.reset(rng.choice(sorted(site.pages)))], []
    for _ in range(rng.randint(min_steps, max_steps)):
        acts = b.actions(rng)
        weights = [2.0 if a.startswith("click") and a in _link_actions(b) else 1.0 for a in acts]
        a = rng.choices(acts, weights)[0]
        actions.append(a)
        states.append(b.step(a))
    t = Trajectory("", states, actions, source="level1")
    return drop_noop_transitions(t) if drop_noops else t


def _link_actions(b: ToyBrowser) -> set[str]:
    if b.view.page.startswith("\x00results:"):
        return set()
    return {f"click('{bid}')" for bid, _ in b.site.pages[b.view.page].links}


def shortest_path_actions(site: ToySite, src: str, dst: str) -> list[str] | None:
    """Titles on a shortest link path ``src -> dst`` (excluding ``src``), by BFS; None if none."""
    graph = site.graph()
    prev: dict[str, str | None] = {src: None}
    q = deque([src])
    while q:
        u = q.popleft()
        for w in graph[u]:
            if w not in prev:
                prev[w] = u
                q.append(w)
    if dst not in prev:
        return None
    path = []
    cur = dst
    while cur != src:
        path.append(cur)
        cur = prev[cur]  # type: ignore[assignment]
    return path[::-1]
