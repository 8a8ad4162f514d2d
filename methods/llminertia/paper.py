"""LLMInertia's paper stages: ``icml26 experiment=llminertia_paper`` (``stage=paper``) and
``experiment=llminertia_induce`` (``stage=induce``).

Paper (``stage=paper``; the paper abstract's four QA/summarisation sets): the induction test sets (repo JSONL) and HaluEval's four sets,
answered by one backbone per run through vLLM (``engine=vllm``), an OpenAI-compatible server
(``engine=openai``, e.g. ``vllm serve``) or transformers (``engine=hf``, CPU tests), with the three
arms; with ``pre_model`` the induction metrics (IR, REI, ND) against the base model's plain answers
are added. Induce (``stage=induce``; official code
``examples/train_full/llama3_full_pt.yaml``): continued pre-training on a co-occurrence corpus with
the official recipe.
"""

from __future__ import annotations

import logging
import time

from common.llm import ChatLLM
from common.tracking import write_results

from .arms import baseline_arms, check_prompt_set, make_pipeline, plain_kw
from .config import ARMS, LLMInertiaRunConfig, PaperDataset
from .core import answer_plain
from .metrics import Pred, induction_metrics
from .prompts import PROMPT_SETS

logger = logging.getLogger(__name__)

__all__ = ["benchmark_datasets", "induce_stage", "paper_stage", "run_paper"]


def _make_llm(rc: LLMInertiaRunConfig, model: str, base_url: str | None) -> ChatLLM:
    """The backbone as a ``ChatLLM`` for ``rc.engine`` (vllm is imported only if used)."""
    if rc.engine == "openai":
        from common.llm import OpenAIChat

        return OpenAIChat(
            model, base_url=base_url, temperature=rc.temperature, max_tokens=rc.max_tokens
        )
    if rc.engine == "vllm":
        from .paper_data import VLLMChat

        return VLLMChat(
            model,
            temperature=rc.temperature,
            max_tokens=rc.max_tokens,
            tensor_parallel_size=rc.tensor_parallel_size,
            max_model_len=rc.max_model_len,
            gpu_memory_utilization=0.8,  # repo
        )
    if rc.engine == "hf":
        from common.llm import HFChat
        from common.models import load_model, load_tokenizer

        return HFChat(
            load_model(model), load_tokenizer(model), max_new_tokens=rc.max_tokens, temperature=0.0
        )
    raise ValueError(f"method.engine must be openai, vllm or hf, got {rc.engine!r}")


def _paper_llm(rc: LLMInertiaRunConfig, model: str) -> ChatLLM:
    return _make_llm(rc, model, rc.base_url)


def _pre_llm(rc: LLMInertiaRunConfig) -> ChatLLM | None:
    return _make_llm(rc, rc.pre_model, rc.pre_base_url or rc.base_url) if rc.pre_model else None


def _load_items(d: PaperDataset, seed: int) -> tuple[list[str], list[str]]:
    from .paper_data import load_halueval, load_induction_tests

    if d.kind == "induction":
        ds = load_induction_tests(d.path)
    elif d.kind == "halueval":
        if d.task is None:
            raise ValueError(f"dataset {d.name!r}: kind=halueval needs a task")
        ds = load_halueval(d.path, d.task, seed=seed)
    else:
        raise ValueError(f"dataset {d.name!r}: kind must be induction or halueval, got {d.kind!r}")
    n = d.max_items or len(ds)
    return list(ds["input"])[:n], list(ds["label"])[:n]


_HALUEVAL_TASKS = ("qa", "dialogue", "summarization", "general")


def benchmark_datasets(benchmark) -> list[PaperDataset]:
    """The paper sets of a ``benchmark`` group (format ``inertia``), kind and prompts by set name:
    ``medical`` / ``synthetic`` are the official induction test files (their own prompt set),
    ``halueval_<task>`` a HaluEval task (qa, dialogue, summarization, general; generic prompts).

    Raises:
        ValueError: no benchmark, a set without ``path`` or a set name outside that convention.
    """
    if benchmark is None or not benchmark.sets:
        raise ValueError("stage=paper needs benchmark=<suite> (configs/benchmark/, e.g. inertia6)")
    out = []
    for name, spec in benchmark.sets.items():
        if not spec.path:
            raise ValueError(f"benchmark.sets.{name}.path: a local file is required (formats in "
                             "methods/llminertia/paper_data.py)")  # fmt: skip
        task = name.removeprefix("halueval_") if name.startswith("halueval_") else None
        if name in ("medical", "synthetic"):
            out.append(PaperDataset(name, "induction", spec.path, None, name, spec.limit))
        elif task in _HALUEVAL_TASKS:
            out.append(PaperDataset(name, "halueval", spec.path, task, "generic", spec.limit))
        else:
            raise ValueError(
                f"benchmark.sets.{name}: set names are medical, synthetic (induction tests) or "
                f"halueval_<task> with task in {list(_HALUEVAL_TASKS)}"
            )
    return out


def run_paper(
    rc: LLMInertiaRunConfig, seed: int, model: str, sets: list[PaperDataset]
) -> tuple[dict, dict]:
    """Three arms (plain, generic note, LLMInertia) on every set for one backbone."""
    if not sets:
        raise ValueError("stage=paper needs at least one evaluation set")
    for d in sets:
        if d.prompt_set not in PROMPT_SETS:
            raise ValueError(f"dataset {d.name!r}: prompt_set must be one of {sorted(PROMPT_SETS)}")
    items = {d.name: _load_items(d, seed) for d in sets}  # every file read before the model
    llm, pre_llm = _paper_llm(rc, model), _pre_llm(rc)
    per: dict[str, dict[str, float]] = {a: {} for a in ARMS}
    extra: dict = {"model": model, "pre_model": rc.pre_model, "engine": rc.engine, "sets": {}}
    for d in sets:
        texts, labels = items[d.name]
        if rc.max_items:
            texts, labels = texts[: rc.max_items], labels[: rc.max_items]
        prompts = PROMPT_SETS[d.prompt_set]
        preds = baseline_arms(llm, texts, prompts, rc)
        recs = make_pipeline(llm, prompts, rc).run(texts)
        preds["llminertia"] = [r.predict for r in recs]
        pre_preds = None
        if pre_llm is not None:
            pre = answer_plain(pre_llm, texts, prompts, **plain_kw(rc))
            pre_preds = [Pred(i, p, y) for i, (p, y) in enumerate(zip(pre, labels, strict=True))]
        for arm, ps in preds.items():
            ok = [(p, y) for p, y in zip(ps, labels, strict=True) if p != "error"]
            per[arm][f"{d.name}_accuracy"] = sum(p == y for p, y in zip(ps, labels)) / len(ps)
            per[arm][f"{d.name}_wrong_yes"] = sum(p == "yes" and y == "no" for p, y in ok) / max(
                sum(y == "no" for _, y in ok), 1
            )
            per[arm][f"{d.name}_n_error"] = float(len(ps) - len(ok))
            if pre_preds is not None:
                post = [Pred(i, p, y) for i, (p, y) in enumerate(zip(ps, labels, strict=True))]
                m = induction_metrics(pre_preds, post)
                for key in ("induction_rate", "rel_error_increase", "norm_drop", "acc_pre"):
                    per[arm][f"{d.name}_{key}"] = float(m[key])
        per["llminertia"][f"{d.name}_matched_rate"] = sum(bool(r.matched) for r in recs) / len(recs)
        per["llminertia"][f"{d.name}_note_chars"] = sum(len(r.note) for r in recs) / len(recs)
        extra["sets"][d.name] = {"n": len(texts), "kind": d.kind, "path": d.path}
    return per, extra


def paper_stage(run) -> dict[str, float]:
    """``stage=paper``: plain / generic note / LLMInertia on every configured set for ``run.model``."""
    from common.config import model_id

    rc = run.method
    check_prompt_set(rc)
    t0 = time.time()
    # the openai backend addresses the served model by its name; the others load it (path wins)
    model = run.model.name if rc.engine == "openai" else model_id(run.model)
    per, extra = run_paper(rc, run.seed, model, benchmark_datasets(run.benchmark))
    return write_results(
        run.run_dir, "llminertia", per, cfg=run.cfg, extra=extra, wall_time_s=time.time() - t0
    )


def induce_stage(run) -> dict[str, float]:
    """``stage=induce``: continued pre-training of ``run.model`` on a co-occurrence corpus.

    The official ``examples/train_full/llama3_full_pt.yaml`` settings are the ``trainer`` node of
    ``configs/experiment/llminertia_induce.yaml`` (fields of :class:`InductionConfig`).
    """
    import torch

    from common.config import model_id, trainer_config
    from common.models import load_model, load_tokenizer

    from .induction_train import InductionConfig, continued_pretrain
    from .paper_data import load_cooccurrence_corpus

    rc = run.method
    if not rc.corpus_path:
        raise ValueError("stage=induce needs method.corpus_path (a repo-format co-occurrence JSON)")
    t0 = time.time()
    spec = model_id(run.model)
    args = trainer_config(
        InductionConfig,
        rc.trainer,
        output_dir=str(run.run_dir / "induce"),
        seed=run.seed,
        report_to=[],
        logging_steps=10,
        dataloader_pin_memory=torch.accelerator.is_available(),  # on CPU torch only warns
    )
    ds = load_cooccurrence_corpus(rc.corpus_path)  # read before the model loads
    model = load_model(spec, dtype=run.model.dtype, device="cpu")
    tok = load_tokenizer(spec, padding_side="right")
    model = continued_pretrain(model, tok, ds, args)
    out = run.run_dir / "induced"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return write_results(
        run.run_dir,
        "llminertia",
        {"induce": {"n_texts": float(len(ds)), "train_steps": float(args.max_steps)}},
        cfg=run.cfg,
        extra={"induced_model": str(out)},
        wall_time_s=time.time() - t0,
    )
