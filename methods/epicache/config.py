"""EpiCache's configs: the library's :class:`EpiCacheConfig` and the run-config schema ``method=epicache``.

Light on purpose (stdlib and :mod:`common.config` only): the CLI loads this file to type-check a
composed config before any heavy import. The checkpoint comes from the ``model`` group
(``configs/model/*.yaml``) and the conversations from the ``benchmark`` group
(``configs/benchmark/{locomo,realtalk,longmemeval}.yaml``); nothing here hard-codes an id of either.
Defaults are the official code's (apple/ml-epicache b742661) unless a comment says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from common.config import MethodConfig

# The official extraction instruction (model/wrapper.py::token_scoring, clustering branch).
DEFAULT_INSTRUCTION = (
    "Extract essential information from this conversation segment. Identify speaker names, personas, "
    "key events with dates/times, personal details, commitments, opinions, relationships, emotional "
    "moments, and unique experiences."
)
PROMPT_FORMATS = ("official", "plain")
# Eviction scorers of methods.epicache.scoring (official names; *_lastwindow/_repeat/_cosine: ours).
SCORERS = (
    "patched",
    "snapkv",
    "snapkv_lastwindow",
    "kvzip",
    "kvzip_repeat",
    "infinipot",
    "keydiff",
    "keydiff_cosine",
    "streaming",
)
LEVELS = ("uniform", "headwise")
ALLOC_MODES = ("paper", "repo")
MATCH_METRICS = ("cosine", "dot")


@dataclass
class EpiCacheConfig:
    """Hyper-parameters of EpiCache (library use: ``EpiCacheSession(..., config=EpiCacheConfig())``).

    Attributes:
        n_episodes: E, number of episodes (official 4).
        w_embed: utterances per segment (official 4).
        n_medoid: central segments in the patched prompt (official scripts 8; v4 text 1).
        instruction: the extraction instruction of the scoring prompt (None: none; default the
            official text).
        prompt_format: ``"official"`` (``"\\n\\n"`` + instruction, end of the user turn, assistant
            header, segments separated by blank lines) or ``"plain"`` (ours: instruction + newline +
            segments, no turn structure).
        scorer: ``"patched"`` (EpiCache: one cache per episode) or a baseline of ``SCORERS`` (one
            cache for every question; the official KVzip / SnapKV / KeyDiff / InfiniPot forms).
        window: last-window length of the SnapKV scorers (official 64).
        budget: M, average per-layer per-KV-head token budget (paper main table 8192).
        block_size: M_block, prefill block size (official 2048).
        level: ``"uniform"`` (same count per head) or ``"headwise"`` (official "pair" level).
        alpha: layer-allocation sharpness (paper 2; 0 disables allocation).
        alloc_mode: ``"paper"`` or ``"repo"`` allocation formula.
        floor_frac: per-layer budget floor as a fraction of M (official 1/4).
        protect_prefix: never evict the system prefix (official: off).
        max_new_tokens: answer length (official 50).
        match_metric: ``"cosine"`` (paper) or ``"dot"`` (official code).
        seed, n_init: k-means settings (official 42, 10).
        chat_frame: wrap context and question in the tokenizer's chat template.
        enable_thinking: passed to the chat template (None: not passed, the template's default).
            False by default: the official frame (``model/template.py``) has no thinking turn and
            the official runs used Qwen2.5-Instruct; on Qwen3 ``False`` closes an empty
            ``<think>`` block after the assistant header, so answers start with the answer
            (``True`` or None lets Qwen3 open its own reasoning block inside the 50-token budget).
        date_string: passed to the chat template (None: not passed). Llama 3.1 / 3.2 templates
            print "Today Date: <date_string>" in the system turn and default it to today's date,
            which changes the cached prefix (and its length) from day to day; the default is the
            templates' own fallback date, so the frame is the same on every day. Templates that do
            not use it ignore it.
        split_long_assistant_chars: split longer assistant turns into sentences (None: off).
        allow_shrink: with fewer segments than episodes, shrink E instead of raising.
    """

    n_episodes: int = 4
    w_embed: int = 4
    n_medoid: int = 8
    instruction: str | None = DEFAULT_INSTRUCTION
    prompt_format: str = "official"  # "official" | "plain"
    scorer: str = "patched"
    window: int = 64
    budget: int = 8192
    block_size: int = 2048
    level: str = "headwise"  # "uniform" | "headwise"
    alpha: float = 2.0
    alloc_mode: str = "paper"  # "paper" | "repo"
    floor_frac: float = 0.25
    protect_prefix: bool = False
    max_new_tokens: int = 50
    match_metric: str = "cosine"  # "cosine" | "dot"
    seed: int = 42
    n_init: int = 10
    chat_frame: bool = True
    enable_thinking: bool | None = False  # official frame: no thinking (Qwen2.5-Instruct runs)
    date_string: str | None = "26 Jul 2024"  # Llama 3.x templates' own fallback date
    split_long_assistant_chars: int | None = 500
    allow_shrink: bool = False

    def __post_init__(self) -> None:
        for name in ("n_episodes", "w_embed", "n_medoid", "budget", "block_size", "max_new_tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if self.alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {self.alpha}")
        for name, options in (
            ("level", LEVELS),
            ("alloc_mode", ALLOC_MODES),
            ("prompt_format", PROMPT_FORMATS),
            ("scorer", SCORERS),
            ("match_metric", MATCH_METRICS),
        ):
            if getattr(self, name) not in options:
                raise ValueError(f"{name} must be one of {options}, got {getattr(self, name)!r}")
        if not isinstance(self.window, int) or self.window < 1:
            raise ValueError(f"window must be an int >= 1, got {self.window!r}")
        if self.date_string is not None and not (
            isinstance(self.date_string, str) and self.date_string.strip()
        ):
            raise ValueError(
                f"date_string must be a non-empty string such as '26 Jul 2024' or None, "
                f"got {self.date_string!r}"
            )


@dataclass
class ProfileConfig:
    """The ``profile`` stage: layer sensitivity on one long sample (official ``layer_profile.py``).

    Attributes:
        text_path: a local text file holding the sample (wins over the hub set).
        hub_id, split, column, index: the hub sample (official: BookSum, sample 0).
        max_tokens: the sample is cut to this many tokens (official 16K).
        block, sink, overlap: the block mask (official 4096 / 128 / 0.5).
        window: None for per-token cosine (paper), an int for windowed cosine (official 100).
    """

    text_path: str | None = None
    hub_id: str = "kmfoda/booksum"
    split: str = "test"
    column: str = "chapter"
    index: int = 0
    max_tokens: int = 16384
    block: int = 4096
    sink: int = 128
    overlap: float = 0.5
    window: int | None = 100

    def __post_init__(self) -> None:
        if self.max_tokens < 2 or self.block < 1 or self.sink < 0:
            raise ValueError(
                f"method.profile: need max_tokens >= 2, block >= 1, sink >= 0; got "
                f"{self.max_tokens}, {self.block}, {self.sink}"
            )
        if not 0.0 <= self.overlap <= 1.0:
            raise ValueError(f"method.profile.overlap must lie in [0, 1], got {self.overlap}")
        if self.window is not None and self.window < 1:
            raise ValueError(f"method.profile.window must be None or >= 1, got {self.window}")


@dataclass
class EpiCacheRunConfig(EpiCacheConfig, MethodConfig):
    """``method=epicache``: the CPU toy (``stage=toy``) and the paper's stages ``profile`` / ``eval``.

    Attributes (besides :class:`EpiCacheConfig`'s):
        embedder: sentence-transformers id of the segment/question encoder (None: the offline
            MiniLM; paper: Qwen/Qwen3-Embedding-0.6B). embedder_path: a local copy (wins).
        judge_model: the LLM judge (official gpt-4o-mini-2024-07-18, temperature 0; None: no judge).
        judge_base_url / judge_api_key_env: its OpenAI-compatible endpoint and key variable.
        sensitivity_path: the ``profile`` stage's JSON read by ``eval`` (None: uniform budgets);
            ``profile`` also writes it there when set.
        profile: the ``profile`` stage's sample and mask.
        n_eval: conversations evaluated (toy 50; paper 0 = all).
        train_*, hidden_size, cache_model, n_questions, n_eval_threads, n_sink, gate: the toy's.
    """

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "CPU toy: four-topic key-value chat, EpiCache vs block-prefill baselines vs full KV",
        "profile": "paper: layer sensitivity of `model` on one long sample (writes sensitivity.json)",
        "eval": "paper: EpiCache (or method.scorer=<baseline>) on every set of `benchmark`",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("profile", "eval")
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ("causal_lm",)
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ("locomo", "realtalk", "longmemeval")

    name: str = "epicache"
    stage: str = "toy"
    embedder: str | None = None
    embedder_path: str | None = None
    judge_model: str | None = None
    judge_base_url: str | None = None
    judge_api_key_env: str = "OPENAI_API_KEY"
    sensitivity_path: str | None = None
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    n_eval: int = 50
    # toy
    train_steps: int = 1500  # ~3000 in all with the warm-up
    train_induction_steps: int = 500  # random-word lookup warm-up (common.tiny.induction_warmup)
    train_batch: int = 8
    train_lr: float = 3e-3
    train_time_limit_s: float | None = 1800.0
    train_curriculum: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    train_questions: int = 40
    hidden_size: int = 64
    cache_model: bool = True
    n_questions: int = 24
    n_eval_threads: int = 1
    n_sink: int = 4
    gate: float = 0.8

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_eval < 0:
            raise ValueError(f"method.n_eval must be >= 0 (0 = all), got {self.n_eval}")
