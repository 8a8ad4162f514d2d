"""Geo-RL's paper stage: :class:`~methods.georl.trainer.GeoRLTrainer` on a vision-language model.

``icml26 experiment=georl_paper`` trains ``model`` (a Qwen2.5-VL-class captioner) on the image
prompts of ``method.train_data`` with the group DPP reward: each description is graded against its
image by the CLIP checkpoint ``method.clip`` (sentence-mean sigmoid of the cosine), embedded by the
MiniLM sentence encoder (``method.embedder``) and credited with its leave-one-out log-volume gain.
``method.text_scenes > 0`` swaps in generated text scenes graded by keyword matching, so that a text
model can run the same trainer (the CPU check). All trainer knobs, the Geo-RL ones included, come
from the ``method.trainer`` node (:class:`~methods.georl.trainer.GeoRLGRPOConfig`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from common.config import DatasetSpec, Run, model_id, trainer_config
from common.tracking import write_results

logger = logging.getLogger(__name__)

INSTRUCTION = (
    "Describe this image in detail. Cover every object, attribute, relation and any visible text."
)


class _ClipQualityReward:
    """TRL reward function wrapping ``ClipSentenceGrounding``: ``q`` of each completion vs its image."""

    __name__ = "georl_clip_grounding"

    def __init__(self, grounding: Any) -> None:
        self.grounding = grounding

    def __call__(self, prompts: list, completions: list, image: list, **kwargs: Any) -> list[float]:
        from methods.georl.trainer import completion_text

        return [
            float(self.grounding([completion_text(c)], img)[0])
            for c, img in zip(completions, image, strict=True)
        ]


def image_prompts(spec: DatasetSpec):
    """An image dataset (hub id, local ``save_to_disk`` folder, data files, or DOCCI's official
    files: :mod:`methods.georl.docci`) with the chat prompt.

    Raises:
        ValueError: the set has no ``image`` column.
    """
    from pathlib import Path

    from datasets import load_dataset, load_from_disk

    from common.config import dataset_source
    from methods.georl.docci import DOCCI_HUB_ID, docci_hint, is_docci_folder, load_docci

    source = dataset_source(spec)
    if spec.path and is_docci_folder(spec.path):
        ds = load_docci(spec.path, spec.split)
    elif not spec.path and spec.hub_id == DOCCI_HUB_ID:
        raise ValueError(f"method.train_data: {docci_hint()}")
    elif spec.path and (Path(spec.path) / "dataset_info.json").exists():
        ds = load_from_disk(spec.path)
    elif (
        spec.path and Path(spec.path).is_dir() and any(Path(spec.path).glob("*/dataset_info.json"))
    ):
        ds = load_from_disk(spec.path)[spec.split]
    else:
        ds = load_dataset(source, spec.config, split=spec.split)
    if spec.limit:
        ds = ds.select(range(min(spec.limit, len(ds))))
    if "image" not in ds.column_names:
        raise ValueError(
            f"train_data {source!r} must have an 'image' column, got {ds.column_names}"
        )
    prompt = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": INSTRUCTION}]}
    ]
    return ds.map(lambda _: {"prompt": prompt})


def paper_stage(run: Run) -> dict[str, float]:
    """``stage=paper``: GeoRLTrainer on ``run.model``; returns the last logged Geo-RL metrics."""
    from common.models import load_model, load_processor, load_tokenizer, weights_hint
    from methods.georl.embed import MiniLMEmbedder
    from methods.georl.grounding import ClipSentenceGrounding, KeywordGrounding
    from methods.georl.toy import synthetic_scenes
    from methods.georl.trainer import GeoRLGRPOConfig, GeoRLTrainer

    mcfg, start = run.method, time.perf_counter()
    if run.model is None:
        raise ValueError("method.stage=paper needs a checkpoint: model=<name> or model.path")
    on_gpu = torch.cuda.is_available()
    args = trainer_config(
        GeoRLGRPOConfig,
        mcfg.trainer,
        output_dir=str(run.run_dir / "trainer"),
        use_cpu=not on_gpu,
        report_to="wandb" if run.cfg.logger == "wandb" else "none",
        seed=run.seed,
    )
    spec = model_id(run.model)
    extra = {"attn_implementation": run.model.attn_implementation}
    extra = {k: v for k, v in extra.items() if v}
    if mcfg.text_scenes > 0:
        if run.model.kind != "causal_lm":
            raise ValueError(
                f"method.text_scenes > 0 trains a text model; model.kind is {run.model.kind!r}"
            )
        model = load_model(spec, dtype=run.model.dtype, seed=run.seed, **extra)
        processing = load_tokenizer(spec)
        dataset = synthetic_scenes(mcfg.text_scenes, seed=run.seed)
        quality: Any = KeywordGrounding(q_min=args.q_min)
    else:
        if run.model.kind != "vision_language":
            raise ValueError(
                "the image path needs a vision-language model (model.kind=vision_language), got "
                f"{run.model.kind!r}; set method.text_scenes > 0 for a text model"
            )
        from transformers import CLIPModel, CLIPProcessor

        dataset = image_prompts(mcfg.train_data)  # before the model: a data error costs seconds
        model = load_model(
            spec, dtype=run.model.dtype, kind="vision_language", seed=run.seed, **extra
        )
        processing = load_processor(spec)
        clip_spec = mcfg.clip.path or mcfg.clip.name
        with weights_hint(clip_spec):
            clip = CLIPModel.from_pretrained(clip_spec).to(model.device).eval()
            clip_processor = CLIPProcessor.from_pretrained(clip_spec)
        grounding = ClipSentenceGrounding(clip, clip_processor, tau=mcfg.clip.tau, q_min=args.q_min)
        quality = _ClipQualityReward(grounding)
    if mcfg.lora_r > 0:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model,
            LoraConfig(r=mcfg.lora_r, lora_alpha=2 * mcfg.lora_r, target_modules="all-linear"),
        )
    trainer = GeoRLTrainer(
        model=model,
        reward_funcs=[quality],
        args=args,
        train_dataset=dataset,
        processing_class=processing,
        embedder=MiniLMEmbedder(
            mcfg.embedder,
            device="cuda" if on_gpu else "cpu",
            cache_size=mcfg.embedder_cache_size,
        ),
    )
    trainer.train()
    last: dict[str, float] = {}
    for row in trainer.state.log_history:
        last.update({k: float(v) for k, v in row.items() if k.startswith(("georl/", "reward"))})
    metrics = {"georl": {k.removeprefix("georl/").replace("/", "_"): v for k, v in last.items()}}
    return write_results(
        run.run_dir, "georl", metrics, cfg=run.cfg, wall_time_s=time.perf_counter() - start
    )
