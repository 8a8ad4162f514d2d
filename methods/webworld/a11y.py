"""A11y-tree parsing and multi-format conversion (paper App. G).

Parse-then-generate: the indentation-based A11y text (one node per line, e.g.
``\\t[19] textbox 'Search', clickable, value=''``) becomes a nested :class:`A11yNode` tree, rebuilt
with a stack keyed on indentation depth; generators then walk the tree to emit A11y, XML, HTML,
Markdown or Playwright-style text. Every generator keeps the element ids (bids).
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

__all__ = [
    "A11yNode",
    "convert_sample",
    "from_xml",
    "parse_a11y",
    "to_a11y",
    "to_html",
    "to_markdown",
    "to_playwright",
    "to_xml",
]

_ROOT = "#fragment"  # synthetic root used when the text has several top-level nodes
_LINE = re.compile(r"^(?:\[(?P<bid>[^\]\s]+)\]\s+)?(?P<role>[^\s',]+)(?P<rest>.*)$")
_PROP = re.compile(r"(?:[^,']|'[^']*')+")  # comma-separated, commas inside '...' kept
_NAME = re.compile(r"^\s+'(?P<name>.*?)'(?=,|$)")


@dataclass
class A11yNode:
    """One accessibility-tree node.

    Attributes:
        role: ARIA role such as ``link`` or ``RootWebArea``.
        name: accessible name ('' if none).
        bid: BrowserGym element id, or ``None``.
        props: properties in order; flags map to ``""``, ``key=value`` keeps the raw value text.
        children: child nodes in document order.
    """

    role: str
    name: str = ""
    bid: str | None = None
    props: dict[str, str] = field(default_factory=dict)
    children: list[A11yNode] = field(default_factory=list)

    def walk(self):
        """Yields this node and its descendants in pre-order.

        Source: paper App. G (tree walk of the generators); engineering.
        """
        yield self
        for c in self.children:
            yield from c.walk()


def _indent_unit(lines: list[str]) -> tuple[str, int]:
    if any(ln.startswith("\t") for ln in lines):
        return "\t", 1
    widths = [len(ln) - len(ln.lstrip(" ")) for ln in lines]
    pos = [w for w in widths if w > 0]
    return " ", (min(pos) if pos else 1)


def _parse_line(body: str) -> A11yNode:
    m = _LINE.match(body)
    if m is None:
        raise ValueError(f"text: cannot parse A11y line {body!r}")
    rest = m.group("rest")
    name = ""
    nm = _NAME.match(rest)
    if nm:
        name = nm.group("name")
        rest = rest[nm.end() :]
    props: dict[str, str] = {}
    for part in (p.strip() for p in _PROP.findall(rest)):
        if not part:
            continue
        key, eq, val = part.partition("=")
        props[key.strip()] = val if eq else ""
    return A11yNode(m.group("role"), name, m.group("bid"), props)


def parse_a11y(text: str) -> A11yNode:
    """Parses indentation-based A11y text into a tree (App. G's stack parser).

    Tabs are the native indentation; 2- or 4-space indentation is also accepted (the unit is the
    smallest positive indent). Blank lines are ignored.

    Args:
        text: the A11y tree text.

    Returns:
        The root node; if the text has several top-level nodes they are children of a synthetic
        ``#fragment`` root, which the generators skip.

    Raises:
        TypeError: if ``text`` is not a string.
        ValueError: if ``text`` is empty or a line jumps more than one level deeper.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    lines = [ln.rstrip("\r\n") for ln in text.split("\n") if ln.strip()]
    if not lines:
        raise ValueError("text: empty A11y tree")
    ch, unit = _indent_unit(lines)
    root = A11yNode(_ROOT)
    stack: list[tuple[int, A11yNode]] = [(-1, root)]  # (depth, node)
    for ln in lines:
        depth = (len(ln) - len(ln.lstrip(ch))) // unit
        if depth > stack[-1][0] + 1:
            raise ValueError(f"text: line indented more than one level deeper: {ln!r}")
        node = _parse_line(ln.strip())
        while stack[-1][0] >= depth:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((depth, node))
    return root.children[0] if len(root.children) == 1 else root


def _tops(node: A11yNode) -> list[A11yNode]:
    return node.children if node.role == _ROOT else [node]


def to_a11y(node: A11yNode, indent: str = "\t") -> str:
    """Renders a tree back to A11y text; ``parse_a11y(to_a11y(t)) == t``.

    Source: paper App. G (A11y text format); the exact round trip is our choice.
    """
    out: list[str] = []

    def rec(n: A11yNode, d: int) -> None:
        head = (f"[{n.bid}] " if n.bid is not None else "") + n.role
        if n.name:
            head += f" '{n.name}'"
        props = [k if v == "" else f"{k}={v}" for k, v in n.props.items()]
        out.append(indent * d + ", ".join([head, *props]))
        for c in n.children:
            rec(c, d + 1)

    for t in _tops(node):
        rec(t, 0)
    return "\n".join(out)


def to_xml(node: A11yNode) -> str:
    """Renders a tree as XML: one ``<node role= bid= name=>`` element per A11y node.

    Source: paper App. G (XML generator); the element layout is our inference.

    Properties go into ``p-<key>`` attributes (flags as empty strings), so :func:`from_xml` inverts it.
    """

    def el(n: A11yNode) -> ET.Element:
        e = ET.Element("node", {"role": n.role})
        if n.bid is not None:
            e.set("bid", n.bid)
        if n.name:
            e.set("name", n.name)
        for k, v in n.props.items():
            e.set(f"p-{k}", v)
        for c in n.children:
            e.append(el(c))
        return e

    tops = _tops(node)
    if len(tops) == 1:
        return ET.tostring(el(tops[0]), encoding="unicode")
    wrap = ET.Element("fragment")
    for t in tops:
        wrap.append(el(t))
    return ET.tostring(wrap, encoding="unicode")


def from_xml(text: str) -> A11yNode:
    """Parses the output of :func:`to_xml` back into a tree.

    Source: our choice (inverse of :func:`to_xml` for tests), not in the paper.
    """

    def rec(e: ET.Element) -> A11yNode:
        props = {k[2:]: v for k, v in e.attrib.items() if k.startswith("p-")}
        kids = [rec(c) for c in e]
        return A11yNode(e.get("role", ""), e.get("name", ""), e.get("bid"), props, kids)

    r = ET.fromstring(text)
    if r.tag == "fragment":
        return A11yNode(_ROOT, children=[rec(c) for c in r])
    return rec(r)


# ARIA role -> (HTML tag, extra attributes); anything else is a <div role=...>.
_HTML_TAGS: dict[str, tuple[str, str]] = {
    "RootWebArea": ("main", ""),
    "link": ("a", ""),
    "button": ("button", ""),
    "textbox": ("input", ' type="text"'),
    "searchbox": ("input", ' type="search"'),
    "checkbox": ("input", ' type="checkbox"'),
    "radio": ("input", ' type="radio"'),
    "combobox": ("select", ""),
    "option": ("option", ""),
    "heading": ("h2", ""),
    "img": ("img", ""),
    "list": ("ul", ""),
    "listitem": ("li", ""),
    "paragraph": ("p", ""),
    "StaticText": ("span", ""),
    "navigation": ("nav", ""),
    "table": ("table", ""),
    "row": ("tr", ""),
    "cell": ("td", ""),
}
_VOID = {"input", "img"}


def to_html(node: A11yNode) -> str:
    """Renders a tree as HTML via an ARIA-to-HTML tag map; ids go to ``bid=``, names to ``aria-label``.

    Source: paper App. G (ARIA-to-HTML mapping); the tag map is our inference.

    Text nodes (``StaticText``) become ``<span>`` with the text as content. Inputs and images are
    void elements; their children (rare) are emitted as following siblings in a ``<div>``.
    """
    out: list[str] = []

    def rec(n: A11yNode, d: int) -> None:
        tag, extra = _HTML_TAGS.get(n.role, ("div", ""))
        attrs = extra if n.role in _HTML_TAGS else f' role="{html.escape(n.role)}"'
        if n.bid is not None:
            attrs += f' bid="{html.escape(n.bid)}"'
        if n.name and n.role != "StaticText":
            attrs += f' aria-label="{html.escape(n.name)}"'
        for k, v in n.props.items():
            attrs += f' data-{html.escape(k)}="{html.escape(v)}"'
        pad = "  " * d
        if tag in _VOID:
            out.append(f"{pad}<{tag}{attrs}>")
            if n.children:
                out.append(f"{pad}<div>")
                for c in n.children:
                    rec(c, d + 1)
                out.append(f"{pad}</div>")
            return
        text = html.escape(n.name) if n.role == "StaticText" else ""
        if not n.children:
            out.append(f"{pad}<{tag}{attrs}>{text}</{tag}>")
            return
        out.append(f"{pad}<{tag}{attrs}>{text}")
        for c in n.children:
            rec(c, d + 1)
        out.append(f"{pad}</{tag}>")

    for t in _tops(node):
        rec(t, 0)
    return "\n".join(out)


def to_markdown(node: A11yNode) -> str:
    """Renders a tree as a nested Markdown bullet list, ``- [bid] role "name" (props)``.

    Source: paper App. G (Markdown generator); the bullet layout is our inference.
    """
    out: list[str] = []

    def rec(n: A11yNode, d: int) -> None:
        s = "  " * d + "- " + (f"[{n.bid}] " if n.bid is not None else "") + n.role
        if n.name:
            s += f' "{n.name}"'
        props = [k if v == "" else f"{k}={v}" for k, v in n.props.items()]
        if props:
            s += f" ({', '.join(props)})"
        out.append(s)
        for c in n.children:
            rec(c, d + 1)

    for t in _tops(node):
        rec(t, 0)
    return "\n".join(out)


def to_playwright(node: A11yNode) -> str:
    """Renders a tree in Playwright's aria-snapshot style, ``- role "name" [ref=<bid>]``.

    Source: paper App. G (Playwright generator with ref ids); the layout follows
    Playwright's aria snapshot (our inference).
    """
    out: list[str] = []

    def rec(n: A11yNode, d: int) -> None:
        s = "  " * d + "- " + n.role
        if n.name:
            s += f' "{n.name}"'
        if n.bid is not None:
            s += f" [ref={n.bid}]"
        for k, v in n.props.items():
            s += f" [{k}]" if v == "" else f" [{k}={v}]"
        out.append(s + (":" if n.children else ""))
        for c in n.children:
            rec(c, d + 1)

    for t in _tops(node):
        rec(t, 0)
    return "\n".join(out)


_CONVERTERS = {
    "a11y": to_a11y,
    "xml": to_xml,
    "html": to_html,
    "markdown": to_markdown,
    "playwright": to_playwright,
}


def convert_sample(
    messages: list[dict],
    fmt: str,
    start: str = "Initial Page State:\n",
    end: str = "\n\nFirst Action:",
) -> list[dict]:
    """Rewrites the initial A11y state of a chat sample into another format (App. G).

    Only the text between the ``start`` and ``end`` markers of the first user message that has both
    is converted; every other message is copied unchanged, as in the paper's pipeline.

    Args:
        messages: chat messages (``role``/``content`` dicts).
        fmt: one of ``a11y``, ``xml``, ``html``, ``markdown``, ``playwright``.
        start, end: the markers around the tree text.

    Returns:
        A new message list.

    Raises:
        ValueError: if ``fmt`` is unknown or no user message holds both markers.
    """
    if fmt not in _CONVERTERS:
        raise ValueError(f"fmt must be one of {sorted(_CONVERTERS)}, got {fmt!r}")
    out = [dict(m) for m in messages]
    for m in out:
        c = m.get("content", "")
        if m.get("role") == "user" and start in c and end in c[c.index(start) :]:
            i = c.index(start) + len(start)
            j = c.index(end, i)
            m["content"] = c[:i] + _CONVERTERS[fmt](parse_a11y(c[i:j])) + c[j:]
            return out
    raise ValueError("messages: no user message contains the initial-state markers")
