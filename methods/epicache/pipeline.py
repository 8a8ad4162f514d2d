"""The EpiCache session: offline episodic cache building and online answering (official
``run_epicache.py`` / ``run_epicache_eval.py``).

``build`` segments the history, embeds and clusters the segments into E episodes, and runs one
block-wise prefill per episode over the *whole* history, scored by that episode's patched prompt.
``answer`` embeds the question, loads the closest episode's cache and greedy-decodes with absolute
positions; the question's K/V are dropped so the cache serves the next turn unchanged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from .budget import allocate_layer_budgets
from .cache import EpiCache
from .config import DEFAULT_INSTRUCTION as DEFAULT_INSTRUCTION  # re-exported
from .config import PROMPT_FORMATS, EpiCacheConfig
from .data import Conversation
from .decode import greedy_decode
from .episodes import Episodes, build_patched_prompt, cluster_segments, match_episode
from .prefill import blockwise_prefill, peak_tokens_per_head
from .scoring import INFINIPOT_INSTRUCTION, KVZIP_INSTRUCTION
from .segmentation import Segment, Utterance, render_said, segment_utterances

logger = logging.getLogger(__name__)

SENTINEL = "<<EPICACHE_CONTEXT>>"


def scoring_prompt_ids(
    encode: Callable[[str], list[int]],
    episode_text: str,
    instruction: str | None,
    postfix: str,
    prompt_format: str = "official",
) -> list[int]:
    """Token ids of the episode-scoring prompt.

    ``official`` (``model/wrapper.py::token_scoring``, clustering branch): ``enc("\n\n" +
    instruction) ⊕ enc(postfix) ⊕ enc(episode_text)``, three separate encodings; ``postfix`` is the
    end of the user turn plus the assistant header, so the segments are scored as an assistant-role
    recitation. ``plain`` (ours, earlier): ``enc(instruction + "\n" + episode_text)``, no turn
    structure (``episode_text`` then comes from ``build_patched_prompt(layout="plain")``).

    Args:
        encode: text -> ids without special tokens.
        episode_text: the episode's segments (:func:`build_patched_prompt`).
        instruction: the extraction instruction, or None for none.
        postfix: end of the user turn + assistant header ("" without a chat frame).
        prompt_format: ``"official"`` or ``"plain"``.

    Raises:
        ValueError: on an unknown format or an empty result.
    """
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"prompt_format must be one of {PROMPT_FORMATS}, got {prompt_format!r}")
    if prompt_format == "plain":
        text = episode_text if not instruction else f"{instruction}\n{episode_text}"
        ids = list(encode(text))
    else:
        ids = list(encode("\n\n" + instruction)) if instruction else []
        ids += list(encode(postfix)) if postfix else []
        ids += list(encode(episode_text))
    if not ids:
        raise ValueError("the scoring prompt is empty: no segments and no instruction")
    return ids


def baseline_prefix_ids(encode: Callable[[str], list[int]], scorer: str, postfix: str) -> list[int]:
    """``scorer_prefix_ids`` of the official KVzip / InfiniPot scorers (``token_scoring``).

    ``kvzip``: ``enc("\n\nRepeat the part of the previous context exactly.") ⊕ enc(postfix)``, then
    the block follows; ``infinipot``: ``enc("\n\nSummarize the previous context highlighting the most
    important parts.") ⊕ enc(postfix)`` alone. Other scorers need none (empty list).
    """
    text = {"kvzip": KVZIP_INSTRUCTION, "infinipot": INFINIPOT_INSTRUCTION}.get(scorer)
    if text is None:
        return []
    return list(encode("\n\n" + text)) + (list(encode(postfix)) if postfix else [])


@dataclass
class AnswerRecord:
    text: str
    episode: int
    similarity: float
    latency_s: float
    token_ids: list[int] = field(default_factory=list)


class EpiCacheSession:
    """One conversation's episodic caches and the question loop.

    Args:
        model: HF causal LM (batch size 1).
        tokenizer: its tokenizer (a chat template is needed when ``config.chat_frame``).
        embedder: anything with ``encode(list[str]) -> ndarray[n, D]`` (e.g. ``common.embeddings.Embedder``).
        config: :class:`EpiCacheConfig`.
        sigma: optional per-layer key similarities from ``profile_layer_sensitivity`` (enables
            sensitivity-aware budgets; None = uniform M per layer).
        render_context: conversation -> context text (default: the official layout).
        render_utterance: utterance -> line for the patched prompt.
        embed_utterance: utterance -> line for the embedder (default: ``render_utterance``).
        render_question: question -> text fed after the context (default: "\\n\\n" + question).
        embed_question: question -> text for the embedder when routing (default: the question).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        embedder,
        config: EpiCacheConfig | None = None,
        sigma: np.ndarray | None = None,
        render_context: Callable[[Conversation], str] | None = None,
        render_utterance: Callable[[Utterance], str] = render_said,
        embed_utterance: Callable[[Utterance], str] | None = None,
        render_question: Callable[[str], str] | None = None,
        embed_question: Callable[[str], str] | None = None,
    ) -> None:
        self.model, self.tokenizer, self.embedder = model, tokenizer, embedder
        self.config = config or EpiCacheConfig()
        n_layers = int(model.config.num_hidden_layers)
        if sigma is not None and len(sigma) != n_layers:
            raise ValueError(
                f"sigma has {len(sigma)} layers but the model has {n_layers}: the sensitivity profile "
                "belongs to another model"
            )
        self.sigma = sigma
        self.render_context = render_context or (lambda c: c.render())
        self.render_utterance = render_utterance
        self.embed_utterance = embed_utterance
        self.render_question = render_question or (lambda q: "\n\n" + q.strip())
        self.embed_question = embed_question or (lambda q: q)
        if self.config.chat_frame and not getattr(tokenizer, "chat_template", None):
            raise ValueError("config.chat_frame=True needs a tokenizer with a chat template")
        self.segments: list[Segment] = []
        self.episodes: Episodes | None = None
        self.caches: list[EpiCache] = []
        self.prompts: list[str] = []

    # ---------------------------------------------------------------------------------------
    def _frame(self) -> tuple[str, str]:
        """(prefix, postfix) around the context from the chat template (official ``model/template.py``).

        ``config.enable_thinking`` and ``config.date_string`` go to the template when not None
        (docs/models.md: what each family's template then renders).
        """
        cfg = self.config
        if not cfg.chat_frame:
            return "", ""
        msgs = [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": SENTINEL},
        ]
        options = {
            k: v
            for k, v in (("enable_thinking", cfg.enable_thinking), ("date_string", cfg.date_string))
            if v is not None
        }
        full = self.tokenizer.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=True, **options
        )
        pre, post = full.split(SENTINEL)
        return pre, post

    def _ids(self, text: str) -> torch.Tensor:
        ids = self.tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
        return ids.to(self.model.device)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False).input_ids)

    def _as_ids(self, ids: list[int]) -> torch.Tensor:
        return torch.tensor([ids], dtype=torch.long, device=self.model.device)

    def layer_budgets(self) -> np.ndarray:
        """Per-layer budgets M_l (paper's layer allocation, :func:`allocate_layer_budgets`; uniform
        without a sensitivity profile)."""
        n_layers = int(self.model.config.num_hidden_layers)
        if self.sigma is None or self.config.alpha == 0:
            return np.full(n_layers, self.config.budget, dtype=np.int64)
        return allocate_layer_budgets(
            self.sigma,
            self.config.budget,
            self.config.alpha,
            self.config.alloc_mode,
            self.config.floor_frac,
        )

    def build(self, conversation: Conversation) -> None:
        """Offline: segment, embed, cluster, then one block-wise prefill per episode (paper, Episodic KV
        Compression: each episode's cache is built over the whole history, scored by its patched prompt).

        With a baseline ``config.scorer`` one cache is built instead and serves every question.

        Raises:
            ValueError: on an empty conversation or fewer segments than episodes.
        """
        cfg = self.config
        if not isinstance(conversation, Conversation) or not conversation.utterances:
            raise ValueError("conversation must be a non-empty Conversation")
        self.segments = segment_utterances(
            conversation.utterances,
            cfg.w_embed,
            cfg.split_long_assistant_chars,
            render=self.render_utterance,
            embed_render=self.embed_utterance,
        )
        pre, post = self._frame()
        self._post = post
        prefix_ids = self._ids(pre) if pre else None
        ctx_ids = self._ids(self.render_context(conversation))
        budgets = self.layer_budgets()
        self.caches, self.prompts = [], []
        if cfg.scorer != "patched":
            extra = baseline_prefix_ids(self._encode, cfg.scorer, post)
            self.episodes = None
            self.caches.append(
                blockwise_prefill(
                    self.model,
                    prefix_ids,
                    ctx_ids,
                    None,
                    budgets,
                    cfg.block_size,
                    level=cfg.level,
                    protect_prefix=cfg.protect_prefix,
                    scorer=cfg.scorer,
                    window=cfg.window,
                    scorer_prefix_ids=self._as_ids(extra) if extra else None,
                )
            )
            logger.info("built one %s cache over %d tokens", cfg.scorer, self.caches[0].seen_tokens)
            return
        emb = self.embedder.encode([s.embed_text for s in self.segments])  # [K, D]
        self.episodes = cluster_segments(
            emb, cfg.n_episodes, cfg.seed, cfg.n_init, cfg.allow_shrink
        )
        official = cfg.prompt_format == "official"
        for e in range(self.episodes.n_episodes):
            text = build_patched_prompt(
                self.episodes,
                e,
                self.segments,
                cfg.n_medoid,
                None if official else cfg.instruction,
                layout="official" if official else "plain",
            )
            ids = scoring_prompt_ids(self._encode, text, cfg.instruction, post, cfg.prompt_format)
            self.prompts.append(self.tokenizer.decode(ids))
            cache = blockwise_prefill(
                self.model,
                prefix_ids,
                ctx_ids,
                self._as_ids(ids),
                budgets,
                cfg.block_size,
                level=cfg.level,
                protect_prefix=cfg.protect_prefix,
                scorer="patched",
            )
            self.caches.append(cache)
        logger.info(
            "built %d episode caches over %d tokens (%d segments)",
            len(self.caches),
            self.caches[0].seen_tokens,
            len(self.segments),
        )

    def route(self, questions: Sequence[str]) -> list[tuple[int, float]]:
        """Picks each question's episode: e* = argmax_e cos(f_embed(q), c_e) (paper, query-time
        episode matching; :func:`match_episode`). The questions are embedded in one batch.

        Returns:
            ``[(episode, similarity), ...]``; with a baseline scorer (one cache) ``(0, nan)`` each.

        Raises:
            ValueError: before ``build`` or on an empty question.
        """
        if not self.caches:
            raise ValueError("call build(conversation) before route() or answer()")
        if any(not isinstance(q, str) or not q.strip() for q in questions):
            raise ValueError("questions must be non-empty strings")
        if self.episodes is None:  # a baseline scorer: one cache for every question
            return [(0, float("nan"))] * len(questions)
        q_emb = self.embedder.encode([self.embed_question(q) for q in questions])  # [Q, D]
        return [match_episode(q, self.episodes, self.config.match_metric) for q in q_emb]

    def answer(self, question: str) -> AnswerRecord:
        """Online: route the question to its episode and greedy-decode (paper, query time; question
        format "\n\n" + question + end of turn + assistant header from the official ``run_epicache_eval.py``).

        Raises:
            ValueError: on an empty question or before ``build``.
        """
        if not isinstance(question, str) or not question.strip():
            raise ValueError("question must be a non-empty string")
        if not self.caches:
            raise ValueError("call build(conversation) before answer()")
        t0 = time.perf_counter()
        e, sim = self.route([question])[0]
        ids = self._ids(self.render_question(question) + self._post)
        eos = [self.tokenizer.eos_token_id] if self.tokenizer.eos_token_id is not None else []
        out = greedy_decode(self.model, self.caches[e], ids, self.config.max_new_tokens, eos)
        text = self.tokenizer.decode(out[0], skip_special_tokens=True).strip()
        return AnswerRecord(text, e, sim, time.perf_counter() - t0, out[0].tolist())

    def memory_report(self) -> dict[str, float]:
        """Peak slots per head during prefill and stored bytes per episode cache."""
        return {
            "peak_tokens_per_head": float(max(peak_tokens_per_head(c) for c in self.caches)),
            "per_episode_cache_bytes": float(np.mean([c.nbytes() for c in self.caches])),
            "n_episodes": float(len(self.caches)),
        }
