"""``GeoRLTrainer``: GRPO with Geo-RL's group-level DPP reward (spec §3.5 P3).

A group's reward depends on all N of its descriptions, and under data parallelism a prompt's N
completions may sit on different processes, so TRL's per-process ``reward_funcs`` cannot compute
it. The trainer therefore (1) lets TRL gather the per-description grounding quality (the first
reward function), (2) embeds its local completions and gathers the embeddings and prompt keys
itself, and (3) in the ``compute_advantages`` hook of ``common.rl.GroupAdvantageGRPOTrainer``
regroups by prompt, builds the quality-weighted L-ensemble and returns the closed-form LOO gains
as advantages. Everything else (generation, PPO-clipped loss, vLLM, VLM inputs) is TRL's.
"""

from __future__ import annotations

import logging
import zlib
from typing import Any

import torch
from torch import Tensor

from common.rl import GroupAdvantageGRPOTrainer
from methods.georl.embed import TextEmbedder
from methods.georl.grounding import repetition_rate
from methods.georl.reward import GeoRLConfig, regroup_by_prompt, score_groups

logger = logging.getLogger(__name__)

__all__ = ["GeoRLTrainer", "completion_text"]


def completion_text(completion: Any) -> str:
    """Plain text of a TRL completion (a string, or a conversational list of messages)."""
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
    """GRPO whose advantages are Geo-RL leave-one-out DPP gains (spec §3.3-§3.5).

    The first of ``reward_funcs`` must return the grounding quality ``q`` in ``(0, 1]`` of each
    completion (e.g. :class:`~methods.georl.grounding.KeywordGrounding` for text, a CLIP score for
    images); further reward functions are ignored by the advantage (they are still logged by TRL).
    Set ``num_generations`` to ``georl_config.n``.

    Args:
        *args: Passed to ``trl.GRPOTrainer`` (``model``, ``reward_funcs``, ``args``, ...).
        embedder: Text embedder for the semantic space ``phi`` (e.g. ``MiniLMEmbedder``).
        georl_config: Reward configuration (gamma, jitter, q_min, advantage mode, ...).
        **kwargs: Passed to ``trl.GRPOTrainer``.

    Logged metrics (per generation batch): ``georl/log_volume`` (mean group ``log det L``),
    ``georl/loo_gain`` (mean ``r_i``), ``georl/quality`` (mean floored ``q``), ``georl/cos_mean``
    (mean pairwise cosine), ``georl/guarded_frac`` (share forced to ``q_min`` as empty/repetitive).
    """

    def __init__(
        self, *args: Any, embedder: TextEmbedder, georl_config: GeoRLConfig | None = None, **kwargs
    ) -> None:
        super().__init__(*args, **kwargs)
        self.georl_config = georl_config or GeoRLConfig(n=self.num_generations)
        if self.georl_config.n != self.num_generations:
            raise ValueError(
                f"georl_config.n ({self.georl_config.n}) must equal num_generations "
                f"({self.num_generations})"
            )
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
        """LOO DPP gains of each prompt group (spec §3.3), scattered back to ``[B, N]``."""
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


class _ClipQualityReward:
    """TRL reward function wrapping ``ClipSentenceGrounding``: ``q`` of each completion vs its image."""

    __name__ = "georl_clip_grounding"

    def __init__(self, grounding: Any) -> None:
        self.grounding = grounding

    def __call__(self, prompts: list, completions: list, image: list, **kwargs: Any) -> list[float]:
        return [
            float(self.grounding([completion_text(c)], img)[0])
            for c, img in zip(completions, image)
        ]


INSTRUCTION = (
    "Describe this image in detail. Cover every object, attribute, relation and any visible text."
)


def _image_dataset(name: str, split: str = "train"):
    """An image dataset (hub id or local path) with the spec §3.7 chat prompt added."""
    from datasets import load_dataset

    ds = load_dataset(name, split=split)
    if "image" not in ds.column_names:
        raise ValueError(f"dataset {name!r} must have an 'image' column, got {ds.column_names}")
    prompt = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": INSTRUCTION}]}
    ]
    return ds.map(lambda _: {"prompt": prompt})


def run_training(mcfg: Any, cfg: Any) -> dict[str, dict[str, float]]:
    """``mode: train`` of ``run.py``: GeoRLTrainer on ``cfg.model.name`` (spec §3.5 P3, §7).

    ``train.dataset = synthetic_scenes`` trains a text model on generated scenes with keyword
    grounding (the CPU check); any other value is an image dataset (hub id or local path with an
    ``image`` column) for a vision-language model, graded by ``ClipSentenceGrounding`` on the
    transformers CLIP checkpoint ``train.clip_model`` (the paper-scale path, spec §7).

    Returns:
        ``{"georl": {metric: value}}`` with the last logged Geo-RL and reward metrics.
    """
    from trl import GRPOConfig

    from common.models import load_model, load_processor, load_tokenizer
    from common.rl import cpu_grpo_kwargs
    from methods.georl.embed import MiniLMEmbedder
    from methods.georl.grounding import ClipSentenceGrounding, KeywordGrounding
    from methods.georl.toy import synthetic_scenes

    tc = mcfg.train
    seed = int(cfg.seed)
    if tc.dataset == "synthetic_scenes":
        model = load_model(cfg.model.name, dtype=cfg.model.get("dtype", "auto"), seed=seed)
        processing = load_tokenizer(cfg.model.name)
        dataset = synthetic_scenes(tc.n_prompts, seed=seed)
        quality: Any = KeywordGrounding(q_min=mcfg.q_min)
    else:
        if not tc.clip_model:
            raise ValueError("train.clip_model must name a transformers CLIP checkpoint for images")
        from transformers import CLIPModel, CLIPProcessor

        model = load_model(
            cfg.model.name, dtype=cfg.model.get("dtype", "auto"), kind="vision_language", seed=seed
        )
        processing = load_processor(cfg.model.name)
        dataset = _image_dataset(tc.dataset)
        clip = CLIPModel.from_pretrained(tc.clip_model).to(model.device).eval()
        grounding = ClipSentenceGrounding(
            clip, CLIPProcessor.from_pretrained(tc.clip_model), tau=tc.clip_tau, q_min=mcfg.q_min
        )
        quality = _ClipQualityReward(grounding)
    if tc.lora_r > 0:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model, LoraConfig(r=tc.lora_r, lora_alpha=2 * tc.lora_r, target_modules="all-linear")
        )
    on_gpu = torch.cuda.is_available()
    kwargs = cpu_grpo_kwargs(
        output_dir=tc.output_dir or f"{cfg.run_dir}/trainer",
        per_device_train_batch_size=tc.per_device_train_batch_size,
        gradient_accumulation_steps=tc.gradient_accumulation_steps,
        num_generations=mcfg.n,
        max_completion_length=tc.max_completion_length,
        max_steps=tc.max_steps,
        learning_rate=tc.learning_rate,
        temperature=tc.temperature,
        seed=seed,
        use_cpu=not on_gpu,
        bf16=tc.bf16 and on_gpu,
        disable_tqdm=not on_gpu,
    )
    if tc.use_vllm:
        kwargs.update(use_vllm=True, vllm_mode=tc.vllm_mode)
    trainer = GeoRLTrainer(
        model=model,
        reward_funcs=[quality],
        args=GRPOConfig(**kwargs),
        train_dataset=dataset,
        processing_class=processing,
        embedder=MiniLMEmbedder(mcfg.embedder, device="cuda" if on_gpu else "cpu"),
        georl_config=mcfg.reward_config(),
    )
    trainer.train()
    last: dict[str, float] = {}
    for row in trainer.state.log_history:
        last.update({k: float(v) for k, v in row.items() if k.startswith(("georl/", "reward"))})
    return {"georl": {k.removeprefix("georl/").replace("/", "_"): v for k, v in last.items()}}
