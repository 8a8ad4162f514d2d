"""Paper-scale KMKC driver (``stage=paper``): profile → regions → CGKE SFT → CDKC GRPO, per round.

Every stage is a function over plain data so that a reproduction can stop, inspect and resume:

* :func:`load_qa_jsonl` reads the FlashRAG layout (``<data_dir>/<name>/<split>.jsonl`` with
  ``id``, ``question``, ``golden_answers``), samples a fixed number of items with a fixed seed and
  records the ids (paper App. B);
* :func:`profile_items` samples K answers per question with any :class:`common.generation.Generator`
  (``HFGenerator`` here, ``VLLMGenerator`` at scale) and builds the behavioural profiles (Fig. 2);
* :func:`run_round` assigns regions (self-evaluation through a ``ChatLLM`` with the rule fallback),
  builds the CGKE set, fine-tunes with ``trl.SFTTrainer`` and calibrates with
  :class:`methods.kmkc.trainer.CDKCTrainer`;
* :func:`evaluate` scores greedy answers: cover accuracy, equal-mass ECE with c = exp(−U) and the
  self-knowledge metrics at the answer/refuse threshold τ (our inference).

:func:`run_paper` chains them for ``rounds`` rounds (the paper's "w/ 2 round" row re-profiles the
round-1 model). The test suite runs it end to end on a tiny local Qwen2 and fixture files.
"""

from __future__ import annotations

import json
import logging
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from common.config import checkpointing_kwargs
from common.generation import SamplingParams

from .augment import AugmentConfig, build_cgke_dataset
from .cdkc import correctness_reward
from .metrics import check_golds, expected_calibration_error, qa_correct, self_knowledge_metrics
from .profile import BehaviorProfile, SampleOut, build_profile
from .regions import RegionConfig, assign_regions

logger = logging.getLogger(__name__)

_ANSWER = re.compile(r"answer\s*:\s*(.+)", re.IGNORECASE)


@dataclass
class PaperConfig:
    """One paper-scale run, assembled by :func:`methods.kmkc.paper.paper_stage` from the run config
    (``configs/experiment/kmkc_paper.yaml``, whose values carry their sources).

    Attributes:
        model: hub id or local path of the policy (also the augmentation and self-evaluation LLM).
        train_sets: seed-set name -> (local FlashRAG ``.jsonl``, items to sample or None for all).
        eval_sets: benchmark name -> (local ``.jsonl``, max items; the whole set when smaller).
        output_dir: where profiles, datasets, checkpoints and results go.
        engine: ``"hf"`` or ``"vllm"`` for profiling and evaluation.
        vllm_kwargs: engine keyword arguments for ``VLLMGenerator``.
        batch_size: prompts per ``generate`` call of the HF engine.
        k, temperature, max_new_tokens: profiling samples (paper: K = 16).
        prompt: the QA instruction; ``{question}`` is substituted (ours).
        self_evaluate: ask the model for its region (rule fallback), else the rule only.
        regions, augment: fields of :class:`RegionConfig` / :class:`AugmentConfig`.
        sft: keyword arguments of ``trl.SFTConfig``.
        cdkc: keyword arguments of :class:`methods.kmkc.trainer.CDKCConfig`.
        cdkc_init: ``"cgke"`` (calibrate the SFT model) or ``"base"`` (the paper does not say which).
        rounds: expansion-calibration rounds (paper: 1 and 2).
        refuse_threshold: τ on c for the answer/refuse decision, inferred.
        seed: sampling seed for the data subsets.
    """

    model: str
    train_sets: dict[str, tuple[str, int | None]]
    eval_sets: dict[str, tuple[str, int | None]]
    output_dir: str = "outputs/kmkc_paper"
    engine: str = "hf"
    vllm_kwargs: dict = field(default_factory=dict)
    batch_size: int = 16
    k: int = 16
    temperature: float = 1.0
    max_new_tokens: int = 64
    prompt: str = (
        "Answer the following question. End with a line 'Answer: <short answer>'.\n"
        "Question: {question}"
    )
    self_evaluate: bool = True
    regions: dict = field(default_factory=dict)
    augment: dict = field(default_factory=dict)
    sft: dict = field(default_factory=dict)
    cdkc: dict = field(default_factory=dict)
    cdkc_init: str = "cgke"
    rounds: int = 1
    refuse_threshold: float = 0.5
    seed: int = 0
    dtype: str = "auto"

    def __post_init__(self) -> None:
        if self.engine not in ("hf", "vllm"):
            raise ValueError(f"engine must be 'hf' or 'vllm', got {self.engine!r}")
        if self.cdkc_init not in ("cgke", "base"):
            raise ValueError(f"cdkc_init must be 'cgke' or 'base', got {self.cdkc_init!r}")
        if self.k < 1 or self.rounds < 1:
            raise ValueError(f"k and rounds must be >= 1, got k={self.k}, rounds={self.rounds}")
        if not self.train_sets or not self.eval_sets:
            raise ValueError("train_sets and eval_sets must name at least one dataset each")
        if "{question}" not in self.prompt:
            raise ValueError("prompt must contain '{question}'")


def load_qa_jsonl(path: str | Path, n: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """Reads a FlashRAG-style QA file and samples ``n`` items with a fixed seed (paper App. B).

    Each line holds ``question`` and ``golden_answers`` (a list of aliases; ``answer`` as a string
    is accepted too); ``id`` defaults to the line number.

    Returns:
        ``[{"id", "question", "golds"}]`` in file order of the sampled ids.

    Raises:
        FileNotFoundError: if the file is missing.
        ValueError: on a line without a question or gold answers (its line number is named).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"QA file not found: {path}")
    items = []
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        rec = json.loads(line)
        golds = rec.get("golden_answers", rec.get("answer"))
        if isinstance(golds, str):
            golds = [golds]
        if not rec.get("question") or not golds:
            raise ValueError(f"{path}:{i}: needs 'question' and 'golden_answers'")
        items.append({"id": str(rec.get("id", i)), "question": rec["question"], "golds": golds})
    if n is not None and n < len(items):
        keep = sorted(random.Random(seed).sample(range(len(items)), n))
        items = [items[j] for j in keep]
    for it in items:
        it["golds"] = check_golds(it["golds"])
    return items


def extract_answer(text: str) -> str:
    """The short answer after the last ``Answer:`` line, else the whole (stripped) text.

    Source: our inference (the paper's answer format is not public).
    """
    found = _ANSWER.findall(text)
    return found[-1].strip() if found else text.strip()


def _messages(cfg: PaperConfig, question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": cfg.prompt.format(question=question)}]


def make_generator(cfg: PaperConfig, model: Any, tokenizer: Any, workdir: Path):
    """``HFGenerator`` on the current model, or a ``VLLMGenerator`` on a saved copy of it.

    Source: engineering, not in the paper.

    vLLM serves weights from disk, so the policy is saved to ``workdir/policy`` first (the
    "reloaded after each round"); ``cfg.vllm_kwargs`` go to the engine (e.g.
    ``gpu_memory_utilization`` when training shares the GPU).
    """
    if cfg.engine == "vllm":
        from common.generation import VLLMGenerator

        path = Path(workdir) / "policy"
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        return VLLMGenerator(str(path), **cfg.vllm_kwargs)
    from common.generation import HFGenerator

    return HFGenerator(model, tokenizer, batch_size=cfg.batch_size)


def profile_items(
    generator: Any, cfg: PaperConfig, items: list[dict[str, Any]]
) -> list[BehaviorProfile]:
    """K samples per question at temperature T → behavioural profiles (paper §2, Eq. 24)."""
    prompts = [_messages(cfg, it["question"]) for it in items]
    params = SamplingParams(
        max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, seed=cfg.seed
    )
    outs = generator.generate(prompts, n=cfg.k, params=params)
    profiles = []
    for it, comps in zip(items, outs, strict=True):
        samples = [
            SampleOut(
                text=c.text, token_logprobs=list(c.logprobs) or [0.0], answer=extract_answer(c.text)
            )
            for c in comps
        ]
        profiles.append(build_profile(it["question"], it["golds"], samples, qid=it["id"]))
    return profiles


def evaluate(generator: Any, cfg: PaperConfig, items: list[dict[str, Any]]) -> dict[str, float]:
    """Greedy answers: cover accuracy, equal-mass ECE (c = exp(−U)), self-knowledge metrics.

    Source: the paper's metrics (ECE with c = exp(−U), self-knowledge metrics; App. B protocol); the
    bin count 10 is our inference.
    """
    prompts = [_messages(cfg, it["question"]) for it in items]
    params = SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=0.0)
    outs = generator.generate(prompts, n=1, params=params)
    correct, conf = [], []
    for it, (c,) in zip(items, outs, strict=True):
        correct.append(qa_correct(extract_answer(c.text), it["golds"]))
        lp = np.asarray(c.logprobs, dtype=float)
        conf.append(float(np.exp(lp.mean())) if lp.size else 0.0)
    correct_a, conf_a = np.array(correct), np.array(conf)
    out = {"acc": float(correct_a.mean()), "mean_conf": float(conf_a.mean())}
    out["ece"] = (
        expected_calibration_error(conf_a, correct_a, n_bins=min(10, len(items)))
        if len(items) >= 2
        else float("nan")
    )
    sk = self_knowledge_metrics(conf_a >= cfg.refuse_threshold, correct_a)
    out.update({k: float(v) for k, v in sk.items() if isinstance(v, (int, float))})
    return out


def sft_cgke(model: Any, tokenizer: Any, dataset: Any, cfg: PaperConfig, out: Path) -> Any:
    """CGKE fine-tuning with ``trl.SFTTrainer``; loss on the assistant turn only.

    Source: the official method figure ``assets/method.png`` (CGKE ends in SFT); the completion-only
    loss is our inference.

    The ``messages`` rows are split into a conversational prompt (every turn but the last) and
    completion (the assistant turn), for which TRL computes the completion-only loss.
    """
    import torch
    from trl import SFTConfig, SFTTrainer

    pc = dataset.map(
        lambda row: {"prompt": row["messages"][:-1], "completion": row["messages"][-1:]},
        remove_columns=dataset.column_names,
    )
    # pinned memory only with an accelerator (on CPU, torch's DataLoader warns and ignores it)
    kwargs = {"report_to": "none", "save_strategy": "no"}
    kwargs["dataloader_pin_memory"] = torch.accelerator.is_available()
    kwargs.update(cfg.sft)
    trainer = SFTTrainer(
        model=model,
        args=SFTConfig(**checkpointing_kwargs(SFTConfig, {"output_dir": str(out), **kwargs})),
        train_dataset=pc,
        processing_class=tokenizer,
    )
    trainer.train()
    return trainer.model


def calibrate_cdkc(
    model: Any,
    tokenizer: Any,
    profiles: list[BehaviorProfile],
    cfg: PaperConfig,
    out: Path,
) -> Any:
    """CDKC on the original seed questions, each row carrying its region (paper App. B)."""
    import torch
    from datasets import Dataset

    from .trainer import CDKCConfig, CDKCTrainer

    ds = Dataset.from_dict(
        {
            "prompt": [_messages(cfg, p.question) for p in profiles],
            "golds": [list(p.golds) for p in profiles],
            "region": [p.region for p in profiles],
        }
    )
    kwargs = {"report_to": "none", "save_strategy": "no"}
    kwargs["dataloader_pin_memory"] = torch.accelerator.is_available()  # as in sft_cgke
    kwargs.update(cfg.cdkc)
    trainer = CDKCTrainer(
        model=model,
        reward_funcs=correctness_reward,
        args=CDKCConfig(output_dir=str(out), **kwargs),
        train_dataset=ds,
        processing_class=tokenizer,
    )
    trainer.train()
    return trainer.model


def save_profiles(profiles: list[BehaviorProfile], path: Path) -> None:
    """One JSON object per profile (``profile.jsonl``; +inf entropies as ``Infinity``).

    Source: engineering (file format), not in the paper.
    """
    with open(path, "w") as f:
        for p in profiles:
            f.write(json.dumps(p.to_dict(), default=str) + "\n")


def load_profiles(path: str | Path) -> list[BehaviorProfile]:
    """Profiles written by :func:`save_profiles` (``stage=profile`` or a round of ``stage=paper``).

    Source: engineering (file format), not in the paper.

    Raises:
        FileNotFoundError: when ``path`` does not exist.
        ValueError: when a line is not a profile, naming the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"profiles file {path} not found (run method.stage=profile first)")
    out = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(BehaviorProfile(**json.loads(line)))
        except (TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}:{i} is not a profile: {e}") from e
    if not out:
        raise ValueError(f"profiles file {path} is empty")
    return out


def profile_round(
    model: Any, tokenizer: Any, cfg: PaperConfig, items: list[dict[str, Any]], out: Path
) -> tuple[list[BehaviorProfile], dict[str, int]]:
    """K samples per question, then regions (self-evaluation with the rule fallback, paper Fig. 2);
    writes ``out/profile.jsonl``."""
    from common.llm import HFChat

    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    profiles = profile_items(make_generator(cfg, model, tokenizer, out), cfg, items)
    llm = HFChat(model, tokenizer, max_new_tokens=256) if cfg.self_evaluate else None
    counts = assign_regions(profiles, RegionConfig(**cfg.regions), llm=llm)
    save_profiles(profiles, out / "profile.jsonl")
    return profiles, counts


def cgke_round(
    model: Any, tokenizer: Any, cfg: PaperConfig, profiles: list[BehaviorProfile], out: Path
) -> tuple[Any, dict[str, int]]:
    """CGKE: region-specific augmentations by the model itself (paper Fig. 2), written to
    ``out/cgke.jsonl``, then SFT on them; returns the fine-tuned model and the augmentation counts."""
    from common.llm import HFChat

    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    llm = HFChat(model, tokenizer, max_new_tokens=256)
    dataset, stats = build_cgke_dataset(
        profiles, llm, AugmentConfig(**cfg.augment), return_stats=True
    )
    dataset.to_json(str(out / "cgke.jsonl"))
    return sft_cgke(model, tokenizer, dataset, cfg, out / "sft"), stats


def run_round(
    model: Any, tokenizer: Any, cfg: PaperConfig, items: list[dict[str, Any]], out: Path
) -> tuple[Any, dict[str, Any]]:
    """One expansion-calibration round: profile → regions → CGKE SFT → CDKC (paper Fig. 2)."""
    profiles, counts = profile_round(model, tokenizer, cfg, items, out)
    base_state = None
    if cfg.cdkc_init == "base":
        base_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model, stats = cgke_round(model, tokenizer, cfg, profiles, out)
    if base_state is not None:
        model.load_state_dict(base_state)
    model = calibrate_cdkc(model, tokenizer, profiles, cfg, out / "cdkc")
    return model, {"regions": counts, "augmentation": stats, "n_items": len(items)}


def run_paper(cfg: PaperConfig) -> dict[str, dict[str, float]]:
    """All rounds, then every benchmark; writes ``results.json`` under ``cfg.output_dir``.

    Source: paper App. B (seed sets, 3,000-item evaluation samples) and the paper's iterated rounds
    ("w/ 2 round"); the driver itself is engineering.
    """
    from common.models import load_model, load_tokenizer

    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    items = []
    for _name, (path, n) in cfg.train_sets.items():
        items += load_qa_jsonl(path, n, cfg.seed)
    evals = {name: load_qa_jsonl(path, n, cfg.seed) for name, (path, n) in cfg.eval_sets.items()}
    # the model loads after every file is read, so a bad line stops the run first
    model, tokenizer = load_model(cfg.model, dtype=cfg.dtype), load_tokenizer(cfg.model)
    (out / "sampled_ids.json").write_text(
        json.dumps({name: [it["id"] for it in its] for name, its in evals.items()})
    )
    results: dict[str, dict[str, float]] = {}
    model.eval()
    for name, its in evals.items():
        results[f"base/{name}"] = evaluate(make_generator(cfg, model, tokenizer, out), cfg, its)
    diagnostics = {}
    for r in range(1, cfg.rounds + 1):
        model, diagnostics[f"round{r}"] = run_round(model, tokenizer, cfg, items, out / f"round{r}")
        model.eval()
        for name, its in evals.items():
            gen = make_generator(cfg, model, tokenizer, out / f"round{r}")
            results[f"round{r}/{name}"] = evaluate(gen, cfg, its)
    (out / "results.json").write_text(
        json.dumps({"results": results, "diagnostics": diagnostics}, indent=2, default=str)
    )
    return results
