"""Red-Black MCTS over linear workflows (the paper's "MCTS with Red-Black Pruning"; details: official code ``search/tree.py``).

Tree statistics: visit count N(v), value sum W(v), mean Q̄(v) = W/N. Red-Black colouring, redone
at the start of each iteration:

    score(v) = Q̄(v) · (d(v)+1)/(L_max+1) · |C(v)|/M                       (node score)
    θ_β      = sorted_desc(scores)[min(⌊n·β⌋, n−1)]                         (quantile threshold)
    red(v)  ⇔ v has children, score(v) ≥ θ_β and some child is non-terminal

A red node is pruned from expansion: it only descends by UCB,
``UCB(c) = Q̄(c) + C_p·sqrt(2·ln N(v) / N(c))`` (+∞ for an unvisited child). A black node with
fewer than M children expands one new child (agent/tool quotas of official code ``search/tree.py::best_child_for_train``). A new node runs one
random rollout to depth L_max (official code ``search/tree.py``); rewards are backed up along the path.
"""

from __future__ import annotations

import json
import logging
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.tracking import progress

from .config import MCTSConfig
from .executor import WorkflowExecutor
from .primitives import Primitive, PrimitiveSpace

logger = logging.getLogger(__name__)

Pair = tuple[str, str]  # (task τ, black-box output o*)
RED, BLACK = "red", "black"


@dataclass
class Node:
    """A tree node: the primitive applied at depth d(v) after its ancestors' chain (official code ``search/tree.py``)."""

    primitive: Primitive | None  # None at the root
    depth: int = 0
    N: int = 0
    W: float = 0.0
    children: list[Node] = field(default_factory=list)
    color: str = BLACK
    terminal: bool = False
    expanded: bool = False
    content: str = ""
    parent: Node | None = field(default=None, repr=False)

    @property
    def q(self) -> float:
        """Q̄(v) = W/N (0 when unvisited; MCTS statistics, official code ``search/tree.py``)."""
        return self.W / self.N if self.N else 0.0

    def add(self, primitive: Primitive, max_depth: int) -> Node:
        """Attach a child; it is terminal when its depth reaches L_max (official code ``search/tree.py``)."""
        c = Node(primitive, self.depth + 1, parent=self, terminal=self.depth + 1 >= max_depth)
        self.children.append(c)
        return c

    def walk(self) -> list[Node]:
        """All nodes of the subtree, pre-order."""
        out, stack = [], [self]
        while stack:
            v = stack.pop()
            out.append(v)
            stack.extend(reversed(v.children))
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready subtree, node contents included (checkpoints, ``resume.py``)."""
        return {
            "primitive": None if self.primitive is None else self.primitive.to_dict(),
            "depth": self.depth,
            "N": self.N,
            "W": self.W,
            "color": self.color,
            "terminal": self.terminal,
            "expanded": self.expanded,
            "content": self.content,
            "children": [c.to_dict() for c in self.children],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], parent: Node | None = None) -> Node:
        """Inverse of ``to_dict``."""
        p = d.get("primitive")
        v = cls(
            None if p is None else Primitive.from_dict(p),
            d["depth"],
            d["N"],
            d["W"],
            color=d["color"],
            terminal=d["terminal"],
            expanded=d["expanded"],
            content=d.get("content", ""),
            parent=parent,
        )
        v.children = [cls.from_dict(c, v) for c in d.get("children", [])]
        return v


@dataclass
class SearchResult:
    """Outcome of one search: extracted workflow, tree, token usage and depth statistics."""

    best_workflow: list[Primitive]
    tree: Node
    tokens: dict[str, int]
    depth: int
    train_rewards: list[float] = field(default_factory=list)
    rollout_steps: int = 0
    executions: int = 0


class AgentXRaySearch:
    """MCTS with Red-Black pruning over chains of primitives (official code ``search/tree.py``).

    Args:
        space: Primitive space Ω.
        executor: Runs primitives and charges tokens.
        sim: Similarity ``Sim(pred, ref)`` (``sfe`` for code, ``tfidf_cosine`` for text).
        cfg: Search settings.
    """

    def __init__(
        self,
        space: PrimitiveSpace,
        executor: WorkflowExecutor,
        sim: Callable[[str, str], float],
        cfg: MCTSConfig | None = None,
    ) -> None:
        if not callable(sim):
            raise TypeError("sim must be callable (pred, ref) -> float")
        self.space, self.executor, self.sim = space, executor, sim
        self.cfg = cfg or MCTSConfig()
        self.rng = random.Random(self.cfg.seed)
        self.root = Node(None, 0)
        self.rollout_steps = 0
        self.executions = 0
        self._ckpt = None  # a resume.SearchCheckpoint while a checkpointed run() is going

    def _step(self, p: Primitive, task: str, content: str) -> str | None:
        """``executor.step``, through the checkpoint's journal when there is one."""
        if self._ckpt is not None:
            return self._ckpt.step(p, task, content)
        return self.executor.step(p, task, content)

    # ------------------------------------------------------------------ Red-Black colouring
    def node_score(self, v: Node) -> float:
        """score(v) = Q̄(v) · (d(v)+1)/(L_max+1) · |C(v)|/M (0 for a leaf).

        The paper's Red-Black score "integrates proxy quality with search depth" (abstract); the
        exact product, with the width factor, is official code ``search/tree.py``.
        """
        c = self.cfg
        return v.q * (v.depth + 1) / (c.max_depth + 1) * len(v.children) / c.max_children

    def beta_threshold(self, scores: Sequence[float]) -> float:
        """θ_β = sorted_desc(scores)[min(⌊n·β⌋, n−1)]: the top-β quantile of the node scores
        (Red-Black Pruning; the index rule, floor and clamp, is official code ``search/tree.py``)."""
        if not scores:
            raise ValueError("scores must be non-empty")
        s = sorted(scores, reverse=True)
        return s[min(math.floor(len(s) * self.cfg.beta), len(s) - 1)]

    def color_tree(self) -> None:
        """Recolour every node (red ⇔ non-leaf, score ≥ θ_β, some child non-terminal).

        Red-Black Pruning (paper abstract); the rule, the ``≥`` and the non-terminal-child test
        are official code ``search/tree.py`` (``ColorTree``); ``coloring=False`` is its unpruned
        ablation. ``zero_score_black`` (our variant, issue 43) keeps score-0 nodes black: with the
        official ``≥`` every internal node is red once θ_β = 0, so a zero-reward first dive is
        never widened.
        """
        nodes = self.root.walk()
        if not self.cfg.coloring:
            for v in nodes:
                v.color = BLACK
            return
        theta = self.beta_threshold([self.node_score(v) for v in nodes])
        for v in nodes:
            score = self.node_score(v)
            red = (
                bool(v.children)
                and score >= theta
                and (score > 0 or not self.cfg.zero_score_black)
                and any(not c.terminal for c in v.children)
            )
            v.color = RED if red else BLACK

    def ucb(self, parent: Node, child: Node) -> float:
        """UCB(c) = Q̄(c) + C_p·sqrt(2·ln N(v) / N(c)); +∞ when N(c) = 0 (MCTS selection;
        C_p = 1.4 and the form are official code ``search/tree.py`` ``_basic_child_selection``)."""
        if child.N == 0:
            return math.inf
        bonus = math.sqrt(2.0 * math.log(max(parent.N, 1)) / child.N)
        return child.q + self.cfg.c_ucb * bonus

    # ------------------------------------------------------------------ selection / expansion
    def _next_primitive(self, v: Node, task: str) -> Primitive | None:
        """Quota rules of the official ``MCTSNode.best_child_for_train``: which child to add.

        In order, the first rule that applies: (1) no agent child yet and the generator yields
        a profile → that agent; (2) agents but no tool → a random unused tool; (3) fewer than A
        agents and a profile → an agent; (4) fewer than Tq tools → a tool; (5) a profile → an
        agent; (6) any unused tool → a tool. When the generator yields no profile the tool rules
        still apply (official), so a node is never left unexpanded while tools remain.
        Profiles are generated lazily, only when an agent rule is reached.
        """
        cfg = self.cfg
        agents = [c.primitive for c in v.children if c.primitive.kind == "agent"]
        used_tools = {c.primitive.name for c in v.children if c.primitive.kind == "tool"}
        free_tools = [t for t in self.space.tool_names if t not in used_tools]
        n_tools = len(used_tools)
        tq = cfg.tool_quota if self.space.tool_names else 0
        cache: list[list[Primitive]] = []

        def profiles() -> list[Primitive]:
            if not cache:
                k = max(1, cfg.agent_quota - len(agents)) if cfg.full_profile_quota else 1
                cache.append(self.space.new_agents(task, agents, k))
            return cache[0]

        def tool() -> Primitive:
            return self.space.tool(self.rng.choice(free_tools))

        if not agents and profiles():
            return self.rng.choice(profiles())
        if agents and n_tools == 0 and free_tools and tq > 0:
            return tool()
        if len(agents) < cfg.agent_quota and profiles():
            return self.rng.choice(profiles())
        if n_tools < tq and free_tools:
            return tool()
        if profiles():
            return self.rng.choice(profiles())
        if free_tools and tq > 0:
            return tool()
        return None

    def select_or_expand(self, v: Node, task: str) -> Node | None:
        """Black and not full → expand a new child; otherwise descend by UCB (official code ``search/tree.py::best_child_for_train``)."""
        cfg = self.cfg
        if cfg.pure_random:
            if not v.children:
                p = self._next_primitive(v, task)
                return None if p is None else v.add(p, cfg.max_depth)
            return self.rng.choice(v.children)
        if v.color == BLACK and len(v.children) < cfg.max_children:
            p = self._next_primitive(v, task)
            if p is not None:
                return v.add(p, cfg.max_depth)
        if not v.children:
            return None
        # ties go to the first child, as ``max`` does in the official ``_basic_child_selection``
        return max(v.children, key=lambda c: self.ucb(v, c))

    # ------------------------------------------------------------------ simulation
    def _reward(self, content: str | None, target: str) -> float:
        """Sim(Φ(s, τ), o*) of the objective; 0 when the output has no code (official code
        ``search/tree.py``, with ``filter_code`` and ``codes_to_content`` of ``utils/codes.py``)."""
        out = self.executor.final_output(content)
        return 0.0 if not out else float(self.sim(out, target))

    def rollout(self, c: Node, task: str, target: str) -> float:
        """Random completion of the chain from ``c`` down to L_max (official code ``search/tree.py``); nodes are not kept."""
        cfg = self.cfg
        depth, content, agents, tools = c.depth, c.content, 0, 0
        terminal, last_tools = (
            c.terminal,
            {x.primitive.name for x in c.children if x.primitive.kind == "tool"},
        )
        tq = cfg.tool_quota if self.space.tool_names else 0
        while not terminal:
            profiles = self.space.new_agents(task, [], cfg.agent_quota)
            tools_left = [t for t in self.space.tool_names if t not in last_tools]
            if not profiles and (not tools_left or tools >= tq):
                break
            if agents == 0 or not profiles:
                pick_tool = not profiles
            elif tools < tq and tools_left:
                p = max(0.05, 1.0 - cfg.sim_agent_bias)
                ratio_ok = agents / (agents + tools) >= cfg.min_agent_ratio
                p = min(0.9, p + 0.2) if ratio_ok else max(0.05, p - 0.1)
                pick_tool = self.rng.random() < p
            else:
                pick_tool = False
            prim = (
                self.space.tool(self.rng.choice(tools_left))
                if pick_tool
                else self.rng.choice(profiles)
            )
            agents, tools = agents + (not pick_tool), tools + pick_tool
            last_tools = set()
            depth += 1
            terminal = depth >= cfg.max_depth
            out = self._step(prim, task, content)
            self.rollout_steps += 1
            self.executions += 1
            if out is None:
                break
            content = out
        return self._reward(content, target)

    # ------------------------------------------------------------------ main loop
    def iterate(self, task: str, target: str) -> float:
        """One MCTS iteration (official code ``search/tree.py``); returns the backed-up reward."""
        self.color_tree()
        v, reward = self.root, 0.0
        while not v.terminal:
            c = self.select_or_expand(v, task)
            if c is None:
                reward = 0.0
                break
            out = self._step(c.primitive, task, v.content)
            self.executions += 1
            if out is None:
                c.terminal, reward, v = True, 0.0, c
                break
            c.content = out
            if not c.expanded:
                reward = self.rollout(c, task, target)
                c.expanded, v = True, c
                break
            reward = self._reward(out, target)
            v = c
            if reward > self.cfg.early_stop:
                break
        node: Node | None = v
        while node is not None:  # backup
            node.N += 1
            node.W += reward
            node = node.parent
        return reward

    def search(self, train: Sequence[Pair], checkpoint_dir: str | None = None) -> list[Primitive]:
        """Run ``cfg.iterations`` iterations, cycling over ``train`` (i mod |D|), and extract the
        workflow (official code ``search/search.py``)."""
        self.run(train, checkpoint_dir=checkpoint_dir)
        return self.best_workflow()

    def run(self, train: Sequence[Pair], checkpoint_dir: str | None = None) -> SearchResult:
        """Search and return a ``SearchResult`` (empty ``train`` → no search, empty workflow).

        The loop of official code ``search/tree.py`` (iteration i uses pair i mod |D|). With
        ``checkpoint_dir`` the state is saved after every iteration and the expensive calls are
        journaled (``resume.SearchCheckpoint``, our inference): a run killed at any point and
        started again with the same settings gives the uninterrupted result; a folder made with
        other settings raises ``common.checkpoint.CheckpointMismatch`` naming what differs.
        """
        _check_pairs(train)
        rewards: list[float] = []
        if not train:
            logger.warning("empty training split: search skipped")
        else:
            ckpt, start = None, 0
            if checkpoint_dir is not None:
                from .resume import SearchCheckpoint

                ckpt = SearchCheckpoint(checkpoint_dir, self, train)
                start, rewards = ckpt.restore()
            self._ckpt = ckpt
            try:
                its = range(start, self.cfg.iterations)
                for i in progress(its, desc="agentxray MCTS", unit="iter"):
                    if ckpt is not None:
                        ckpt.begin(i)
                    task, target = train[i % len(train)]
                    rewards.append(self.iterate(task, target))
                    if ckpt is not None:
                        ckpt.save(i + 1, rewards)
            finally:
                self._ckpt = None
                if ckpt is not None:
                    ckpt.close()
        wf = self.best_workflow() if train else []
        return SearchResult(
            best_workflow=wf,
            tree=self.root,
            tokens=dict(self.executor.meter.snapshot()),
            depth=max(v.depth for v in self.root.walk()),
            train_rewards=rewards,
            rollout_steps=self.rollout_steps,
            executions=self.executions,
        )

    def best_workflow(self) -> list[Primitive]:
        """Greedy arg-max-Q̄ path over visited children, leading tools dropped, length ≥ 2 (official code ``search/tree.py``, ``experiment.py``)."""
        path: list[Node] = []
        v = self.root
        while not v.terminal:
            visited = [c for c in v.children if c.N > 0]
            if not visited:
                break
            v = max(visited, key=lambda c: c.q)
            path.append(v)
        while path and path[0].primitive.kind == "tool":
            path.pop(0)
        wf = [n.primitive for n in path]
        if len(wf) < self.cfg.min_workflow_len:
            extra = sorted((c for c in self.root.children if c.N > 0), key=lambda c: -c.q)
            for c in extra:
                if len(wf) >= self.cfg.min_workflow_len:
                    break
                if c.primitive not in wf:
                    wf.append(c.primitive)
        return wf


def _check_pairs(train: Sequence[Pair]) -> None:
    """``train`` must be a sequence of (task, output) string pairs (bad-input rule)."""
    if isinstance(train, (str, bytes)) or not isinstance(train, Sequence):
        raise TypeError("train must be a sequence of (task, output) pairs")
    for i, pair in enumerate(train):
        if not (
            isinstance(pair, (tuple, list))
            and len(pair) == 2
            and all(isinstance(x, str) for x in pair)
        ):
            raise ValueError(f"train[{i}] must be a (task, output) pair of strings, got {pair!r}")


def extract_workflow(result: SearchResult | Sequence[Primitive]) -> str:
    """The white-box workflow as editable JSON (``{"workflow": [primitive, …]}``; our format)."""
    wf = result.best_workflow if isinstance(result, SearchResult) else list(result)
    return json.dumps({"workflow": [p.to_dict() for p in wf]}, indent=2)


def load_workflow(text: str) -> list[Primitive]:
    """Parse the JSON of ``extract_workflow`` back into primitives (our format; engineering)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"workflow JSON does not parse: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("workflow"), list):
        raise ValueError("workflow JSON must be an object with a 'workflow' list")
    return [Primitive.from_dict(d) for d in data["workflow"]]
