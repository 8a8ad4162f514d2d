"""Trie-packed training sequences (§3.3, App. B, Fig. 4/6).

Every ⟨context, completion⟩ request the orchestrator would issue for one trajectory (plus the full
trajectory as a plain autoregressive unit) is a root-to-node path of a token trie. Flattening the trie
in depth-first pre-order gives one sequence whose *ancestor-only* attention mask and *depth* position
ids make each node see exactly the context and positions it sees at inference. The loss of node ``v``
is read from the model output at its trie parent (the exact "parent-gather" loss).

Shape letters: B sequences in a batch, N flattened trie nodes, V vocabulary.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from .config import ATTN_FOR_MASK, check_mask_impl
from .format import (
    CONCLUSION_CLOSE,
    CONCLUSION_OPEN,
    JOIN_SUFFIX,
    THINK_CLOSE,
    THINK_OPEN,
    ParallelBlock,
    Trajectory,
    thread_header,
)
from .trie_mask import ancestor_mask, dense_trie_mask, flex_block_mask, packed_forward

logger = logging.getLogger(__name__)

__all__ = [
    "ATTN_FOR_MASK",
    "Packed",
    "TrieCollator",
    "Unit",
    "ancestor_mask",
    "build_packed",
    "dense_trie_mask",
    "extract_units",
    "flex_block_mask",
    "packed_forward",
    "parent_gather_loss",
    "response_pieces",
]


@dataclass
class Unit:
    """One request: ``ids = context + completion``; the first ``n_context`` ids are context."""

    ids: list[int]
    n_context: int
    kind: str = "full"

    @property
    def context(self) -> list[int]:
        return self.ids[: self.n_context]

    @property
    def completion(self) -> list[int]:
        return self.ids[self.n_context :]


def response_pieces(traj: Trajectory, join_suffix: str = JOIN_SUFFIX) -> list[tuple[str, str]]:
    """Split a serialized response into the pieces the orchestrator produces, in order.

    Kinds: ``"seq"`` (one sequential request's output, ending at ``</Outlines>`` or at the end),
    ``"hdr"`` (thread header inserted by the orchestrator), ``"body"`` (a thread's completion, ending
    in ``</Thread>``) and ``"join"`` (the join suffix, or :data:`CONCLUSION_OPEN` for a block with a
    conclusion, whose text then starts the next sequential piece). ``"".join(texts) ==
    serialize(traj)``. Source: engineering, the requests of the paper's orchestrator (§3.2).
    """
    pieces: list[tuple[str, str]] = []
    cur = THINK_OPEN
    for seg in traj.segments:
        if not isinstance(seg, ParallelBlock):
            cur += seg
            continue
        cur += "<Parallel>\n<Outlines>\n"
        cur += "".join(f"<Outline>{n}: {t}</Outline>\n" for n, t in seg.outlines) + "</Outlines>"
        pieces.append(("seq", cur))
        for i, (n, t) in enumerate(seg.threads):
            pieces.append(("hdr", thread_header(n, first=i == 0)))
            pieces.append(("body", f" {t}\n</Thread>"))
        if seg.conclusion is not None:  # official <Conclusion> mode: the model writes the rest
            pieces.append(("join", CONCLUSION_OPEN))
            cur = seg.conclusion + CONCLUSION_CLOSE
        else:
            pieces.append(("join", join_suffix))
            cur = ""
    pieces.append(("seq", cur + THINK_CLOSE + traj.final))
    return pieces


def extract_units(
    prompt_ids: Sequence[int],
    traj: Trajectory,
    encode: Callable[[str], list[int]],
    eos_id: int | None = None,
    join_suffix: str = JOIN_SUFFIX,
) -> tuple[list[int], list[Unit]]:
    """Tokenize a trajectory piece by piece and list its training units (§3.3, App. B).

    Each piece is encoded separately so that the token stream equals the one the orchestrator builds
    (its requests end at ``</Outlines>``/``</Thread>`` and it encodes headers on their own).

    Args:
        prompt_ids: the prompt (chat-templated) token ids.
        traj: the parsed response.
        encode: text -> ids without special-token additions (e.g.
            ``lambda s: tok(s, add_special_tokens=False)["input_ids"]``).
        eos_id: appended to the response when given.
        join_suffix: the orchestrator's join suffix.

    Returns:
        ``(response_ids, units)`` with ``units[0]`` the full trajectory (prompt -> whole response) and
        one unit per thread per block: context = prompt + response up to ``</Outlines>`` + the
        thread's request header ``"\\n<Thread>\\nN:"``; completion = the thread body incl. ``</Thread>``.
    """
    if not callable(encode):
        raise TypeError("encode must be a callable str -> list[int]")
    prompt = list(prompt_ids)
    response: list[int] = []
    thread_units: list[Unit] = []
    block_prefix: list[int] = []
    pending_hdr: list[int] | None = None
    for kind, text in response_pieces(traj, join_suffix):
        ids = encode(text)
        if kind == "seq" and text.endswith("</Outlines>"):
            block_prefix = prompt + response + ids
        if kind == "hdr":
            # The request header always carries the leading "\n" (first-thread form).
            num = text.split("<Thread>\n", 1)[1][:-1]
            pending_hdr = encode(thread_header(num, first=True))
        if kind == "body":
            ctx = block_prefix + (pending_hdr or [])
            thread_units.append(Unit(ctx + ids, len(ctx), "thread"))
        response += ids
    if eos_id is not None:
        response.append(int(eos_id))
    full = Unit(prompt + response, len(prompt), "full")
    return response, [full, *thread_units]


@dataclass
class Packed:
    """A flattened trie. All tensors are int64 ``[N]`` except ``loss_mask`` (bool ``[N]``).

    ``tin`` is the DFS entry index (= flat index), ``tout`` the last flat index in the node's subtree,
    ``parent`` the parent's flat index (-1 at depth 0), ``position_ids`` the depth.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    parent: torch.Tensor
    loss_mask: torch.Tensor
    tin: torch.Tensor
    tout: torch.Tensor
    n_full: int
    n_dropped_units: int = 0

    def __len__(self) -> int:
        return int(self.input_ids.numel())

    def to_dict(self) -> dict:
        """Plain lists (for a ``datasets.Dataset`` row); :meth:`from_dict` inverts it."""
        keys = ("input_ids", "position_ids", "parent", "loss_mask", "tin", "tout")
        out = {k: getattr(self, k).tolist() for k in keys}
        return {**out, "n_full": self.n_full, "n_dropped_units": self.n_dropped_units}

    @classmethod
    def from_dict(cls, row: dict) -> Packed:
        t = {
            k: torch.tensor(row[k], dtype=torch.long)
            for k in ("input_ids", "position_ids", "parent", "tin", "tout")
        }
        lm = torch.tensor(row["loss_mask"], dtype=torch.bool)
        return cls(
            **t,
            loss_mask=lm,
            n_full=int(row["n_full"]),
            n_dropped_units=int(row["n_dropped_units"]),
        )


def _check_units(units: Sequence[Unit], max_length: int | None) -> None:
    """The errors :func:`build_packed` raises (see there)."""
    if not units:
        raise ValueError("units must contain at least the full-trajectory unit")
    for j, u in enumerate(units):
        if not isinstance(u, Unit):
            raise TypeError(f"units[{j}] must be a Unit, got {type(u).__name__}")
        if not 0 <= u.n_context <= len(u.ids) or not u.ids:
            raise ValueError(f"units[{j}] has n_context={u.n_context} for {len(u.ids)} ids")
    longest = max(len(u.ids) for u in units)
    if len(units[0].ids) != longest:
        raise ValueError(
            f"units[0] must be the full (longest) trajectory: len {len(units[0].ids)} < {longest}"
        )
    if max_length is not None and len(units[0].ids) > max_length:
        raise ValueError(
            f"full trajectory has {len(units[0].ids)} tokens > max_length={max_length}; "
            "drop the example or raise max_length"
        )


@dataclass
class _Trie:
    """A token trie in insertion order: node v holds ``tokens[v]``, its parent ``parent[v]`` (-1 at
    the root level), ``loss[v]`` (in some unit's completion) and ``children[v]`` (token -> node)."""

    tokens: list[int]
    parent: list[int]
    loss: list[bool]
    children: list[dict[int, int]]
    root: dict[int, int]

    def n_new(self, ids: Sequence[int]) -> int:
        """How many nodes inserting ``ids`` would add (the length past the longest shared prefix)."""
        kids = self.root
        for d, t in enumerate(ids):
            if t not in kids:
                return len(ids) - d
            kids = self.children[kids[t]]
        return 0

    def insert(self, u: Unit) -> None:
        """Add ``u``'s path; mark its completion nodes as trained."""
        node, kids = -1, self.root
        for d, t in enumerate(u.ids):
            if t not in kids:
                kids[t] = len(self.tokens)
                self.tokens.append(int(t))
                self.parent.append(node)
                self.loss.append(False)
                self.children.append({})
            node = kids[t]
            kids = self.children[node]
            if d >= u.n_context:
                self.loss[node] = True

    def preorder(self) -> tuple[list[int], list[int]]:
        """DFS pre-order following insertion order, and the depth of every node."""
        order: list[int] = []
        depth = [0] * len(self.tokens)
        stack = [(c, 0) for c in reversed(list(self.root.values()))]
        while stack:
            v, d = stack.pop()
            order.append(v)
            depth[v] = d
            stack.extend((c, d + 1) for c in reversed(list(self.children[v].values())))
        return order, depth


def build_packed(units: Sequence[Unit], max_length: int | None = None) -> Packed:
    """Insert units into a token trie and flatten it by DFS in insertion order (§3.3, Fig. 6).

    A node is trained (``loss_mask``) iff it lies in the completion of some unit. Units that do not
    fit in ``max_length`` are dropped whole, from the back (never cut mid-unit).

    Raises:
        ValueError: empty ``units``, ``units[0]`` not the longest, ``units[0]`` alone longer than
            ``max_length``, or ``n_context`` out of range.
    """
    _check_units(units, max_length)
    trie = _Trie([], [], [], [], {})
    n_dropped = 0
    for j, u in enumerate(units):
        # A unit is inserted whole or not at all.
        if max_length is not None and len(trie.tokens) + trie.n_new(u.ids) > max_length:
            n_dropped = len(units) - j
            logger.warning("build_packed: dropped %d trailing units over max_length", n_dropped)
            break
        trie.insert(u)
    order, depth = trie.preorder()
    flat = {v: i for i, v in enumerate(order)}
    tout = list(range(len(order)))
    for v in reversed(order):  # children appear after parents in pre-order
        p = trie.parent[v]
        if p >= 0:
            tout[flat[p]] = max(tout[flat[p]], tout[flat[v]])
    as_long = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    return Packed(
        input_ids=as_long([trie.tokens[v] for v in order]),
        position_ids=as_long([depth[v] for v in order]),
        parent=as_long([flat[trie.parent[v]] if trie.parent[v] >= 0 else -1 for v in order]),
        loss_mask=torch.tensor([trie.loss[v] for v in order], dtype=torch.bool),
        tin=as_long(list(range(len(order)))),
        tout=as_long(tout),
        n_full=len(units[0].ids),
        n_dropped_units=n_dropped,
    )


def parent_gather_loss(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    parent: torch.Tensor,
    loss_mask: torch.Tensor,
    reduction: Literal["mean", "sum", "none"] = "mean",
) -> torch.Tensor:
    """Exact trie SFT loss: ``−(1/|𝓛|) Σ_{v∈𝓛} log softmax(z_{parent(v)})[token(v)]`` (§3.3, exact form).

    Args:
        logits: ``[B, N, V]`` packed-forward outputs.
        input_ids, parent: ``[B, N]``; ``parent`` is -1 at depth 0 and on padding.
        loss_mask: ``[B, N]`` bool, nodes in some unit's completion.
        reduction: ``"mean"`` over trained nodes, ``"sum"``, or ``"none"`` (``[B, N]``, 0 off-mask).
    """
    if logits.dim() != 3:
        raise ValueError(f"logits must be [B, N, V], got shape {tuple(logits.shape)}")
    valid = loss_mask.bool() & (parent >= 0)  # [B, N]
    par = parent.clamp(min=0)  # [B, N]
    logp = torch.log_softmax(
        logits.to(torch.promote_types(logits.dtype, torch.float32)), -1
    )  # [B, N, V]
    rows = torch.gather(logp, 1, par.unsqueeze(-1).expand_as(logp))  # [B, N, V] = logp at parent
    tok_lp = rows.gather(2, input_ids.unsqueeze(-1)).squeeze(-1)  # [B, N]
    nll = -tok_lp * valid
    if reduction == "none":
        return nll
    if reduction == "sum":
        return nll.sum()
    if reduction == "mean":
        return nll.sum() / valid.sum().clamp(min=1)
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


class TrieCollator:
    """Pad packed tries into a batch for a model that honours 4-D masks and ``position_ids``.

    Source: paper §3.3 and App. B (trie batches, FlexAttention); the padding is engineering.

    Each example is a :class:`Packed`, a ``Packed.to_dict()`` row, or a dict with ``"units"`` (list
    of :class:`Unit`). Output: ``input_ids``, ``position_ids``, ``parent``, ``loss_mask``, ``tin``,
    ``tout`` ``[B, N]`` and, for ``mask_impl="dense"``, ``attention_mask``: an additive float
    ``[B, 1, N, N]`` (0 = attend, dtype-min = blocked). For ``"flex"`` no mask is built here:
    :func:`packed_forward` builds the FlexAttention ``BlockMask`` from ``tin``/``tout`` on the
    inputs' device (a ``BlockMask`` is not a tensor, so the Trainer would not move one built on the
    CPU). Padding is on the right; a padded query attends to itself only and no real query sees a
    padded key.
    """

    def __init__(
        self,
        pad_token_id: int,
        max_length: int | None = None,
        mask_impl: Literal["dense", "flex"] = "dense",
        dtype: torch.dtype = torch.float32,
    ):
        check_mask_impl(mask_impl)
        if not isinstance(pad_token_id, int):
            raise TypeError(f"pad_token_id must be int, got {type(pad_token_id).__name__}")
        self.pad_token_id, self.max_length = pad_token_id, max_length
        self.mask_impl, self.dtype = mask_impl, dtype

    def __call__(self, examples: Sequence[Packed | dict]) -> dict[str, torch.Tensor]:
        packs = [
            ex
            if isinstance(ex, Packed)
            else Packed.from_dict(ex)
            if "tin" in ex
            else build_packed(ex["units"], self.max_length)
            for ex in examples
        ]
        b, n = len(packs), max(len(p) for p in packs)
        ids = torch.full((b, n), self.pad_token_id, dtype=torch.long)
        pos = torch.zeros((b, n), dtype=torch.long)
        parent = torch.full((b, n), -1, dtype=torch.long)
        lmask = torch.zeros((b, n), dtype=torch.bool)
        ar = torch.arange(n)
        tin, tout = ar.repeat(b, 1), ar.repeat(b, 1)  # padding: own singleton subtree
        for i, p in enumerate(packs):
            m = len(p)
            ids[i, :m], pos[i, :m], parent[i, :m] = p.input_ids, p.position_ids, p.parent
            lmask[i, :m], tin[i, :m], tout[i, :m] = p.loss_mask, p.tin, p.tout
        out = {"input_ids": ids, "position_ids": pos, "parent": parent, "loss_mask": lmask,
               "tin": tin, "tout": tout}  # fmt: skip
        if self.mask_impl == "dense":
            out["attention_mask"] = dense_trie_mask(tin, tout, self.dtype)
        return out
