"""``GeoRLTrainer``: GRPO with Geo-RL's group-level DPP reward; ``GeoRLGRPOConfig`` holds its knobs.

A group's reward depends on all N of its descriptions, and under data parallelism a prompt's N
completions may sit on different processes, so TRL's per-process ``reward_funcs`` cannot compute
it. The trainer therefore (1) lets TRL gather the per-description grounding quality (the first
reward function), (2) embeds its local completions and gathers the embeddings and prompt keys
itself, and (3) in the ``compute_advantages`` hook of ``common.rl.GroupAdvantageGRPOTrainer``
regroups by prompt, builds the quality-weighted L-ensemble and returns the closed-form LOO gains
as advantages. Everything else (generation, PPO-clipped loss, vLLM, VLM inputs) is TRL's.

The reward knobs (``gamma``, ``jitter``, ``q_min``, ``advantage_mode``, ``grounding_weight``,
``repetition_threshold``, ``unit``) are fields of :class:`GeoRLGRPOConfig`, a ``trl.GRPOConfig``, so
TRL saves them with the run and its parser sets them; the DPP group size is ``num_generations``.
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass, field
from typing import Any

import torch
import trl
from torch import Tensor

from common.config import CheckpointingNames
from common.rl import GroupAdvantageGRPOTrainer
from methods.georl.config import GeoRLConfig
from methods.georl.embed import TextEmbedder
from methods.georl.grounding import repetition_rate
from methods.georl.reward import regroup_by_prompt, score_groups

logger = logging.getLogger(__name__)

__all__ = ["GeoRLGRPOConfig", "GeoRLTrainer", "completion_text"]


@dataclass
class GeoRLGRPOConfig(CheckpointingNames, trl.GRPOConfig):
    """``GRPOConfig`` plus the Geo-RL reward knobs (all reconstructed: no paper value is known).

    The DPP group (N descriptions of one image) is TRL's ``num_generations``.

    Parameters:
        gamma: Quality exponent in ``L = diag(q^gamma) S diag(q^gamma) + jitter I``.
        jitter: Diagonal ridge; an exact duplicate earns about ``log(2 jitter)``.
        q_min: Floor of the grounding quality ``q`` (keeps ``log q`` finite).
        advantage_mode: ``"raw"`` leave-one-out gains (unbiased) or ``"normalized"`` (GRPO-style).
        grounding_weight: lambda_g of the optional extra reward ``lambda_g * q_i``.
        repetition_threshold: Descriptions whose 3-gram repetition rate exceeds this get ``q_min``.
        unit: One DPP item per rollout (``"rollout"``; the sentence-level unit is not implemented).
    """

    gamma: float = field(
        default=2.0, metadata={"help": "Quality exponent of the L-ensemble (reconstructed)."}
    )
    jitter: float = field(
        default=1e-3, metadata={"help": "Diagonal ridge of the L-ensemble (duplicate -> log 2δ)."}
    )
    q_min: float = field(default=0.05, metadata={"help": "Floor of the grounding quality q."})
    advantage_mode: str = field(
        default="raw", metadata={"help": "'raw' LOO DPP gains (unbiased) or 'normalized'."}
    )
    grounding_weight: float = field(
        default=0.0, metadata={"help": "Weight of the extra reward lambda_g * q per description."}
    )
    repetition_threshold: float = field(
        default=0.5, metadata={"help": "3-gram repetition rate above which q is set to q_min."}
    )
    unit: str = field(
        default="rollout", metadata={"help": "DPP item: 'rollout' (one description)."}
    )
    beta: float = field(default=0.0, metadata={"help": "KL coefficient (none in the reward)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        self.reward_config()  # validates the Geo-RL fields

    def reward_config(self) -> GeoRLConfig:
        """The reward knobs as the :class:`GeoRLConfig` the pure functions take.

        Source: engineering, not in the paper.
        """
        return GeoRLConfig(
            n=self.num_generations,
            gamma=self.gamma,
            jitter=self.jitter,
            q_min=self.q_min,
            advantage_mode=self.advantage_mode,
            grounding_weight=self.grounding_weight,
            repetition_threshold=self.repetition_threshold,
            unit=self.unit,
        )


def completion_text(completion: Any) -> str:
    """Plain text of a TRL completion (a string, or a conversational list of messages).

    Source: engineering (TRL completion formats), not in the paper.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        parts = []
        for msg in completion:
            content = msg.get("content", "") if isinstance(msg, dict) else str(msg)
            if isinstance(content, list):  # multimodal content blocks
                content = " ".join(c.get("text", "") for c in content if isinstance(c, dict))
            parts.append(content)
        return "\n".join(parts)
    raise TypeError(f"completion must be a str or a list of messages, got {type(completion)}")


def _prompt_key(*parts: Any) -> int:
    """Stable 31-bit key of a prompt: its text and the bytes of its images (not object ids)."""
    crc = 0

    def visit(x: Any) -> None:
        nonlocal crc
        if isinstance(x, str):
            crc = zlib.crc32(x.encode(), crc)
        elif isinstance(x, dict):
            for k in sorted(x, key=str):
                crc = zlib.crc32(str(k).encode(), crc)
                visit(x[k])
        elif isinstance(x, (list, tuple)):
            for y in x:
                visit(y)
        elif hasattr(x, "tobytes"):  # PIL images, numpy arrays
            crc = zlib.crc32(x.tobytes(), crc)
        elif x is not None:
            crc = zlib.crc32(repr(x).encode(), crc)

    for part in parts:
        visit(part)
    return crc & 0x7FFFFFFF


class GeoRLTrainer(GroupAdvantageGRPOTrainer):
    """GRPO whose advantages are Geo-RL leave-one-out DPP gains (reconstructed from the abstract; see docs/methods/georl.md).

    The first of ``reward_funcs`` must return the grounding quality ``q`` in ``(0, 1]`` of each
    completion (e.g. :class:`~methods.georl.grounding.KeywordGrounding` for text, a CLIP score for
    images); further reward functions are ignored by the advantage (they are still logged by TRL).
    ``args`` must be a :class:`GeoRLGRPOConfig` (its Geo-RL fields are the reward's knobs).

    Args:
        *args: Passed to ``trl.GRPOTrainer`` (``model``, ``reward_funcs``, ``args``, ...).
        embedder: Text embedder for the semantic space ``phi`` (e.g. ``MiniLMEmbedder``).
        **kwargs: Passed to ``trl.GRPOTrainer``.

    Logged metrics (per generation batch): ``georl/log_volume`` (mean group ``log det L``),
    ``georl/loo_gain`` (mean ``r_i``), ``georl/quality`` (mean floored ``q``), ``georl/cos_mean``
    (mean pairwise cosine), ``georl/guarded_frac`` (share forced to ``q_min`` as empty/repetitive).
    """

    def __init__(self, *args: Any, embedder: TextEmbedder, **kwargs) -> None:
        if "georl_config" in kwargs:
            raise TypeError(
                "georl_config is gone: set the Geo-RL knobs as fields of GeoRLGRPOConfig (args=)"
            )
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, GeoRLGRPOConfig):
            raise TypeError(f"args must be a GeoRLGRPOConfig, got {type(self.args).__name__}")
        self.georl_config = self.args.reward_config()
        self.embedder = embedder
        self._georl_cache: dict[str, Tensor] = {}
        self.last_georl: dict[str, Tensor] = {}

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        texts = [completion_text(c) for c in completions]
        device = per_func.device
        emb = self.embedder.encode(texts).to(device=device, dtype=torch.float32)  # [b·N, d]
        guard = torch.tensor(
            [
                not t.strip() or repetition_rate(t) > self.georl_config.repetition_threshold
                for t in texts
            ],
            device=device,
        )  # [b·N]
        images = [
            row.get("image", row.get("images")) if isinstance(row, dict) else None for row in inputs
        ]
        keys = torch.tensor(
            [_prompt_key(p, img) for p, img in zip(prompts, images)], device=device
        )  # [b·N]
        self._georl_cache = {
            "emb": self.accelerator.gather(emb),  # [B·N, d]
            "guard": self.accelerator.gather(guard.long()).bool(),
            "keys": self.accelerator.gather(keys),
        }
        return per_func

    def compute_advantages(self, rewards: Tensor, inputs: dict[str, Any]) -> Tensor:
        """LOO DPP gains of each prompt group, scattered back to ``[B, N]`` (the abstract's
        closed-form LOO marginal reward used as the GRPO advantage: our inference)."""
        n = rewards.shape[1]
        cache = self._georl_cache
        if cache["emb"].shape[0] != rewards.numel():
            raise ValueError(
                f"gathered embeddings ({cache['emb'].shape[0]}) do not match the gathered rewards "
                f"({rewards.numel()}); every group member must be present after the gather"
            )
        q_flat = inputs["rewards_per_func"][..., 0].reshape(-1).double()  # [B·N]
        q_flat = torch.where(
            cache["guard"], torch.full_like(q_flat, self.georl_config.q_min), q_flat
        )
        idx = regroup_by_prompt(cache["keys"].tolist(), n).to(q_flat.device)  # [B, N]
        out = score_groups(cache["emb"][idx].double(), q_flat[idx], self.georl_config)
        adv = torch.empty_like(q_flat)
        adv[idx.reshape(-1)] = out["advantages"].reshape(-1)
        self.last_georl = {k: v.detach() for k, v in out.items()}
        mode = inputs.get("mode", "train")
        self.log_metric("georl/log_volume", out["logvol"].mean().item(), mode)
        self.log_metric("georl/loo_gain", out["r"].mean().item(), mode)
        self.log_metric("georl/quality", out["q"].mean().item(), mode)
        self.log_metric("georl/cos_mean", out["cos_mean"].mean().item(), mode)
        self.log_metric("georl/guarded_frac", cache["guard"].float().mean().item(), mode)
        return adv.view(-1, n).to(rewards.dtype)  # [B, N]
