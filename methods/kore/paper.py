"""Paper-scale KORE knowledge injection into a LLaVA-style model with the HF Trainer (paper §3.2, §4).

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
from pathlib import Path
from typing import Any

import torch

from methods.kore.config import LLAVA_TARGETS, EvokeConfig, PaperConfig
from methods.kore.covariance import collect_input_covariances
from methods.kore.model import apply_kore, export_standard_lora

__all__ = [
    "LLAVA_TARGETS",
    "PaperConfig",
    "encode_record",
    "evoke_stage",
    "paper_stage",
    "train_paper",
]

logger = logging.getLogger(__name__)


def load_vlm(model_cfg):
    """``(model, processor)`` of ``run.model`` (hub id, local path, or ``tiny-llava``) in float32.

    Loaded through :func:`common.models.load_model`, so the run records what it loaded. Covariances
    and the decomposition are computed in float32/float64; the Trainer's ``bf16`` flag handles
    mixed precision.
    """
    from common.config import model_id
    from common.models import load_model, load_processor

    spec = model_id(model_cfg)
    dtype = "float32" if model_cfg.dtype == "auto" else model_cfg.dtype
    model = load_model(spec, dtype=dtype, kind="vision_language", device="cpu")
    return model, load_processor(spec)


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


def _training_args(trainer: dict | None, out_dir: Path, seed: int):
    """The :class:`methods.kore.trainer.KoreTrainingConfig` of a paper run (batch size 1)."""
    from common.config import trainer_config
    from methods.kore.trainer import KoreTrainingConfig

    args = trainer_config(
        KoreTrainingConfig,
        trainer,
        output_dir=str(out_dir / "trainer"),
        save_strategy="no",
        report_to="none",
        logging_steps=10,
        remove_unused_columns=False,
        dataloader_pin_memory=False,
        seed=seed,
        use_cpu=not torch.cuda.is_available(),
    )
    if args.per_device_train_batch_size != 1:
        raise ValueError(
            "method.trainer.per_device_train_batch_size must be 1 (no padding-aware collation); "
            "raise gradient_accumulation_steps instead"
        )
    return args


def _kore_init(cfg: PaperConfig, model, processor):
    """Covariances of the language model's target linears on the questions of the calibration
    records (paper §3.2: old-knowledge activations), then :func:`apply_kore` (Eqs. 1-3)."""
    calib = json.loads(Path(cfg.calib_path).read_text())[: cfg.n_calib]
    if not calib:
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
    return apply_kore(
        model,
        covs,
        cfg.rank,
        list(covs),
        cfg.freeze_A,
        cfg.sigma_fuse,
        eigvecs=cfg.eigvecs,
        init=cfg.init,
    )


def _fit(model, args, train_set: list, adapters: list, projector: list):
    """Train the trainable adapter factor(s) and the projector with their own learning rates."""
    from transformers import Trainer

    def collate(batch):
        return batch[0]

    class KoreTrainer(Trainer):
        def create_optimizer(self, *a, **kw):
            groups = [{"params": adapters, "lr": args.learning_rate}]
            if projector:
                groups.append({"params": projector, "lr": args.projector_lr})
            self.optimizer = torch.optim.AdamW(groups, weight_decay=args.weight_decay)
            return self.optimizer

    hf_trainer = KoreTrainer(model=model, args=args, train_dataset=train_set, data_collator=collate)
    return hf_trainer.train()


def _save_outputs(model, cfg: PaperConfig, out_dir: Path, projector: list) -> None:
    """Write the standard-LoRA export (B' − B on the untouched base, frozen-A runs only) and the
    projector weights."""
    from safetensors.torch import save_file

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


def train_paper(
    cfg: PaperConfig,
    model,
    processor,
    out_dir: str | Path,
    trainer: dict | None = None,
    seed: int = 0,
) -> dict[str, float]:
    """Covariances -> KORE init -> Trainer on B (+ projector) -> standard-LoRA export.

    Args:
        cfg: the KORE settings (:class:`PaperConfig`).
        model, processor: the LLaVA-style model and its processor.
        out_dir: where ``kore_lora.safetensors`` and ``projector.safetensors`` go.
        trainer: fields of :class:`methods.kore.trainer.KoreTrainingConfig` (the YAML node).
        seed: the training seed.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    args = _training_args(trainer, out_dir, seed)
    records = json.loads(Path(cfg.data_path).read_text())
    if not records:
        raise ValueError("data_path and calib_path must hold non-empty JSON lists of records")
    model = _kore_init(cfg, model, processor)
    projector = [p for n, p in model.named_parameters() if any(k in n for k in cfg.projector_keys)]
    for p in projector:
        p.requires_grad_(True)
    adapters = [p for n, p in model.named_parameters() if p.requires_grad and "lora_" in n]
    train_set = [
        encode_record(r, processor, cfg.image_root, cfg.max_len, cfg.prompt_style) for r in records
    ]
    result = _fit(model, args, train_set, adapters, projector)
    _save_outputs(model, cfg, out_dir, projector)
    energy = model.kore_null_energy
    return {
        "train_loss": float(result.training_loss),
        "trainable_params": float(sum(p.numel() for p in adapters + projector)),
        "null_energy_mean": sum(energy.values()) / len(energy),
        "n_layers": float(len(energy)),
    }


def check_records(path: str, image_root: str, what: str) -> list[dict]:
    """The LLaVA conversation records of ``path`` (KORE-74K layout: a JSON list of ``{"id",
    "image", "conversations": [{"from": "human"|"gpt", "value"}, ...]}``), checked before any
    model loads: a non-empty list, alternating human/gpt turns, every image present.

    Raises:
        ValueError / FileNotFoundError: naming ``what`` (``data_path`` / ``calib_path``) and the
            first bad record.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"method.paper.{what}: no file {path!r}")
    records = json.loads(p.read_text())
    if not isinstance(records, list) or not records:
        raise ValueError(f"method.paper.{what} must hold a non-empty JSON list of records")
    for i, rec in enumerate(records):
        conv = rec.get("conversations") if isinstance(rec, dict) else None
        roles = [c.get("from") for c in conv] if isinstance(conv, list) else []
        if not roles or len(roles) % 2 or roles != ["human", "gpt"] * (len(roles) // 2):
            raise ValueError(
                f"method.paper.{what} record {i}: conversations must alternate human/gpt turns"
            )
        img = rec.get("image")
        if img is not None and not (Path(image_root) / img if image_root else Path(img)).is_file():
            raise FileNotFoundError(
                f"method.paper.{what} record {i}: image {img!r} not under image_root {image_root!r}"
            )
    return records


def paper_stage(run) -> dict[str, float]:
    """``stage=paper``: KORE training of ``run.model`` (paper §3.2, Table 6)."""
    import time

    from common.tracking import write_results

    t0 = time.time()
    cfg = run.method.paper
    check_records(cfg.data_path, cfg.image_root, "data_path")
    check_records(cfg.calib_path, cfg.image_root, "calib_path")
    model, processor = load_vlm(run.model)
    res = train_paper(
        run.method.paper, model, processor, run.run_dir / "kore", run.method.trainer, run.seed
    )
    return write_results(
        run.run_dir, "kore", {"kore_paper": res}, cfg=run.cfg, wall_time_s=time.time() - t0
    )


def evoke_stage(run) -> dict[str, float]:
    """``stage=evoke``: EVOKE-style K.A (CEM, F1) of ``run.model``, optionally with a KORE adapter."""
    import time

    from common.tracking import write_results
    from methods.kore.evoke import (
        generate_answers,
        load_adapter,
        load_questions,
        read_jsonl,
        score_answers,
    )

    ev: EvokeConfig = run.method.evoke
    if run.benchmark is None or not run.benchmark.sets:
        raise ValueError(
            "method.stage=evoke needs benchmark=<suite> (configs/benchmark/evoke.yaml)"
        )
    sets = run.benchmark.sets
    for name, spec in sets.items():
        if not spec.path:
            raise ValueError(f"benchmark.sets.{name}.path: the EVOKE question file is required")
    if (ev.gold_file or ev.answers_file) and len(sets) > 1:
        raise ValueError(
            "method.evoke.gold_file / answers_file belong to one question file: select one set "
            f"of benchmark={run.benchmark.name} (it has {sorted(sets)})"
        )
    t0 = time.time()
    loaded = {}
    for name, spec in sets.items():
        questions, gold = load_questions(spec.path, ev.gold_file)
        loaded[name] = (questions[: spec.limit] if spec.limit is not None else questions, gold)
    model = processor = None
    if not ev.answers_file:
        model, processor = load_vlm(run.model)
        if ev.adapter_dir:
            model = load_adapter(model, ev.adapter_dir)
    res = {}
    for name, (questions, gold) in loaded.items():
        if ev.answers_file:
            answers = read_jsonl(ev.answers_file)
        else:
            from common.config import model_id

            answers = generate_answers(
                model, processor, questions, ev.image_root, ev.prompt_style, ev.max_new_tokens,
                model_id=model_id(run.model),
            )  # fmt: skip
            out = Path(run.run_dir) / f"{name}_answers.jsonl"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text("".join(json.dumps(a) + "\n" for a in answers))
        res[name] = score_answers(answers, gold)
    return write_results(run.run_dir, "kore", res, cfg=run.cfg, wall_time_s=time.time() - t0)
