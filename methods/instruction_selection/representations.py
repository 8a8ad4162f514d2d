"""Example representations for targeted selection (the paper's
data representations; official ``representation/``): RDS+,
EMBED and the Tulu text helpers; LESS is in :mod:`methods.instruction_selection.less`.

Every representation maps a pool example (a Tulu ``messages`` conversation) or a query (a prompt and
its label) to an L2-normalised vector, so that ``cosine_matrix`` gives the similarity the selectors
read. RDS+ pools the base model's last hidden layer with position weights; EMBED uses a sentence
embedder; LESS uses LoRA gradients at warm-up checkpoints (Adam-preconditioned for candidates, plain
SGD gradients for queries), randomly projected and combined across checkpoints with LR weights.
Shapes: N pool examples, M queries, D features, P trainable parameters, k projection dim.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

import torch
from torch import nn

from common.activations import hidden_states
from common.embeddings import Embedder

logger = logging.getLogger(__name__)

Row = Mapping[str, object]
ROLE_TAGS = {"system": "<|system|>\n", "user": "<|user|>\n", "assistant": "<|assistant|>\n"}
EMBED_QUERY_PREFIX = "Instruct: Given a sample, find the passages closest to that sample.\nQuery: "


def _segments(messages: Sequence[Mapping[str, str]], eos: str) -> list[tuple[str, bool]]:
    """Tulu chat text as ``(piece, supervised)`` segments; only assistant contents are supervised."""
    if not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    out: list[tuple[str, bool]] = []
    for m in messages:
        role = m.get("role")
        if role not in ROLE_TAGS:
            raise ValueError(f"message role must be one of {sorted(ROLE_TAGS)}, got {role!r}")
        if role == "assistant":
            out.append((ROLE_TAGS[role], False))
            out.append((str(m["content"]).strip() + eos, True))
            out.append(("\n", False))
        else:
            out.append((ROLE_TAGS[role] + str(m["content"]) + "\n", False))
    return out


def tulu_format(messages: Sequence[Mapping[str, str]], eos: str = "") -> str:
    """The Tulu chat text of a conversation (official ``common/data.py``): role tags, assistant turns
    end in ``eos``."""
    return "".join(p for p, _ in _segments(messages, eos)).strip()


def _pool_text(row: Row, eos: str = "") -> str:
    if "messages" not in row:
        raise ValueError(f"a pool row needs a 'messages' field, got keys {sorted(row)}")
    return tulu_format(row["messages"], eos)  # type: ignore[arg-type]


def _query_parts(row: Row) -> tuple[str, str]:
    if "prompts" not in row or "labels" not in row:
        raise ValueError(f"a query row needs 'prompts' and 'labels' fields, got keys {sorted(row)}")
    label = str(row["labels"])
    if not label.strip():
        raise ValueError("a query row has an empty label (no supervised tokens)")
    return str(row["prompts"]), label


def _rows(ds: Iterable[Row]) -> list[Row]:
    rows = list(ds)
    if not rows:
        raise ValueError("the dataset is empty")
    return rows


class RDSPlus:
    """RDS+: position-weighted mean of the base model's last hidden layer (official ``representation/rds/``).

    ``φ = Σ_t w_t h_t`` with ``w_t = t / Σ_{s=1}^{T} s`` (later tokens weigh more), then L2-normalised.
    Candidates are encoded with their responses (full Tulu text), queries as prompt + label.
    """

    def __init__(
        self, model: nn.Module, tokenizer, batch_size: int = 8, max_length: int | None = 2048
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model, self.tokenizer = model, tokenizer
        self.batch_size, self.max_length = batch_size, max_length

    @staticmethod
    def pool(h: torch.Tensor) -> torch.Tensor:
        """Weighted mean of ``h`` ``[T, D]`` with weights ``t / Σ s`` for ``t = 1..T``; ``[D]``."""
        t = torch.arange(1, h.shape[0] + 1, dtype=h.dtype)  # [T]
        return (t / t.sum()) @ h  # [D]

    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        """``[n, D]`` L2-normalised float32 features of raw texts."""
        # Right padding: a causal model's states at real tokens then do not depend on the batch
        # (left padding shifts absolute positions in models such as GPT-2).
        side = self.tokenizer.padding_side
        self.tokenizer.padding_side = "right"
        try:
            hs = hidden_states(
                self.model,
                self.tokenizer,
                list(texts),
                layers=[-1],
                batch_size=self.batch_size,
                max_length=self.max_length,
            )  # n × [1, T_i, D]
        finally:
            self.tokenizer.padding_side = side
        feats = torch.stack([self.pool(h[0]) for h in hs])  # [n, D]
        return torch.nn.functional.normalize(feats, dim=-1)

    def encode_pool(self, ds: Iterable[Row]) -> torch.Tensor:
        eos = self.tokenizer.eos_token or ""
        return self.encode([_pool_text(r, eos) for r in _rows(ds)])  # [N, D]

    def encode_queries(self, ds: Iterable[Row]) -> torch.Tensor:
        return self.encode(["".join(_query_parts(r)) for r in _rows(ds)])  # [M, D]


class SentenceEmbed:
    """EMBED: a sentence embedder over the Tulu text; queries carry an instruction prefix (official
    ``representation/embed/compute_sentence_embeds.py``).

    Args:
        model: a sentence-transformers id/path, or None for the offline MiniLM of ``common``
            (the paper uses ``sentence-transformers/gtr-t5-base``).
        query_prefix: prepended to ``prompt + " " + label``.
    """

    def __init__(
        self,
        model: str | None = None,
        query_prefix: str = EMBED_QUERY_PREFIX,
        batch_size: int = 64,
        device: str = "cpu",
    ) -> None:
        self.embedder = Embedder(model, device=device, batch_size=batch_size)
        self.query_prefix = query_prefix

    def encode_pool(self, ds: Iterable[Row]) -> torch.Tensor:
        return torch.from_numpy(self.embedder.encode([_pool_text(r) for r in _rows(ds)]))

    def encode_queries(self, ds: Iterable[Row]) -> torch.Tensor:
        texts = [self.query_prefix + p + " " + lab for p, lab in map(_query_parts, _rows(ds))]
        return torch.from_numpy(self.embedder.encode(texts))
