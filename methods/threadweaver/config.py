"""ThreadWeaver settings: SFT, orchestrated rollout, P-GRPO and the CPU toy (App. B, spec §3.7, §6).

Defaults are the paper's (Qwen3-8B scale); ``configs/experiment/threadweaver_toy.yaml`` shrinks them
for the codebook-spelling toy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ThreadWeaverConfig"]

_ARMS = ("seq", "tw", "flat")


@dataclass
class ThreadWeaverConfig:
    """All knobs of the method; field names match ``configs/method/threadweaver.yaml``."""

    name: str = "threadweaver"
    # --- SFT with trie packing (App. B)
    sft_lr: float = 1e-5  # App. B, cosine, 5% warm-up
    sft_warmup_ratio: float = 0.05  # App. B
    sft_weight_decay: float = 0.01  # App. B (official script: 1e-4)
    sft_batch_size: int = 16  # App. B
    sft_epochs: int = 8  # App. B, stage 1 (959 examples); stage 2: 1
    sft_steps: int = 0  # toy: optimiser steps (0 = use epochs)
    sft_max_len: int = 40960  # App. B, packed length
    mask_impl: str = "dense"  # "flex" at paper scale (FlexAttention BlockMask)
    # --- orchestrated rollout (§3.2, App. B)
    budget_total: int = 40000  # App. B, total tokens across branches
    max_model_len: int = 40960  # App. B
    max_iters: int = 32  # official code
    join_suffix: str = "\n</Parallel>"  # paper form (spec §9.3); "\n" = official code
    temperature: float = 1.0  # App. B (rollout + eval); the toy evaluates greedily (0.0)
    top_p: float = 1.0  # App. B
    # --- P-GRPO (§5, Eq. 4-9, App. B)
    rho: float = 0.5  # Eq. 7
    rho_clip: float = 0.2  # Eq. 7
    reward_variant: str = "paper"  # "repo": rho*min(eta, clip), incorrect = -1 (spec §9.2)
    adv_norm: str = "mean"  # Eq. 9; "std" = standard GRPO (Tab. 5 ablation)
    rl_k: int = 8  # App. B, rollouts per prompt
    rl_prompts_per_step: int = 16  # App. B (128 = 16 x 8)
    rl_steps: int = 350  # App. B
    rl_lr: float = 5e-6  # App. B
    # --- toy task "parallel codebook spelling" (spec §6)
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
        if self.rho <= 0:
            raise ValueError(f"rho must be > 0, got {self.rho}")
        if self.rho_clip < 0:
            raise ValueError(f"rho_clip must be >= 0, got {self.rho_clip}")
        if self.reward_variant not in ("paper", "repo"):
            raise ValueError(
                f"reward_variant must be 'paper' or 'repo', got {self.reward_variant!r}"
            )
        if self.adv_norm not in ("mean", "std"):
            raise ValueError(f"adv_norm must be 'mean' or 'std', got {self.adv_norm!r}")
        if self.rl_k < 2:
            raise ValueError(f"rl_k must be >= 2 (group advantages), got {self.rl_k}")
        if self.mask_impl not in ("dense", "flex"):
            raise ValueError(f"mask_impl must be 'dense' or 'flex', got {self.mask_impl!r}")
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
