"""Paper-scale KORE knowledge injection into a LLaVA-style model with the HF Trainer.

``train_paper`` loads the model and processor (hub id, local path, or ``"tiny-llava"`` for tests),
collects the decoder-layer input covariances on calibration prompts (image + question, no answer),
wraps the language model with :func:`apply_kore`, trains ``lora_B`` at ``lr`` and the multimodal
projector at ``projector_lr`` on LLaVA-format conversation records (loss on assistant turns only), and
saves the adapter as a standard LoRA on the untouched base (:func:`export_standard_lora`) plus the
projector weights. Launch under ``accelerate launch`` (DeepSpeed ZeRO-3 in the paper): covariances
and the decomposition need the full (gathered) weights, so build the KORE initialisation first on one
process if the model is partitioned.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from methods.kore.covariance import collect_input_covariances
from methods.kore.model import apply_kore, export_standard_lora

logger = logging.getLogger(__name__)

LLAVA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class PaperConfig:
    """The paper-scale run (paper Table 6; repo scripts). Paths point at LLaVA-format JSON records."""

    model: str = "llava-hf/llava-1.5-7b-hf"
    data_path: str = ""  # KORE-74K training JSON (LLaVA conversation records)
    image_root: str = ""
    calib_path: str = ""  # calibration records (image + question); answers are ignored
    n_calib: int = 256
    rank: int = 235
    target_modules: list[str] = field(default_factory=lambda: list(LLAVA_TARGETS))
    freeze_A: bool = True  # False: "w/o frozen A" ablation (official --lora_null_v1 training flag)
    sigma_fuse: str = "UV"
    eigvecs: str = "smallest"  # "largest": largest-eigenvector ablation (official --first_eigen)
    init: str = "kore"  # "lora_null_v1": official --singular_aware_2 (A = null basis, B = 0)
    normalize: str = "sample_max"
    denom: float = 256.0
    lr: float = 2e-4
    projector_lr: float = 2e-5
    epochs: float = 6
    per_device_batch: int = 1
    grad_accum: int = 1
    warmup_ratio: float = 0.03
    scheduler: str = "cosine"
    weight_decay: float = 0.0
    max_len: int = 2048
    max_steps: int = -1
    bf16: bool = False
    seed: int = 0
    # "vicuna": LLaVA-1.5 USER/ASSISTANT prompt (repo conv mode vicuna_v1); "chat": the processor's
    # chat template (Qwen2.5-VL through LLaMA-Factory's qwen2_vl template)
    prompt_style: str = "vicuna"
    # parameters trained at projector_lr besides lora_B (LLaVA: the multimodal projector)
    projector_keys: list[str] = field(default_factory=lambda: ["multi_modal_projector"])


def _load(spec: str):
    if spec == "tiny-llava":
        from common.tiny import tiny_llava

        return tiny_llava(seed=0)
    from transformers import AutoModelForImageTextToText, AutoProcessor

    # LlavaForConditionalGeneration or Qwen2_5_VLForConditionalGeneration, chosen by the config
    model = AutoModelForImageTextToText.from_pretrained(spec, dtype=torch.float32)
    return model, AutoProcessor.from_pretrained(spec)


def _image(rec: dict, root: str):
    from PIL import Image

    img = rec.get("image")
    if img is None:
        return None
    path = Path(root) / img if root else Path(img)
    if not path.is_file():
        raise FileNotFoundError(f"image {str(path)!r} of record {rec.get('id')!r} is missing")
    return Image.open(path).convert("RGB")


def _turns(conv: list[dict], style: str, processor) -> tuple[str, list[tuple[str, str]]]:
    """The full text and, per assistant turn, ``(text up to the answer, text through it)``."""
    if style == "vicuna":
        eos = processor.tokenizer.eos_token or ""
        text, spans = "", []
        for i in range(0, len(conv), 2):
            text += f"USER: {conv[i]['value']} ASSISTANT:"
            start = text
            text += f" {conv[i + 1]['value']}{eos}"
            spans.append((start, text))
        return text, spans
    if style != "chat":
        raise ValueError(f"prompt_style must be 'vicuna' or 'chat', got {style!r}")
    msgs: list[dict] = []
    for c in conv:
        body = c["value"].replace("<image>", "").strip()
        if c["from"] == "human":
            content = [{"type": "text", "text": body}]
            if "<image>" in c["value"]:
                content.insert(0, {"type": "image"})
            msgs.append({"role": "user", "content": content})
        else:
            msgs.append({"role": "assistant", "content": [{"type": "text", "text": body}]})
    spans = []
    for i in range(1, len(msgs), 2):
        start = processor.apply_chat_template(msgs[:i], tokenize=False, add_generation_prompt=True)
        end = processor.apply_chat_template(msgs[: i + 1], tokenize=False)
        spans.append((start, end))
    return processor.apply_chat_template(msgs, tokenize=False), spans


def encode_record(
    rec: dict, processor, image_root: str = "", max_len: int = 2048, style: str = "vicuna"
) -> dict[str, Any]:
    """Renders a LLaVA conversation record and masks all but the assistant turns.

    Args:
        rec: ``{"id", "image"?, "conversations": [{"from": "human"|"gpt", "value"}, ...]}``.
        processor: the model's processor.
        image_root: folder the record's ``image`` path is relative to.
        max_len: truncation length.
        style: ``"vicuna"`` (LLaVA-1.5) or ``"chat"`` (the processor's chat template, Qwen2.5-VL).

    Returns:
        ``input_ids [1, T]``, ``attention_mask``, ``labels`` (-100 outside answers), ``pixel_values``.

    Raises:
        ValueError: if the record has no conversation or does not alternate human/gpt.
    """
    conv = rec.get("conversations")
    if (
        not conv
        or len(conv) % 2
        or any(c["from"] != ("human" if i % 2 == 0 else "gpt") for i, c in enumerate(conv))
    ):
        raise ValueError(f"record {rec.get('id')!r}: conversations must alternate human/gpt turns")
    img = _image(rec, image_root)
    text, spans = _turns(conv, style, processor)

    def n_tok(t):
        kw = {"images": img} if img is not None else {}
        return processor(text=t, return_tensors="pt", **kw)["input_ids"].shape[1]

    kw = {"images": img} if img is not None else {}
    enc = dict(processor(text=text, return_tensors="pt", **kw))
    labels = torch.full_like(enc["input_ids"], -100)
    for a, b in spans:
        la, lb = n_tok(a), n_tok(b)
        labels[0, la:lb] = enc["input_ids"][0, la:lb]
    enc["labels"] = labels
    for k in ("input_ids", "attention_mask", "labels"):
        enc[k] = enc[k][:, :max_len]
    return enc


def _prompt_only(rec: dict) -> dict:
    return {**rec, "conversations": rec["conversations"][:1]}


def train_paper(cfg: PaperConfig, out_dir: str | Path) -> dict[str, float]:
    """Covariances -> KORE init -> Trainer on B (+ projector) -> standard-LoRA export (spec P1-P5)."""
    from safetensors.torch import save_file
    from transformers import Trainer, TrainingArguments

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    model, processor = _load(cfg.model)
    records = json.loads(Path(cfg.data_path).read_text())
    calib = json.loads(Path(cfg.calib_path).read_text())[: cfg.n_calib]
    if not records or not calib:
        raise ValueError("data_path and calib_path must hold non-empty JSON lists of records")
    calib_batches = []
    for rec in calib:
        img = _image(rec, cfg.image_root)
        kw = {"images": img} if img is not None else {}
        ask = [rec["conversations"][0], {"from": "gpt", "value": ""}]  # question only, no answer
        q = _turns(ask, cfg.prompt_style, processor)[1][0][0]
        calib_batches.append(dict(processor(text=q, return_tensors="pt", **kw)))

    def lm_linear(name, module):
        return (
            isinstance(module, torch.nn.Linear)
            and "language_model" in name
            and ".layers." in name
            and name.rsplit(".", 1)[-1] in cfg.target_modules
        )

    covs = collect_input_covariances(
        model, calib_batches, lm_linear, normalize=cfg.normalize, denom=cfg.denom
    )
    model = apply_kore(
        model,
        covs,
        cfg.rank,
        list(covs),
        cfg.freeze_A,
        cfg.sigma_fuse,
        eigvecs=cfg.eigvecs,
        init=cfg.init,
    )
    projector = [p for n, p in model.named_parameters() if any(k in n for k in cfg.projector_keys)]
    for p in projector:
        p.requires_grad_(True)
    adapters = [p for n, p in model.named_parameters() if p.requires_grad and "lora_" in n]
    train_set = [
        encode_record(r, processor, cfg.image_root, cfg.max_len, cfg.prompt_style) for r in records
    ]

    def collate(batch):
        if len(batch) != 1:
            raise ValueError("per_device_batch > 1 needs padding-aware collation; use grad_accum")
        return batch[0]

    class KoreTrainer(Trainer):
        def create_optimizer(self, *args, **kwargs):
            groups = [{"params": adapters, "lr": cfg.lr}]
            if projector:
                groups.append({"params": projector, "lr": cfg.projector_lr})
            self.optimizer = torch.optim.AdamW(groups, weight_decay=cfg.weight_decay)
            return self.optimizer

    args = TrainingArguments(
        output_dir=str(out_dir / "trainer"),
        learning_rate=cfg.lr,
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.per_device_batch,
        gradient_accumulation_steps=cfg.grad_accum,
        warmup_steps=cfg.warmup_ratio,  # a float < 1 is a ratio in transformers 5
        lr_scheduler_type=cfg.scheduler,
        weight_decay=cfg.weight_decay,
        bf16=cfg.bf16,
        save_strategy="no",
        report_to="none",
        logging_steps=10,
        remove_unused_columns=False,
        dataloader_pin_memory=False,
        seed=cfg.seed,
        use_cpu=not torch.cuda.is_available(),
    )
    trainer = KoreTrainer(model=model, args=args, train_dataset=train_set, data_collator=collate)
    result = trainer.train()
    sd = export_standard_lora(model) if cfg.freeze_A else {}
    if sd:
        save_file(
            {k: v.contiguous() for k, v in sd.items()}, str(out_dir / "kore_lora.safetensors")
        )
    if projector:
        proj = {
            n: p.detach().contiguous()
            for n, p in model.named_parameters()
            if any(k in n for k in cfg.projector_keys)
        }
        save_file(proj, str(out_dir / "projector.safetensors"))
    energy = model.kore_null_energy
    return {
        "train_loss": float(result.training_loss),
        "trainable_params": float(sum(p.numel() for p in adapters + projector)),
        "null_energy_mean": sum(energy.values()) / len(energy),
        "n_layers": float(len(energy)),
    }
