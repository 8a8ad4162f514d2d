"""Targeted instruction selection: representations × selectors (arXiv 2602.14696, ICML 2026).

*A Critical Look at Targeted Instruction Selection: Disentangling What Matters (and What Doesn't)*,
Nayak, Rodriguez-Diaz, Hulkund, Beery, Alvarez-Melis. Idea: choose a fine-tuning subset of a pool for
a target task by (1) representing queries and candidates (model hidden states RDS+, sentence
embeddings, or LESS gradient features) and (2) selecting from the query–candidate similarity matrix
(round-robin, doubly-greedy, unbalanced OT, KNN); each selector approximately minimises a
subset–query distance.
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from .distance import candidate_side_distance, query_cover_distance, wasserstein1
    from .experiments import distance_quantiles, spearman_table
    from .less import (
        LESSCheckpoint,
        LESSFeaturizer,
        adam_direction,
        less_warmup,
        rademacher_projection,
    )
    from .paper_data import TARGET_TASKS, TASK_CONVERTERS, load_pool, load_queries, load_target_task
    from .representations import RDSPlus, SentenceEmbed, tulu_format
    from .selectors import (
        doubly_greedy,
        kde_density,
        knn_kde,
        knn_kde_probs,
        knn_uniform,
        knn_uniform_probs,
        random_select,
        round_robin,
        top_k,
        uot,
        uot_plan,
    )
    from .similarity import cosine_matrix
    from .training import (
        finetune_subset,
        less_warmup_trainer,
        load_trainer_checkpoint,
        query_loss,
        train_tulu,
    )

__all__ = [
    "TARGET_TASKS",
    "TASK_CONVERTERS",
    "LESSCheckpoint",
    "LESSFeaturizer",
    "RDSPlus",
    "SentenceEmbed",
    "adam_direction",
    "candidate_side_distance",
    "cosine_matrix",
    "distance_quantiles",
    "doubly_greedy",
    "finetune_subset",
    "kde_density",
    "knn_kde",
    "knn_kde_probs",
    "knn_uniform",
    "knn_uniform_probs",
    "less_warmup",
    "less_warmup_trainer",
    "load_pool",
    "load_queries",
    "load_target_task",
    "load_trainer_checkpoint",
    "query_cover_distance",
    "query_loss",
    "rademacher_projection",
    "random_select",
    "round_robin",
    "spearman_table",
    "top_k",
    "train_tulu",
    "tulu_format",
    "uot",
    "uot_plan",
    "wasserstein1",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
