"""WebWorld: a large-scale LLM world model (browser simulator) for web-agent training.

Xiao et al., ICML 2026 (arXiv 2602.14721). A causal LM is trained to predict the next page state
``s_{t+1}`` given the instruction and the history ``(s_0, a_0, ..., s_t, a_t)`` (Eq. 1-2) on ~1M
open-web trajectories. This package currently holds the pure data layer: the action grammar, the A11y
parser and multi-format converters (App. G), and the trajectory filters (§3.3).
"""

from methods.webworld.a11y import (
    A11yNode,
    convert_sample,
    from_xml,
    parse_a11y,
    to_a11y,
    to_html,
    to_markdown,
    to_playwright,
    to_xml,
)
from methods.webworld.actions import (
    ACTION_NAMES,
    BID_ACTIONS,
    Action,
    ActionParseError,
    parse_action,
    render_action,
)
from methods.webworld.data import Trajectory, drop_noop_transitions, filter_trajectory, to_chat
from methods.webworld.prompts import (
    CONTINUE_TURN,
    FIRST_TURN,
    SYSTEM_PROMPT,
    build_messages,
    strip_reasoning,
)

__all__ = [
    "ACTION_NAMES",
    "BID_ACTIONS",
    "CONTINUE_TURN",
    "FIRST_TURN",
    "SYSTEM_PROMPT",
    "A11yNode",
    "Action",
    "ActionParseError",
    "Trajectory",
    "build_messages",
    "convert_sample",
    "drop_noop_transitions",
    "filter_trajectory",
    "from_xml",
    "parse_a11y",
    "parse_action",
    "render_action",
    "strip_reasoning",
    "to_a11y",
    "to_chat",
    "to_html",
    "to_markdown",
    "to_playwright",
    "to_xml",
]
