"""WebWorld's run-config schema (``method=webworld``): the CPU toy's sizes and the paper stages.

Light on purpose (stdlib and :mod:`common.config` only): the CLI loads it to check a composed config
before anything heavy is imported. Trainer knobs are not mirrored here: the SFT recipes (paper
Table 9) are ``trl.SFTConfig`` fields passed in the ``stage1_trainer`` / ``stage2_trainer`` /
``agent_trainer`` nodes of ``configs/experiment/webworld_paper.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from common.config import DatasetSpec, MethodConfig

DEFAULT_PROMPTS = {  # our own wording of the chat layout (paper §3.2); mirrors methods/webworld/prompts.py
    "system": (
        "You simulate a web browser. You receive the state of a web page and then a series of "
        "actions. After each action, write the complete page state that the browser would show "
        "next. Use exactly the same format as the input state. Output only the page state: no "
        "commentary, no code, and do not shorten it."
    ),
    "first_turn": "Initial Page State:\n{state}\n\nFirst Action: '{action}'\n\nNext Page State:",
    "continue_turn": (
        "Continue the trajectory: predict the page state after this action.\n\n"
        "Action: '{action}'\n\nNext Page State:"
    ),
}


@dataclass
class BenchConfig:
    """The ``bench`` stage (WebWorld-Bench, paper §4): ``model`` predicts, a judge LLM scores.

    Sampling follows the upstream bench: world model T 0.7, top-p 0.8, 8192 tokens
    (``config/model_config.yaml``); judge T 0.7, 8192 tokens (``config/task_config.yaml``).

    Attributes:
        wm_url: an OpenAI-compatible server of ``model`` (``vllm serve``); None loads ``model``.
        judge, judge_url: the judge model and its endpoint (None: api.openai.com).
        n_samples: first-k items per dimension (None: all).
    """

    wm_url: str | None = None
    temperature: float = 0.7
    top_p: float = 0.8
    max_new_tokens: int = 8192
    judge: str = "gpt-4o-2024-11-20"  # paper §4
    judge_url: str | None = None
    judge_temperature: float = 0.7
    judge_max_tokens: int = 8192
    n_samples: int | None = None
    batch_size: int = 8


@dataclass
class SynthConfig:
    """The ``synth`` stage: an agent rolls out inside the served world model on seed tasks; a value
    model keeps the successful rollouts (paper §5, Table 5: 8K trajectories)."""

    world_model: str = "Qwen/WebWorld-8B"
    world_model_url: str | None = "http://localhost:8000/v1"
    agent: str = "Qwen/Qwen3-32B"  # inferred: the paper does not name the rollout agent
    agent_url: str | None = "http://localhost:8001/v1"
    value_model: str = "gpt-4o-2024-11-20"  # paper Table 6 value model
    value_url: str | None = None
    seeds: str = "data/webworld/seed_tasks.jsonl"  # {"goal", "s0"} per line (Mind2Web intents)
    n_target: int = 8000  # paper Table 5
    max_steps: int = 15  # inferred
    window: int = 10  # paper demo: W = 10
    wm_max_tokens: int = 8192


@dataclass
class PaperConfig:
    """Data and outputs of the paper stages (``model`` is the checkpoint every stage loads).

    Attributes:
        size: the Table 9 size key of the SFT recipes (``8B`` | ``14B`` | ``32B``; ``tiny`` on CPU).
        data: Stage-1 chats (WebWorldData, streamed) or a local JSONL through ``data.path``.
        max_samples: first-k Stage-1 chats (None: all).
        stage2_data: the ~1K CoT chats of Stage 2 (not released; a local JSONL).
        agent_data: the ``synth`` stage's output, read by the ``agent`` stage.
    """

    size: str = "8B"
    data: DatasetSpec = field(
        default_factory=lambda: DatasetSpec(hub_id="Qwen/WebWorldData", split="train")
    )
    max_samples: int | None = None
    output_dir: str = "outputs/webworld_paper"
    stage2_data: str = "data/webworld/cot_1k.jsonl"
    agent_data: str = "outputs/webworld_paper/synth.jsonl"
    synth: SynthConfig = field(default_factory=SynthConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)


@dataclass
class WebWorldRunConfig(MethodConfig):
    """``method=webworld``: the CPU toy "MiniWorld" (``stage=toy``; the fields up to ``prompts``)
    and the paper stages ``stage1``, ``stage2``, ``synth``, ``agent``, ``bench``."""

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "MiniWorld: a tiny learned A11y world model; data scale, history, lookahead (CPU)",
        "stage1": "paper: full SFT of `model` on WebWorldData chats (every assistant turn)",
        "stage2": "paper: continue on ~1K CoT chats, last assistant turn only",
        "synth": "paper: agent rollouts inside the served world model, value-filtered",
        "agent": "paper: SFT of `model` as an agent on the synthesised trajectories",
        "bench": "paper: WebWorld-Bench (Factuality, Web Turing) of `model` on `benchmark`",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("stage1", "stage2", "synth", "agent", "bench")
    TRAINERS: ClassVar[dict[str, str]] = {
        "stage1_trainer": "trl:SFTConfig",
        "stage2_trainer": "trl:SFTConfig",
        "agent_trainer": "trl:SFTConfig",
    }
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ("causal_lm",)
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ("webworld_bench",)

    name: str = "webworld"
    stage: str = "toy"
    # ---- toy
    n_sites: int = 210  # generated sites: n_train_sites for training, the rest held out
    n_train_sites: int = 200
    n_pages: int = 5  # pages per site
    min_steps: int = 2  # random-crawl length
    max_steps: int = 4
    data_sizes: list[int] = field(default_factory=lambda: [300, 3000])  # [small, large] crawls
    epochs: int = 2
    lr: float = 3e-3
    lr_scheduler: str = "constant_with_warmup"  # a constant lr lets the copy circuit form
    batch_size: int = 4
    tokenizer: str = "word"  # WordLevel vocabulary of the site grammar ("bpe" also works)
    vocab_size: int = 1000
    model: dict[str, Any] = field(  # common.tiny.tiny_causal_lm arguments (random init)
        default_factory=lambda: dict(
            arch="llama",
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=128,
            tie_word_embeddings=False,
        )
    )
    induction_steps: int = 800  # random-word lookup warm-up before SFT (common.tiny)
    eval_trajectories: int = 200
    max_new_tokens: int = 90  # full-page predictions (fill / checkbox)
    title_tokens: int = 8  # title-only predictions: first line only
    episodes: int = 40  # lookahead "reach page X" episodes per seed
    agent_p: float = 0.4  # noisy agent: correct link with this probability
    k: int = 3  # best-of-k (paper Table 6: BoN(3))
    extra_steps: int = 1  # step budget = shortest-path length + extra_steps
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    # lookahead arms (toy_lookahead.ARMS); "bon_noisy" is the diagnosis arm: the true next page with
    # probability noisy_acc, else a wrong title (docs/methods/webworld.md "Diagnosis")
    lookahead_arms: list[str] = field(
        default_factory=lambda: ["greedy", "bon_copy", "bon_learned", "bon_oracle"]
    )
    noisy_acc: float = 0.3
    # a noisy-oracle error names a random other title ("title") or shows no change ("copy")
    noisy_error: str = "title"
    lookahead_min_conf: float = 0.0  # > 0: a learned prediction below this confidence is ignored
    threads: int = 1
    log_steps: int = 100
    prompts: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_PROMPTS))
    # ---- paper
    paper: PaperConfig = field(default_factory=PaperConfig)
    stage1_trainer: dict[str, Any] = field(default_factory=dict)  # trl.SFTConfig fields
    stage2_trainer: dict[str, Any] = field(default_factory=dict)
    agent_trainer: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.data_sizes) != 2 or self.data_sizes[0] >= self.data_sizes[1]:
            raise ValueError(f"method.data_sizes must be [small, large], got {self.data_sizes}")
        arms = ("greedy", "bon_copy", "bon_learned", "bon_oracle", "bon_noisy")
        if not self.lookahead_arms or set(self.lookahead_arms) - set(arms):
            raise ValueError(f"method.lookahead_arms must be a subset of {arms}")
        if not 0 <= self.noisy_acc <= 1 or not 0 <= self.lookahead_min_conf < 1:
            raise ValueError("method.noisy_acc must lie in [0, 1], lookahead_min_conf in [0, 1)")
        if self.noisy_error not in ("title", "copy"):
            raise ValueError(
                f"method.noisy_error must be 'title' or 'copy', got {self.noisy_error!r}"
            )
        unknown = set(self.prompts) - set(DEFAULT_PROMPTS)
        if unknown:
            raise ValueError(f"method.prompts has unknown keys {sorted(unknown)}")
        if self.paper.size not in ("0.6B", "1.7B", "4B", "8B", "14B", "32B", "tiny"):
            raise ValueError(
                f"method.paper.size must be a Table 9 size or 'tiny', got {self.paper.size!r}"
            )
