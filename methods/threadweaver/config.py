"""ThreadWeaver's run-config schema (``method=threadweaver``): the toy's settings and the paper stages.

Light on purpose (stdlib and :mod:`common.config` only): the CLI loads it to type-check a composed
config before any heavy import. Trainer knobs are not mirrored here: the SFT settings are fields of
:class:`methods.threadweaver.sft.TrieSFTConfig` (a ``trl.SFTConfig``) and the P-GRPO settings of
:class:`methods.threadweaver.pgrpo_trainer.PGRPOConfig` (a ``trl.GRPOConfig``), passed as the
``sft_trainer`` / ``rl_trainer`` nodes of ``configs/experiment/threadweaver_paper.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from common.config import DatasetSpec, MethodConfig

__all__ = [
    "ATTN_FOR_MASK",
    "MASK_IMPLS",
    "EvalConfig",
    "RolloutConfig",
    "ThreadWeaverConfig",
    "ThreadWeaverRunConfig",
    "check_mask_impl",
    "knob",
]

#: attention implementation (``model.attn_implementation``) that serves each trie mask
#: (``methods.threadweaver.trie.ATTN_FOR_MASK``; the first is the one the paper stages load)
ATTN_FOR_MASK: dict[str, tuple[str, ...]] = {
    "dense": ("sdpa", "eager"),
    "flex": ("flex_attention",),
}
#: the trie mask kinds: ``dense`` additive ``[B, 1, N, N]`` (SDPA/eager) or ``flex``
#: FlexAttention ``BlockMask`` (App. B)
MASK_IMPLS: tuple[str, ...] = tuple(ATTN_FOR_MASK)


def knob(default: Any, help: str) -> Any:
    """A dataclass field with a ``help`` string (what TRL's ``HfArgumentParser`` reads), for the
    trainer configs :class:`~methods.threadweaver.sft.TrieSFTConfig` and
    :class:`~methods.threadweaver.pgrpo_trainer.PGRPOConfig`."""
    return field(default=default, metadata={"help": help})


def check_mask_impl(mask_impl: str, name: str = "mask_impl") -> None:
    """Raise ``ValueError`` unless ``mask_impl`` is one of :data:`MASK_IMPLS`."""
    if mask_impl not in MASK_IMPLS:
        raise ValueError(f"{name} must be one of {MASK_IMPLS}, got {mask_impl!r}")


_ARMS = ("seq", "tw", "flat")


@dataclass
class ThreadWeaverConfig:
    """The CPU toy "parallel codebook spelling" (``method.toy.*``): task sizes, the toy's own
    AdamW loop (not TRL) and the orchestrator at toy scale. The paper stages do not read it."""

    # --- the toy's SFT loop (trie packing for the tw arm)
    sft_lr: float = 1e-5
    sft_warmup_ratio: float = 0.05
    sft_weight_decay: float = 0.01
    sft_batch_size: int = 16
    sft_epochs: int = 8
    sft_steps: int = 0  # optimiser steps (0 = use epochs)
    # --- orchestrated evaluation (§3.2)
    budget_total: int = 40000  # total tokens across branches
    max_model_len: int = 40960
    max_iters: int = 32  # official code
    join_suffix: str = "\n</Parallel>"  # paper form (§3.2, Fig. 2); "\n" = official code
    temperature: float = 1.0  # the toy preset evaluates greedily (0.0)
    top_p: float = 1.0
    # --- toy task "parallel codebook spelling"
    n_symbols: int = 16
    chain_len: int = 16
    k_values: list[int] = field(default_factory=lambda: [3, 4, 5, 6])
    n_train: int = 4000
    n_eval: int = 300
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 128
    eval_batch_size: int = 128
    arms: list[str] = field(default_factory=lambda: ["seq", "tw", "flat"])
    hybrid_eval: bool = True  # also run the TW model without the orchestrator (AR mode)
    toy_num_colon_token: bool = True  # "N:" is one token in the toy tokenizer (see toy_tokenizer)
    toy_tw_init: str = "seq"  # "seq": tw/flat fine-tune the trained seq model (as TW SFTs Qwen3-8B)
    toy_numbered: bool = True  # numbered prompt "Q:\n1: s5\n2: s1" and numbered seq chains

    def __post_init__(self) -> None:
        bad = [a for a in self.arms if a not in _ARMS]
        if bad or "seq" not in self.arms:
            raise ValueError(f"arms must include 'seq' and only use {_ARMS}, got {self.arms}")
        if not self.k_values or min(self.k_values) < 1 or max(self.k_values) > self.n_symbols:
            raise ValueError(
                f"k_values must lie in [1, n_symbols={self.n_symbols}], got {self.k_values}"
            )
        if self.toy_tw_init not in ("seq", "scratch"):
            raise ValueError(f"toy_tw_init must be 'seq' or 'scratch', got {self.toy_tw_init!r}")
        if self.toy_numbered and not self.toy_num_colon_token:
            raise ValueError("toy_numbered=true needs toy_num_colon_token=true")
        if self.n_symbols * self.chain_len > 4096:
            raise ValueError("n_symbols * chain_len must be <= 4096 (toy vocabulary size)")


@dataclass
class RolloutConfig:
    """The fork/join orchestrator of the ``rl`` and ``eval`` stages (§3.2, App. B)."""

    budget_tokens: int = 40000  # App. B: 40k total tokens across branches
    max_model_len: int = 40960  # App. B
    max_iters: int = 32  # official controller's loop guard
    join_suffix: str = "\n</Parallel>"  # paper §3.2 / Fig. 2; "\n": official no_conclusion mode
    conclusion: bool = False  # official <Conclusion> mode (no_conclusion=false); paper: off

    def __post_init__(self) -> None:
        for name in ("budget_tokens", "max_model_len", "max_iters"):
            if getattr(self, name) < 1:
                raise ValueError(f"method.rollout.{name} must be >= 1, got {getattr(self, name)}")


@dataclass
class SynthConfig:
    """The data stages (§4, App. C/E): ``synth`` rewrites sequential traces into parallel ones with
    an LLM (stage 1); ``self_train`` keeps the stage-1 model's own valid, correct rollouts (stage 2).

    Attributes:
        source: sequential traces, rows ``{problem, response, answer}`` whose ``response`` holds
            ``<think> ... </think>`` then the final answer (stage 0: the model's own correct traces).
        n: traces to convert (paper §6.1: 1,000 sampled correct traces, 959 kept).
        llm_model: the rewriting LLM (paper: GPT-5), any OpenAI-compatible chat endpoint.
        llm_base_url: API root with ``/v1`` (None: api.openai.com; e.g. a ``vllm serve`` URL).
        llm_api_key_env: environment variable holding the key (read per request, never logged).
        llm_kwargs: request fields sent with every call (e.g. ``reasoning_effort: low``, official
            ``EFFORT=low``).
        workers: traces converted concurrently.
        samples: stage-2 rollouts per ``method.rl_data`` problem (paper §6.1: one).
        temperature, top_p: stage-2 sampling (App. B: 1.0 / 1.0).
    """

    source: DatasetSpec = field(default_factory=lambda: DatasetSpec(split="train"))
    n: int | None = 1000
    llm_model: str = "gpt-5"
    llm_base_url: str | None = None
    llm_api_key_env: str = "OPENAI_API_KEY"
    llm_kwargs: dict[str, Any] = field(default_factory=dict)
    workers: int = 4
    samples: int = 1
    temperature: float = 1.0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if self.n is not None and self.n < 1:
            raise ValueError(f"method.synth.n must be >= 1 or null (all), got {self.n}")
        if self.workers < 1 or self.samples < 1:
            raise ValueError(
                f"method.synth.workers and samples must be >= 1, got {self.workers}, {self.samples}"
            )


@dataclass
class EvalConfig:
    """The ``eval`` stage: orchestrated sampling on every set of ``benchmark`` (§6.1, Tab. 1).

    Attributes:
        engine: ``vllm`` (paper) or ``hf`` (``transformers`` ``generate``, CPU tests).
        temperature, top_p: App. B (1.0 / 1.0).
        samples: one k of Avg@k for every set; None: the paper's k per set (32 AIME24/25,
            8 AMC23, 1 MATH500, 4 Minerva, 8 OlympiadBench; §6.1), 1 for other sets.
        parallel: false evaluates without the orchestrator (hybrid AR mode / sequential baseline).
        baseline_records: ``records.json`` of a sequential model's eval run; adds Table 1's
            speedups against it.
    """

    engine: str = "hf"
    temperature: float = 1.0  # App. B
    top_p: float = 1.0  # App. B
    samples: int | None = None
    parallel: bool = True
    baseline_records: str | None = None

    def __post_init__(self) -> None:
        if self.engine not in ("hf", "vllm"):
            raise ValueError(f"method.eval.engine must be 'hf' or 'vllm', got {self.engine!r}")
        if self.samples is not None and self.samples < 1:
            raise ValueError(f"method.eval.samples must be >= 1, got {self.samples}")


_TRAINING_STAGES = ("sft", "rl")


def flex_training_unavailable() -> str | None:
    """Why FlexAttention cannot train here, or None when it can (a CUDA device is visible).

    torch's FlexAttention runs its forward on the CPU but has no backward there
    (``torch.nn.attention.flex_attention`` raises ``NotImplementedError: FlexAttention does not
    support backward on CPU``); the ``sft`` and ``rl`` stages back-propagate through it.
    Imports torch lazily (only when a training stage asks for ``mask_impl=flex``).
    """
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a core dependency
        return "torch is not installed"
    if torch.cuda.is_available():
        return None
    return (
        f"FlexAttention has no backward pass on the CPU in torch {torch.__version__} "
        "(torch.nn.attention.flex_attention raises NotImplementedError 'FlexAttention does not "
        "support backward on CPU') and no CUDA device is visible"
    )


@dataclass
class ThreadWeaverRunConfig(MethodConfig):
    """``method=threadweaver``: the toy (``stage=toy``) and the paper's stages ``sft``, ``rl``, ``eval``.

    Attributes:
        toy: the CPU toy's settings (:class:`ThreadWeaverConfig`).
        mask_impl: trie attention mask of the ``sft`` and ``rl`` stages: ``dense`` (additive
            ``[B, 1, N, N]``, SDPA) or ``flex`` (FlexAttention ``BlockMask``, App. B; CUDA only).
            The stages load the model with the attention implementation that serves it
            (:data:`ATTN_FOR_MASK`); a ``model.attn_implementation`` that cannot is rejected.
        sft_data: jsonl/parquet of ``{problem, response}`` parallel traces (the 959 stage-1
            traces or the 17,491 self-training ones; ``methods.threadweaver.data_pipeline``).
        sft_trainer: fields of :class:`methods.threadweaver.sft.TrieSFTConfig` (``trl.SFTConfig``).
        rl_data: the RL prompts with answers (Polaris-53K subset, App. B).
        rl_trainer: fields of :class:`methods.threadweaver.pgrpo_trainer.PGRPOConfig`
            (``trl.GRPOConfig``).
        rollout: the orchestrator of the ``rl`` and ``eval`` stages.
        eval: the ``eval`` stage's sampling.
    """

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "CPU toy 'parallel codebook spelling': seq vs trie-packed tw (vs flat) arms",
        "synth": "paper: stage-1 data, sequential traces -> parallel ones by an LLM (§4, App. C/E)",
        "self_train": "paper: stage-2 data, `model`'s own valid and correct rollouts on rl_data (§4)",
        "sft": "paper: trie SFT (TrieSFTTrainer) of `model` on sft_data (App. B)",
        "rl": "paper: P-GRPO (PGRPOTrainer) from `model` on rl_data (§5, App. B)",
        "eval": "paper: Avg@k accuracy and token latency of `model` on `benchmark` (Tab. 1)",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("synth", "self_train", "sft", "rl", "eval")
    TRAINERS: ClassVar[dict[str, str]] = {
        "sft_trainer": "methods.threadweaver.sft:TrieSFTConfig",
        "rl_trainer": "methods.threadweaver.pgrpo_trainer:PGRPOConfig",
    }
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ("causal_lm",)
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ("math",)

    name: str = "threadweaver"
    stage: str = "toy"
    toy: ThreadWeaverConfig = field(default_factory=ThreadWeaverConfig)
    mask_impl: str = "dense"
    sft_data: DatasetSpec = field(default_factory=lambda: DatasetSpec(split="train"))
    sft_trainer: dict[str, Any] = field(default_factory=dict)
    rl_data: DatasetSpec = field(
        default_factory=lambda: DatasetSpec(
            hub_id="POLARIS-Project/Polaris-Dataset-53K", split="train"
        )
    )
    rl_trainer: dict[str, Any] = field(default_factory=dict)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    synth: SynthConfig = field(default_factory=SynthConfig)

    def __post_init__(self) -> None:
        if self.mask_impl not in ATTN_FOR_MASK:
            raise ValueError(
                f"method.mask_impl must be one of {sorted(ATTN_FOR_MASK)}, got {self.mask_impl!r}"
            )
        for node in ("sft_trainer", "rl_trainer"):
            if "mask_impl" in (getattr(self, node) or {}):
                raise ValueError(
                    f"method.{node}.mask_impl: set method.mask_impl instead (one mask for the "
                    "model's attention implementation in every stage)"
                )
        rollout_keys = {"rollout_budget_tokens", "rollout_max_model_len", "rollout_max_iters",
                        "join_suffix", "conclusion"}  # fmt: skip
        clash = sorted(rollout_keys & set(self.rl_trainer or {}))
        if clash:
            raise ValueError(
                f"method.rl_trainer.{clash[0]}: set method.rollout.* instead (shared by rl and eval)"
            )
        if self.mask_impl == "flex" and self.stage in _TRAINING_STAGES:
            why = flex_training_unavailable()
            if why:
                raise ValueError(
                    f"method.mask_impl=flex cannot run method.stage={self.stage} here: {why}. "
                    "Run it on a CUDA device, or set method.mask_impl=dense (the same ancestor "
                    "mask as a dense [B, 1, N, N] tensor, O(N^2) memory)"
                )

    def check_model(self, model: Any) -> None:
        """Compose-time check of ``model`` against this run (for ``common.config.validate``).

        Raises:
            ValueError: the training stages cannot load ``model.attn_implementation`` with this
                run's trie mask (see :meth:`attn_implementation`).
        """
        if self.stage in _TRAINING_STAGES:
            self.attn_implementation(getattr(model, "attn_implementation", None))

    def attn_implementation(self, model_attn: str | None) -> str:
        """The attention implementation to load the model with for this run's trie mask.

        Args:
            model_attn: ``model.attn_implementation`` of the selected checkpoint (None: choose).

        Raises:
            ValueError: ``model_attn`` cannot serve ``mask_impl`` (e.g. ``flash_attention_2``,
                which takes no arbitrary mask, or ``sdpa`` with ``mask_impl=flex``).
        """
        ok = ATTN_FOR_MASK[self.mask_impl]
        if model_attn is None:
            return ok[0]
        if model_attn not in ok:
            raise ValueError(
                f"model.attn_implementation={model_attn!r} cannot serve method.mask_impl="
                f"{self.mask_impl} (the trie mask needs one of {ok}); unset it or choose one"
            )
        return model_attn
