"""Analytic memory model of AutoQRA (official core/memory.py, Eqs. 1-3, Eqs. 1-3).

``M(C) = Σ_ℓ [ |W_ℓ|·q_ℓ/8 + a_ℓ·r_ℓ·p_r/8 + groups_ℓ·2·p_meta/8 ]`` bytes, where ``|W_ℓ|`` is the number of
weights in the seven projections of block ℓ, ``a_ℓ = Σ_modules (d_in + d_out)`` is the LoRA parameter count
per unit rank and ``groups_ℓ`` the number of quantisation groups (one scale + one zero each). Unlike the
official code (placeholder counts, budgets that never bind) the counts always come from the model config.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .space import BudgetInfeasibleError, QRConfig

PROJECTIONS: tuple[str, ...] = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
)


def projection_shapes(config) -> dict[str, tuple[int, int]]:
    """``(d_out, d_in)`` of the seven projections of one block from an HF Llama/Qwen config (GQA aware).

    Source: our inference (real counts from the HF config; official ``core/memory.py`` uses
    placeholders).
    """
    h = int(config.hidden_size)
    n_heads = int(config.num_attention_heads)
    n_kv = int(getattr(config, "num_key_value_heads", None) or n_heads)
    head_dim = int(getattr(config, "head_dim", None) or h // n_heads)
    inter = int(config.intermediate_size)
    return {
        "self_attn.q_proj": (n_heads * head_dim, h),
        "self_attn.k_proj": (n_kv * head_dim, h),
        "self_attn.v_proj": (n_kv * head_dim, h),
        "self_attn.o_proj": (h, n_heads * head_dim),
        "mlp.gate_proj": (inter, h),
        "mlp.up_proj": (inter, h),
        "mlp.down_proj": (h, inter),
    }


class MemoryModel:
    """Eq. 1: weight bytes + LoRA bytes + quantisation-metadata bytes, summed over blocks.

    Args:
        layer_params: ``|W_ℓ|``, shape [L].
        lora_params_per_rank: ``a_ℓ``, shape [L] (LoRA parameters of block ℓ at rank 1).
        lora_bits: precision of the LoRA factors ``p_r`` (16).
        group_size: quantisation group size ``g`` (128 in the paper, 32 in the toy).
        meta_bits: precision of each scale / zero ``p_meta`` (16).
        layer_groups: number of quantisation groups per block, shape [L]; default ``⌈|W_ℓ|/g⌉`` (Eq. 3).
    """

    def __init__(
        self,
        layer_params: Sequence[float] | np.ndarray,
        lora_params_per_rank: Sequence[float] | np.ndarray,
        lora_bits: int = 16,
        group_size: int = 128,
        meta_bits: int = 16,
        layer_groups: Sequence[float] | np.ndarray | None = None,
    ) -> None:
        self.layer_params = np.asarray(layer_params, dtype=np.float64)
        self.lora_params_per_rank = np.asarray(lora_params_per_rank, dtype=np.float64)
        if self.layer_params.ndim != 1 or self.layer_params.size == 0:
            raise ValueError("layer_params must be a non-empty 1-D array [L]")
        if self.lora_params_per_rank.shape != self.layer_params.shape:
            raise ValueError(
                f"lora_params_per_rank has shape {self.lora_params_per_rank.shape}, "
                f"expected {self.layer_params.shape} (one entry per layer)"
            )
        if np.any(self.layer_params <= 0) or np.any(self.lora_params_per_rank <= 0):
            raise ValueError("layer_params and lora_params_per_rank must be > 0")
        for name, v in (
            ("lora_bits", lora_bits),
            ("group_size", group_size),
            ("meta_bits", meta_bits),
        ):
            if int(v) <= 0:
                raise ValueError(f"{name} must be > 0, got {v}")
        self.lora_bits, self.group_size, self.meta_bits = (
            int(lora_bits),
            int(group_size),
            int(meta_bits),
        )
        if layer_groups is None:
            layer_groups = np.ceil(self.layer_params / self.group_size)
        self.layer_groups = np.asarray(layer_groups, dtype=np.float64)

    @property
    def num_layers(self) -> int:
        """Number of blocks L; engineering, not in the paper."""
        return int(self.layer_params.size)

    @classmethod
    def from_hf_config(
        cls,
        config,
        target_modules: Sequence[str] = PROJECTIONS,
        group_size: int = 128,
        lora_bits: int = 16,
        meta_bits: int = 16,
    ) -> MemoryModel:
        """Count |W_ℓ|, a_ℓ and the groups (per module, ``⌈numel/g⌉``) from an HF config.

        Source: paper Eqs. 1-3 (as numbered in official ``core/memory.py``); counts from
        the config are our inference.
        """
        shapes = projection_shapes(config)
        unknown = [m for m in target_modules if m not in shapes]
        if unknown:
            raise ValueError(
                f"target_modules {unknown} unknown; expected a subset of {list(shapes)}"
            )
        w = sum(shapes[m][0] * shapes[m][1] for m in target_modules)
        a = sum(shapes[m][0] + shapes[m][1] for m in target_modules)
        grp = sum(int(np.ceil(shapes[m][0] * shapes[m][1] / group_size)) for m in target_modules)
        L = int(config.num_hidden_layers)
        return cls(
            np.full(L, w),
            np.full(L, a),
            lora_bits,
            group_size,
            meta_bits,
            layer_groups=np.full(L, grp),
        )

    def _check(self, cfg: QRConfig) -> None:
        if cfg.num_layers != self.num_layers:
            raise ValueError(f"cfg has {cfg.num_layers} layers, memory model has {self.num_layers}")

    def layer_bytes(self, layer: int, q: int, r: int) -> float:
        """Eq. 2-3 for one block: ``|W|q/8 + a r p_r/8 + groups·2·p_meta/8``."""
        w = self.layer_params[layer] * q / 8.0
        lora = self.lora_params_per_rank[layer] * r * self.lora_bits / 8.0
        meta = self.layer_groups[layer] * 2.0 * self.meta_bits / 8.0
        return float(w + lora + meta)

    def total_bytes(self, cfg: QRConfig) -> float:
        """Eq. 1: ``M(C)`` in bytes (embeddings, LM head and activations not counted)."""
        self._check(cfg)
        return float(sum(self.layer_bytes(i, q, r) for i, (q, r) in enumerate(zip(cfg.q, cfg.r))))

    def budget_from_reference(self, bits: int = 4, rank: int = 8, slack: float = 0.0) -> float:
        """``M(uniform bits, uniform rank)·(1+slack)``: "memory comparable to uniform 4-bit" (our choice (docs deviations))."""
        if slack < 0:
            raise ValueError(f"slack must be >= 0, got {slack}")
        return self.total_bytes(QRConfig.uniform(self.num_layers, bits, rank)) * (1.0 + slack)

    def check_budget(self, budget: float, minimum: QRConfig) -> None:
        """Raise unless ``0 < budget`` and ``M(minimum) <= budget`` (our bad-input rules).

        Source: our choice (bad-input rules), not in the paper.
        """
        if not np.isfinite(budget) or budget <= 0:
            raise ValueError(f"budget must be a positive number of bytes, got {budget}")
        m_min = self.total_bytes(minimum)
        if m_min > budget:
            raise BudgetInfeasibleError(
                f"budget {budget:.0f} B is infeasible: the cheapest configuration (all q_min, all r_min) "
                f"needs {m_min:.0f} B; raise the budget to at least {m_min:.0f} B"
            )
