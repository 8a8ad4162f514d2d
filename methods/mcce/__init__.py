"""MCCE: A Framework for Multi-LLM Collaborative Co-Evolution (Ran, Li et al., arXiv 2510.06270).

A frozen strong LLM and a small trainable LLM take turns as crossover/mutation operators in a
Pareto-selected evolutionary search over molecules; the small model is DPO-trained on preference pairs
synthesised from the shared archive by structural similarity to each prompt's parents.
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from .core import Archive, Candidate
    from .dpo_data import build_similarity_pairs, format_response
    from .local import TrainableChat
    from .memory import TrajectoryMemory
    from .metrics import archive_metrics, diversity, hypervolume, top_k_auc, top_k_mean
    from .optimizer import MODES, LLMUnavailableError, MCCEConfig, MCCEOptimizer, MCCEResult
    from .problems import (
        MoleculeProblem,
        Problem,
        fitness,
        load_nci_smiles,
        load_seed_smiles,
        load_tdc_oracle,
        paper_problem,
        tanimoto,
        toy_problem,
    )
    from .prompts import ParseStats, PromptBuilder, parse_candidates, pick_parents
    from .selection import non_dominated_fronts, nsga2_select, nsga2_so_select, official_fronts
    from .toy_world import (
        SelfiesExplorer,
        TinyLMChat,
        build_selfies_tokenizer,
        pretrain_tiny_lm,
        tiny_gpt,
    )
    from .train import (
        MCCEDPOConfig,
        MCCEGRPOConfig,
        MCCESFTConfig,
        dpo_loss_closed_form,
        round_args,
        run_dpo_round,
        run_rl_round,
        run_sft_round,
    )

__all__ = [
    "MODES",
    "Archive",
    "Candidate",
    "LLMUnavailableError",
    "MCCEConfig",
    "MCCEDPOConfig",
    "MCCEGRPOConfig",
    "MCCEOptimizer",
    "MCCEResult",
    "MCCESFTConfig",
    "MoleculeProblem",
    "ParseStats",
    "Problem",
    "PromptBuilder",
    "SelfiesExplorer",
    "TinyLMChat",
    "TrainableChat",
    "TrajectoryMemory",
    "archive_metrics",
    "build_selfies_tokenizer",
    "build_similarity_pairs",
    "diversity",
    "dpo_loss_closed_form",
    "fitness",
    "format_response",
    "hypervolume",
    "load_nci_smiles",
    "load_seed_smiles",
    "load_tdc_oracle",
    "non_dominated_fronts",
    "nsga2_select",
    "nsga2_so_select",
    "official_fronts",
    "paper_problem",
    "parse_candidates",
    "pick_parents",
    "pretrain_tiny_lm",
    "round_args",
    "run_dpo_round",
    "run_rl_round",
    "run_sft_round",
    "tanimoto",
    "tiny_gpt",
    "top_k_auc",
    "top_k_mean",
    "toy_problem",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
