"""Primitive space Ω of AgentXRay (official code ``search/node_search.py``, ``agents/base.py``).

A primitive is either an agent ``⟨role, model, reasoning pattern, local tools⟩`` or a tool. Agent
primitives are created lazily by a profile generator (an LLM in the paper, a sampler over a fixed
pool in the toy), which sees the task and the sibling agents so that new profiles differ. Every
generator call is charged to a ``CostMeter`` under ``generator`` (reported separately, our choice).
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from .costs import CostMeter, charge_llm_call, count_tokens

logger = logging.getLogger(__name__)

MODEL_MENU: tuple[str, ...] = (
    "claude-sonnet-4-20250514",
    "gpt-4-turbo",
    "gpt-4",
    "gpt-3.5-turbo-16k",
    "gpt-3.5-turbo",
    "gpt-4o-mini",
)  # repo model library
REASONING_MENU: tuple[str, ...] = (
    "reasoning",
    "critique",
    "reflect",
    "question",
    "summarize",
    "conclude",
    "modify",
    "planning",
)  # repo thought patterns
TOOL_POOL: tuple[str, ...] = (
    "compiler",
    "empty_detect",
    "variable_checker",
    "undefined_name_checker",
    "syntax_error_checker",
    "style_checker",
    "dependency_extractor",
    "file_lister",
    "code_summarizer",
    "test_runner",
    "file_writer",
    "file_reader",
)  # repo full pool (12)


@dataclass(frozen=True)
class Primitive:
    """One workflow step: an agent (LLM call) or a deterministic tool (official code ``search/node_search.py``)."""

    kind: Literal["agent", "tool"]
    name: str
    role: str = ""
    profile: str = ""
    model: str = ""
    reasoning: str = ""
    tools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ("agent", "tool"):
            raise ValueError(f"kind must be 'agent' or 'tool', got {self.kind!r}")
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (tools as a list)."""
        d = asdict(self)
        d["tools"] = list(self.tools)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Primitive:
        """Inverse of ``to_dict``."""
        if not isinstance(d, dict) or "kind" not in d or "name" not in d:
            raise ValueError(f"primitive dict needs 'kind' and 'name', got {d!r}")
        return cls(**{**d, "tools": tuple(d.get("tools", ()))})


class ProfileGenerator(Protocol):
    """Creates one new agent primitive for ``task``, different from ``siblings``."""

    def __call__(self, task: str, siblings: Sequence[Primitive]) -> Primitive | None: ...


@dataclass
class StaticProfileGenerator:
    """Generator stub: samples an unused agent from a fixed pool (toy and tests, our CPU toy).

    Each call is charged to ``meter`` under ``generator`` as the LLM call it stands for: with
    ``tokens_per_profile=None`` (default) the tokenizer count of the generator prompt that
    :class:`LLMProfileGenerator` would send plus the profile it would get back
    (:func:`render_profile`); with an int, that fixed amount. Returns ``None`` when every pool
    agent is already a sibling (the call is still charged).
    """

    pool: Sequence[Primitive]
    seed: int = 0
    tokens_per_profile: int | None = None
    meter: CostMeter | None = None
    model_menu: Sequence[str] = MODEL_MENU
    reasoning_menu: Sequence[str] = REASONING_MENU
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.pool or any(p.kind != "agent" for p in self.pool):
            raise ValueError("pool must be a non-empty list of agent primitives")
        if self.tokens_per_profile is not None and self.tokens_per_profile < 0:
            raise ValueError(
                f"tokens_per_profile must be >= 0 or None, got {self.tokens_per_profile}"
            )
        self._rng = random.Random(self.seed)

    def state_dict(self) -> dict[str, Any]:
        """The sampler's RNG state, JSON-ready (checkpoints, ``resume.py``)."""
        version, internal, gauss = self._rng.getstate()
        return {"rng": [version, list(internal), gauss]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))

    def __call__(self, task: str, siblings: Sequence[Primitive]) -> Primitive | None:
        used = {s.name for s in siblings}
        free = [p for p in self.pool if p.name not in used]
        pick = self._rng.choice(free) if free else None
        if self.meter is not None:
            if self.tokens_per_profile is not None:
                self.meter.charge("generator", self.tokens_per_profile)
            else:
                prompt = generator_prompt(task, siblings, self.model_menu, self.reasoning_menu)
                reply = render_profile(pick) if pick is not None else ""
                p, c = count_tokens(prompt), count_tokens(reply)
                self.meter.charge("generator", p + c, c, source="tokenizer")
        return pick


def generator_prompt(
    task: str,
    siblings: Sequence[Primitive],
    model_menu: Sequence[str] = MODEL_MENU,
    reasoning_menu: Sequence[str] = REASONING_MENU,
) -> str:
    """The profile generator's prompt (official code ``search/node_search.py``): task, sibling profiles, model/pattern menus."""
    sib = "\n".join(f"- {s.name}: {s.role}. {s.profile}" for s in siblings) or "(none)"
    return (
        "Design one new software agent for the task below, different from the existing ones.\n"
        f"Task:\n{task}\n\nExisting agents:\n{sib}\n\nModels: {', '.join(model_menu)}\n"
        f"Reasoning patterns: {', '.join(reasoning_menu)}\n"
        "Answer with lines 'Name:', 'Role:', 'Profile:' (say 'Will use <tool> when needed' for"
        " tools), 'Work output:', 'Model:', 'Reasoning:'."
    )


def render_profile(p: Primitive) -> str:
    """A generator reply for ``p`` in the format :func:`parse_profile` reads (our construction, CPU toy)."""
    tools = "".join(f" Will use {t} when needed." for t in p.tools)
    return (
        f"Name: {p.name}\nRole: {p.role or 'Software Engineer'}\n"
        f"Profile: {p.profile or 'Writes and revises the project code.'}{tools}\n"
        f"Work output: code\nModel: {p.model or 'gpt-4o-mini'}\n"
        f"Reasoning: {p.reasoning or 'reasoning'}"
    )


_PROFILE_RE = re.compile(
    r"Name:\s*(?P<name>.+?)\s*\n.*?Role:\s*(?P<role>.+?)\s*\n.*?Profile:\s*(?P<profile>.+?)"
    r"(?:\n\s*(?:Work output|Model|Reasoning):|\Z)",
    re.DOTALL | re.IGNORECASE,
)


def parse_profile(
    text: str,
    model_menu: Sequence[str],
    reasoning_menu: Sequence[str],
    default_model: str,
    fallback_index: int = 0,
) -> tuple[Primitive, bool]:
    """Parse a generator reply (``Name: / Role: / Profile: / Model: / Reasoning:``; official code
    ``search/node_search.py``).

    Values outside the menus fall back to defaults; an unparsable reply yields the generic
    ``GeneralistDev<k>`` profile. Returns ``(primitive, parsed_ok)``.
    """
    m = _PROFILE_RE.search(text or "")
    model_m = re.search(r"Model:\s*([\w.\-]+)", text or "")
    reason_m = re.search(r"Reasoning:\s*(\w+)", text or "")
    model = model_m.group(1) if model_m and model_m.group(1) in model_menu else default_model
    if model_m and model != model_m.group(1):
        logger.warning(
            "generator chose model %r outside the menu; using %r", model_m.group(1), model
        )
    reasoning = reason_m.group(1).lower() if reason_m else reasoning_menu[0]
    if reasoning not in reasoning_menu:
        reasoning = reasoning_menu[0]
    if not m:
        name = f"GeneralistDev{fallback_index}"
        return Primitive(
            "agent", name, "Code Generator", "Writes the full project.", model, reasoning
        ), False
    tools = tuple(re.findall(r"Will use (\w+) when needed", m.group("profile")))
    return Primitive(
        "agent",
        m.group("name").strip(),
        m.group("role").strip(),
        m.group("profile").strip(),
        model,
        reasoning,
        tools,
    ), True


class LLMProfileGenerator:
    """Profile generator backed by a ``common.llm.ChatLLM`` (official code ``search/node_search.py``; paper path).

    Args:
        llm: Chat client (``common.llm.OpenAIChat`` for hosted or vLLM-served models).
        model_menu: Models the generator may assign.
        reasoning_menu: Thought patterns it may assign.
        default_model: Fallback when the reply names a model outside the menu.
        meter: Where generator tokens are charged.
    """

    def __init__(
        self,
        llm: Any,
        model_menu: Sequence[str] = MODEL_MENU,
        reasoning_menu: Sequence[str] = REASONING_MENU,
        default_model: str = "gpt-3.5-turbo-16k",
        meter: CostMeter | None = None,
    ) -> None:
        if not model_menu:
            raise ValueError("model_menu must be non-empty")
        self.llm, self.meter = llm, meter
        self.model_menu, self.reasoning_menu = list(model_menu), list(reasoning_menu)
        self.default_model = default_model
        self.parse_failures = 0
        self._k = 0

    def state_dict(self) -> dict[str, int]:
        """Reply and parse-failure counters (checkpoints, ``resume.py``)."""
        return {"k": self._k, "parse_failures": self.parse_failures}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Inverse of :meth:`state_dict`."""
        self._k, self.parse_failures = state["k"], state["parse_failures"]

    def __call__(self, task: str, siblings: Sequence[Primitive]) -> Primitive:
        prompt = generator_prompt(task, siblings, self.model_menu, self.reasoning_menu)
        messages = [{"role": "user", "content": prompt}]
        reply = self.llm.chat(messages)
        if self.meter is not None:
            charge_llm_call(self.meter, "generator", self.llm, messages, reply)
        self._k += 1
        prim, ok = parse_profile(
            reply, self.model_menu, self.reasoning_menu, self.default_model, self._k
        )
        if not ok:
            self.parse_failures += 1
        return prim


class PrimitiveSpace:
    """The search space Ω: named tools plus agents created by a profile generator (official code ``search/node_search.py``).

    Args:
        tool_names: Tool primitives available to the search (empty or ``agent_only`` → none).
        generator: Creates agent primitives.
        model_menu: Allowed models (recorded; the generator enforces it).
        reasoning_menu: Allowed thought patterns.
        agent_only: Ablation with no tool children at all.
    """

    def __init__(
        self,
        tool_names: Sequence[str],
        generator: ProfileGenerator,
        model_menu: Sequence[str] = MODEL_MENU,
        reasoning_menu: Sequence[str] = REASONING_MENU,
        agent_only: bool = False,
    ) -> None:
        if isinstance(tool_names, str):
            raise TypeError("tool_names must be a list of names, not a string")
        if len(set(tool_names)) != len(tool_names):
            raise ValueError(f"tool_names must be unique, got {list(tool_names)}")
        if not callable(generator):
            raise TypeError("generator must be callable (task, siblings) -> Primitive")
        self.tool_names = [] if agent_only else list(tool_names)
        self.generator = generator
        self.model_menu, self.reasoning_menu = list(model_menu), list(reasoning_menu)
        self.agent_only = agent_only

    def tool(self, name: str) -> Primitive:
        """The tool primitive called ``name``."""
        if name not in self.tool_names:
            raise ValueError(f"unknown tool {name!r}; available: {self.tool_names}")
        return Primitive("tool", name)

    def new_agents(self, task: str, siblings: Sequence[Primitive], k: int) -> list[Primitive]:
        """Call the generator ``k`` times (official code ``search/tree.py::best_child_for_train`` ``employee_search``), distinct names only."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        out: list[Primitive] = []
        for _ in range(k):
            p = self.generator(task, [*siblings, *out])
            if p is not None and all(p.name != q.name for q in [*siblings, *out]):
                out.append(p)
        return out
