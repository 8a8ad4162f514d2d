"""Singular vectors of attention heads align with features (Franco, Loughridge, Crovella; ICML 2026).

arXiv 2602.13524. A toy with observable features (a superposition autoencoder plus a trained attention
head) shows the singular vectors of ``Omega = W_Q W_K^T`` aligning with the features the head matches; a
least-squares closed form gives the whitened feature directions; in real models the signature is
sparse attention decomposition (SAD): few singular-vector terms carry each firing attention logit,
unlike in a randomly rotated basis.
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from methods.sv_features.alignment import (
        feature_sv_cosines,
        interference_norm,
        lsq_optimal_omega,
        match_pairs_to_ranks,
        orthogonality_gap,
        svd_alignment,
        whitened_feature_dirs,
    )
    from methods.sv_features.heads import (
        HeadFactors,
        factored_svd,
        fold_norm,
        head_factors,
        ov_matrix,
        ov_svd,
        qk_matrix,
        rope_rotations,
    )
    from methods.sv_features.sad import (
        ROPE_BASES,
        SADResult,
        decompose_pairs,
        head_inputs,
        random_rotation_basis,
        sparse_attention_decomposition,
        sv_contributions,
    )
    from methods.sv_features.sparseness import (
        n_recon,
        relative_contributions,
        rolls_tovee,
        sparseness,
    )
    from methods.sv_features.superposition import (
        ToyAttentionAutoencoder,
        ToyConfig,
        multi_pair_pairs,
        pair_template,
        sample_features,
        toy_metrics,
        train_toy,
    )
    from methods.sv_features.toy_sad import MatchTaskConfig, run_match_toy

__all__ = [
    "ROPE_BASES",
    "HeadFactors",
    "MatchTaskConfig",
    "SADResult",
    "ToyAttentionAutoencoder",
    "ToyConfig",
    "decompose_pairs",
    "factored_svd",
    "feature_sv_cosines",
    "fold_norm",
    "head_factors",
    "head_inputs",
    "interference_norm",
    "lsq_optimal_omega",
    "match_pairs_to_ranks",
    "multi_pair_pairs",
    "n_recon",
    "orthogonality_gap",
    "ov_matrix",
    "ov_svd",
    "pair_template",
    "qk_matrix",
    "random_rotation_basis",
    "relative_contributions",
    "rolls_tovee",
    "rope_rotations",
    "run_match_toy",
    "sample_features",
    "sparse_attention_decomposition",
    "sparseness",
    "sv_contributions",
    "svd_alignment",
    "toy_metrics",
    "train_toy",
    "whitened_feature_dirs",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
