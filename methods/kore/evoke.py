"""EVOKE-style knowledge-adaptation evaluation (paper §4, App. B.3;).

The official evaluation runs LLaVA's ``model_vqa_loader`` (greedy, ``vicuna_v1`` prompt) over an EVOKE
question file and scores the answers with cover exact match (CEM) and word F1; K.A is their mean.
This module is the same pipeline on any LLaVA-style HF model (``LlavaForConditionalGeneration``) or a
chat-template VLM (e.g. ``Qwen2_5_VLForConditionalGeneration``):

* question file: JSON lines ``{"question_id", "image", "text"}`` (LLaVA ``model_vqa`` layout); the
  gold answer is read from ``answer`` (or ``gt_answer`` / ``answers[0]``) of the same line, or from a
  separate gold file keyed by ``question_id``;
* answers file: JSON lines ``{"question_id", "prompt", "text", "model_id"}`` as written by the
  official scripts, so answers produced elsewhere (e.g. vLLM) can be scored with
  :func:`score_answers` alone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from methods.kore.metrics import knowledge_adaptation

logger = logging.getLogger(__name__)

GOLD_KEYS = ("answer", "gt_answer", "answers")


def read_jsonl(path: str | Path) -> list[dict]:
    """Reads a JSON-lines file (blank lines skipped); engineering I/O."""
    return [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]


def _gold_of(rec: dict) -> str | None:
    for k in GOLD_KEYS:
        if k in rec:
            v = rec[k]
            return str(v[0] if isinstance(v, list) else v)
    return None


def load_questions(
    path: str | Path, gold_path: str | Path | None = None
) -> tuple[list[dict], dict[str, str]]:
    """Loads an EVOKE question file and the gold answers.

    Engineering: LLaVA's ``model_vqa`` question layout, as read by the official EVOKE evaluation.

    Args:
        path: JSON lines with ``question_id``, ``text`` and optionally ``image`` and a gold answer.
        gold_path: optional JSON lines (or a JSON list / ``{question_id: answer}`` dict) with the gold.

    Returns:
        ``(questions, {question_id: gold})``.

    Raises:
        ValueError: if a line lacks ``question_id`` / ``text`` or a question has no gold answer.
    """
    questions = read_jsonl(path)
    for i, q in enumerate(questions):
        if "question_id" not in q or "text" not in q:
            raise ValueError(f"{path}: line {i} needs 'question_id' and 'text'")
    gold: dict[str, str] = {}
    if gold_path is not None:
        text = Path(gold_path).read_text()
        try:
            data: Any = json.loads(text)
        except json.JSONDecodeError:
            data = [json.loads(x) for x in text.splitlines() if x.strip()]
        if isinstance(data, dict):
            gold = {str(k): str(v) for k, v in data.items()}
        else:
            gold = {str(r["question_id"]): _gold_of(r) for r in data if _gold_of(r) is not None}
    for q in questions:
        g = _gold_of(q)
        if g is not None:
            gold.setdefault(str(q["question_id"]), g)
    missing = [q["question_id"] for q in questions if str(q["question_id"]) not in gold]
    if missing:
        raise ValueError(f"no gold answer for question_id(s) {missing[:5]}")
    return questions, gold


def render_prompt(text: str, processor, style: str = "vicuna") -> str:
    """The generation prompt: LLaVA ``vicuna_v1`` style or the processor's chat template.

    Args:
        text: the question; an ``<image>`` placeholder is added in front when absent.
        processor: the model's processor (``style="chat"`` uses its ``apply_chat_template``).
        style: ``"vicuna"`` (LLaVA-1.5, official ``--conv-mode vicuna_v1``) or ``"chat"``.
    """
    if style == "vicuna":
        q = text if "<image>" in text else f"<image>\n{text}"
        return f"USER: {q} ASSISTANT:"
    if style == "chat":
        body = text.replace("<image>", "").strip()
        msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": body}]}]
        return processor.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    raise ValueError(f"style must be 'vicuna' or 'chat', got {style!r}")


@torch.no_grad()
def generate_answers(
    model,
    processor,
    questions: Sequence[dict],
    image_root: str | Path = "",
    style: str = "vicuna",
    max_new_tokens: int = 128,
    model_id: str = "",
) -> list[dict]:
    """Greedy answers (official: temperature 0) in the ``model_vqa`` answers-file layout."""
    from methods.kore.paper import _image

    model.eval()
    out = []
    for q in questions:
        img = _image(q, str(image_root)) if q.get("image") else None
        prompt = render_prompt(q["text"], processor, style)
        kw = {"images": img} if img is not None else {}
        if img is None:
            prompt = prompt.replace("<image>\n", "").replace("<image>", "")
        enc = processor(text=prompt, return_tensors="pt", **kw).to(model.device)
        gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
        new = gen[0, enc["input_ids"].shape[1] :]
        text = processor.tokenizer.decode(new, skip_special_tokens=True).strip()
        out.append(
            {
                "question_id": q["question_id"],
                "prompt": q["text"],
                "text": text,
                "model_id": model_id,
            }
        )
    return out


def score_answers(answers: Sequence[dict], gold: dict[str, str]) -> dict[str, float]:
    """CEM, F1 and K.A = (CEM + F1) / 2 in percent (paper §4) over the answered questions.

    Raises:
        ValueError: if an answer's ``question_id`` has no gold, or there are no answers.
    """
    if not answers:
        raise ValueError("answers is empty")
    preds, golds = [], []
    for a in answers:
        qid = str(a["question_id"])
        if qid not in gold:
            raise ValueError(f"answer for unknown question_id {qid!r}")
        preds.append(a["text"])
        golds.append(gold[qid])
    return knowledge_adaptation(preds, golds) | {"n": float(len(preds))}


def load_adapter(model, adapter_dir: str | Path):
    """Loads ``kore_lora.safetensors`` (+ ``projector.safetensors``) written by ``train_paper``.

    The adapter is a standard LoRA with scaling 1 on the untouched base; its rank is read from the
    saved ``lora_A`` shapes.
    """
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
    from safetensors.torch import load_file

    adapter_dir = Path(adapter_dir)
    sd = load_file(str(adapter_dir / "kore_lora.safetensors"))
    ranks = {v.shape[0] for k, v in sd.items() if k.endswith("lora_A.weight")}
    if len(ranks) != 1:
        raise ValueError(f"expected one LoRA rank in {adapter_dir}, got {sorted(ranks)}")
    (r,) = ranks
    names = sorted({k.split("base_model.model.", 1)[1].rsplit(".lora_", 1)[0] for k in sd})
    proj = adapter_dir / "projector.safetensors"
    if proj.is_file():
        missing = model.load_state_dict(load_file(str(proj)), strict=False)
        if missing.unexpected_keys:
            raise ValueError(f"projector weights do not match the model: {missing.unexpected_keys}")
    cfg = LoraConfig(r=r, lora_alpha=r, lora_dropout=0.0, target_modules=names)
    pm = get_peft_model(model, cfg)
    n_lora = sum(1 for n, _ in pm.named_parameters() if "lora_A" in n)
    if n_lora != len(names):
        raise ValueError(f"adapter covers {len(names)} layers but the model wrapped {n_lora}")
    res = set_peft_model_state_dict(pm, sd)
    if getattr(res, "unexpected_keys", None):
        raise ValueError(f"adapter keys do not match the model: {res.unexpected_keys[:3]}")
    return pm.eval()
