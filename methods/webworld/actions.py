"""WebWorld's Python-style action space (paper Tables 12-13; upstream ``demo/prompts.py``).

Actions are single calls such as ``click('59')`` or ``fill('12', 'shoes', press_enter=True)``. They are
parsed with :mod:`ast` (never ``eval``), so only literal arguments are accepted. The paper's 20
primitives are accepted, plus the three names of the upstream demo's 21-action space that the paper's
list spells differently or lacks (``new_tab``, ``report_infeasible``, ``mouse_dblclick``). A reply in the
demo's agent format (``<reason>...</reason><action>...</action>``, the action possibly inside a
```` ```python ```` fence) is reduced to its action first, as ``demo/parser.py::parse_response`` does.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ACTION_NAMES",
    "BID_ACTIONS",
    "DEMO_ACTION_NAMES",
    "Action",
    "ActionParseError",
    "extract_action",
    "parse_action",
    "render_action",
]

# The 20 primitives of the paper's action space (element, coordinate, keyboard, browser, meta).
ACTION_NAMES: tuple[str, ...] = (
    "click",
    "fill",
    "select_option",
    "hover",
    "mouse_move",
    "mouse_click",
    "mouse_down",
    "mouse_up",
    "keyboard_press",
    "keyboard_type",
    "scroll",
    "goto",
    "go_back",
    "go_forward",
    "tab_new",
    "tab_close",
    "tab_focus",
    "send_msg_to_user",
    "noop",
    "infeasible",
    # the upstream demo's action space (demo/prompts.py::AGENT_ACTION_SPACE) adds or renames these
    *("new_tab", "report_infeasible", "mouse_dblclick"),
)
DEMO_ACTION_NAMES: tuple[str, ...] = ("new_tab", "report_infeasible", "mouse_dblclick")
_ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.S | re.I)
# Actions whose first positional argument is an element id (bid); ids are normalised to ``str``.
BID_ACTIONS: frozenset[str] = frozenset({"click", "fill", "select_option", "hover"})


class ActionParseError(ValueError):
    """Raised when a string is not a single well-formed WebWorld action call."""


@dataclass(frozen=True)
class Action:
    """One agent action.

    Attributes:
        name: one of :data:`ACTION_NAMES`.
        args: positional literal arguments (bids are strings).
        kwargs: keyword arguments as sorted ``(key, value)`` pairs, so the dataclass stays hashable.
    """

    name: str
    args: tuple = ()
    kwargs: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.name not in ACTION_NAMES:
            raise ValueError(f"name must be one of ACTION_NAMES {ACTION_NAMES}, got {self.name!r}")
        if not isinstance(self.args, tuple):
            raise TypeError(f"args must be a tuple, got {type(self.args).__name__}")
        object.__setattr__(self, "kwargs", tuple(sorted(self.kwargs)))

    @property
    def bid(self) -> str | None:
        """The element id for element actions, else ``None``.

        Source: paper Table 12 (action space); engineering.
        """
        if self.name in BID_ACTIONS and self.args:
            return str(self.args[0])
        return None


def _normalise_bid(value: Any) -> str:
    # bids appear as '59', 59 or [59] / ['59'] in model outputs (paper Tables 12-13); all map to '59'.
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ActionParseError(f"element id must be a string or integer, got {value!r}")
    return str(value)


def extract_action(reply: str) -> str:
    """The action text of an agent reply: the ``<action>...</action>`` span without its code fence
    (official ``demo/parser.py::parse_response``), else the reply's last non-empty line.

    Raises:
        TypeError: if ``reply`` is not a string.
    """
    if not isinstance(reply, str):
        raise TypeError(f"reply must be a str, got {type(reply).__name__}")
    m = _ACTION_TAG.search(reply)
    if m:
        s = re.sub(r"^```(?:python)?", "", m.group(1).strip(), flags=re.M)
        return re.sub(r"```$", "", s, flags=re.M).strip()
    lines = [ln for ln in reply.strip().splitlines() if ln.strip()]
    return lines[-1].strip().strip("`") if lines else ""


def parse_action(text: str) -> Action:
    """Parses one action call such as ``"click('59')"`` into an :class:`Action`.

    An ``<action>...</action>`` span (the demo's agent reply format) is extracted first, with its
    ```` ``` ```` / ```` ```python ```` fence lines removed (official ``demo/parser.py``). Surrounding whitespace,
    backticks and one pair of enclosing quotes (the chat format wraps actions in single quotes) are
    then stripped.

    Args:
        text: the action string.

    Returns:
        The parsed action.

    Raises:
        TypeError: if ``text`` is not a string.
        ActionParseError: if the text is not exactly one call of a known action with literal arguments.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    s = extract_action(text) if _ACTION_TAG.search(text) else text
    s = s.strip().strip("`").strip()
    if len(s) >= 2 and s[0] == s[-1] == "'" and s.count("(") >= 1:
        inner = s[1:-1].strip()
        try:
            ast.parse(inner, mode="eval")
            s = inner
        except SyntaxError:
            pass
    if not s:
        raise ActionParseError("empty action string")
    try:
        tree = ast.parse(s, mode="eval")
    except SyntaxError as e:
        raise ActionParseError(f"not a Python call: {text!r}") from e
    call = tree.body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        raise ActionParseError(f"expected a single call like click('12'), got {text!r}")
    name = call.func.id
    if name not in ACTION_NAMES:
        raise ActionParseError(f"unknown action {name!r} in {text!r}")
    try:
        args = [ast.literal_eval(a) for a in call.args]
        kwargs = []
        for kw in call.keywords:
            if kw.arg is None:
                raise ActionParseError(f"**kwargs are not allowed: {text!r}")
            kwargs.append((kw.arg, ast.literal_eval(kw.value)))
    except (ValueError, SyntaxError) as e:
        raise ActionParseError(f"arguments must be literals: {text!r}") from e
    if name in BID_ACTIONS:
        if not args:
            raise ActionParseError(f"{name} needs an element id: {text!r}")
        args[0] = _normalise_bid(args[0])
    return Action(name, tuple(args), tuple(kwargs))


def render_action(action: Action) -> str:
    """Renders an :class:`Action` back to canonical call syntax; ``parse_action`` inverts it.

    Source: paper Table 12 and Table 13 (action syntax); engineering.

    Args:
        action: the action.

    Returns:
        A string such as ``"fill('12', 'shoes', press_enter=True)"``.
    """
    if not isinstance(action, Action):
        raise TypeError(f"action must be an Action, got {type(action).__name__}")
    parts = [repr(a) for a in action.args] + [f"{k}={v!r}" for k, v in action.kwargs]
    return f"{action.name}({', '.join(parts)})"
