"""LLMInertia experiments for the CLI: ``icml26 experiment=llminertia_toy`` and ``llminertia_paper``.

Trained toy (``stage=toy``, :mod:`.toy_trained`): a tiny GPT-2 learns evidence QA from
scratch, is induced by :func:`continued_pretrain` on co-occurrence text at shares 0-100 %, and is
answered plain / with the generic note / with LLMInertia's adaptive notes; wrong "yes" rates are
reported against the measured association strength log p(B | "A with").

Simulated toy (``stage=sim``; a *simulated* inert LLM, it tests the probe-and-remind mechanism only): for each
co-occurrence share rho, a fixed-size corpus is generated with :func:`make_cooccurrence_corpus`; a
deterministic stand-in model (:class:`InertToyLLM`, wrapped in ``common.llm.ScriptedChat``) takes
its association strengths from the pair counts in that corpus. It extracts entities by lookup,
answers the probe with its strongest associations, and on a negative-evidence question says a
wrong "yes" with probability ``strength(A, B)`` scaled down by a generic note
(``generic_damping``) or by a pair reminder naming (A, B) (``pair_damping``). Those two dampings
are assumptions of the simulator, not measurements; what the toy does measure is whether the
pipeline finds the pairs (probe recall, matched-pair rate), which notes it injects, the LLM-call
budget, and the induction metrics (official eval_overthink.py) against rho. Arms: ``plain`` (no note), ``generic``
(always the generic note) and ``llminertia`` (adaptive notes).

Paper (``stage=paper``): the induction test sets (repo JSONL) and HaluEval's four sets, answered by
one backbone per run through vLLM (``engine=vllm``), an OpenAI-compatible server
(``engine=openai``, e.g. ``vllm serve``) or transformers (``engine=hf``, CPU tests), with the
three arms; with ``pre_model`` the induction metrics (IR, REI, ND) against the base model's plain
answers are added.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time

from common.llm import ChatLLM, ScriptedChat
from common.metrics import spearman
from common.tracking import write_results

from .config import ARMS, LLMInertiaRunConfig, PaperDataset
from .core import LLMInertiaPipeline, answer_plain
from .induction_data import (
    COOCCURRENCE_TEMPLATES,
    MEDICAL_PAIRS,
    SYNTHETIC_PAIRS,
    make_cooccurrence_corpus,
    make_negative_evidence_tests,
)
from .metrics import Pred, induction_metrics
from .prompts import PROMPT_SETS, PromptSet

logger = logging.getLogger(__name__)


def _plain_kw(rc: LLMInertiaRunConfig) -> dict:
    """Plain-baseline arguments: bare input (official) or the answer template with an empty note."""
    if rc.plain_input not in ("bare", "template"):
        raise ValueError(f"plain_input must be 'bare' or 'template', got {rc.plain_input!r}")
    return {"note": None if rc.plain_input == "bare" else "", "yes_no_rule": rc.yes_no_rule}


def _pair_kw(rc: LLMInertiaRunConfig) -> dict:
    return {
        "min_len": rc.min_len,
        "stopwords": rc.stopwords,
        "dedup": rc.dedup,
        "yes_no_rule": rc.yes_no_rule,
    }


def _u01(*keys: object) -> float:
    h = hashlib.sha256("|".join(map(str, keys)).encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


class InertToyLLM:
    """Deterministic "inert" chat model for the toy (not a language model).

    Args:
        strengths: ``{(a, b): strength in [0, 1]}`` learned from co-occurrence counts.
        entities: the vocabulary it can extract.
        prompts: the prompt set whose step prefixes it recognises.
        generic_damping / pair_damping: fraction of inert "yes" answers removed by a generic
            note / by a reminder naming the asked pair.
        base_error: wrong-yes probability independent of associations.
        seed: seed of the per-item coin flips.
    """

    def __init__(
        self,
        strengths: dict[tuple[str, str], float],
        entities: list[str],
        prompts: PromptSet,
        generic_damping: float,
        pair_damping: float,
        base_error: float,
        seed: int,
    ) -> None:
        self.s = {(a.lower(), b.lower()): v for (a, b), v in strengths.items()}
        self.entities = entities
        self.p = prompts
        self.gd, self.pd, self.base, self.seed = generic_damping, pair_damping, base_error, seed

    def _strength(self, a: str, b: str) -> float:
        return max(self.s.get((a.lower(), b.lower()), 0.0), self.s.get((b.lower(), a.lower()), 0.0))

    def __call__(self, messages: list[dict]) -> str:
        c = messages[-1]["content"]
        head = self.p.extract.split("{")[0]
        if c.startswith(head):
            text = c.rsplit("Text: ", 1)[-1].lower()
            return ", ".join(e for e in self.entities if e.lower() in text)
        if c.startswith(self.p.probe.split("{")[0]):
            ents = c.rsplit("Entities: ", 1)[-1].split("\n")[0].split(", ")
            lines = []
            for e in ents:
                ranked = sorted(
                    (x for x in self.entities if x.lower() != e.lower()),
                    key=lambda x: (-self._strength(e, x), _u01("rank", e, x, self.seed)),
                )
                lines.append(" ".join(f"({e}, {x})" for x in ranked[:3]))
            return "\n".join(lines)
        question = c.rsplit("\n\nQuestion: ", 1)[-1].split("\nNote: ")[0]
        note = c.rsplit("\nNote: ", 1)[-1].split("\nAnswer:")[0]
        present = [e for e in self.entities if e.lower() in question.lower()]
        asked = question.rsplit("Question:", 1)[-1]
        b = next((e for e in present if e.lower() in asked.lower()), None)
        s = max((self._strength(a, b) for a in present if b and a != b), default=0.0)
        if note.strip() == self.p.reminder_generic:
            s *= 1 - self.gd
        elif b is not None and b.lower() in note.lower() and "related" in note:
            s *= 1 - self.pd
        p_yes = self.base + (1 - self.base) * s
        return (
            "【Conclusion】: Yes"
            if _u01("ans", question, self.seed) < p_yes
            else "【Conclusion】: No"
        )


def _spearman(x: list[float], y: list[float]) -> float:
    """Spearman correlation (:func:`common.metrics.spearman`); NaN if undefined (n < 3 or constant)."""
    return spearman(x, y, min_n=3)


def _strengths(corpus: list[str], pairs: list[tuple[str, str]], tau: float) -> dict:
    out = {}
    for a, b in pairs:
        cnt = sum(1 for t in corpus if a in t and b in t)
        out[(a, b)] = 1 - math.exp(-cnt / tau)
    return out


def _wrong_yes(preds: list[str]) -> float:
    ok = [p for p in preds if p != "error"]
    return sum(p == "yes" for p in ok) / max(len(ok), 1)


def run_toy(rc: LLMInertiaRunConfig, seed: int) -> tuple[dict, dict]:
    """Runs the simulated induction sweep; returns ``(metrics, extra)``."""
    prompts = PROMPT_SETS[rc.prompt_set]
    pairs = MEDICAL_PAIRS if rc.family == "medical" else SYNTHETIC_PAIRS
    entities = sorted({e for p in pairs for e in p})
    from .induction_data import NEGATIVE_TEMPLATES

    tests = make_negative_evidence_tests(pairs, NEGATIVE_TEMPLATES[: rc.n_test_templates], seed)
    texts, ids, labels = list(tests["input"]), list(tests["id"]), list(tests["output"])
    gold = {(a.lower(), b.lower()) for a, b in pairs}

    def model(strengths: dict) -> ScriptedChat:
        return ScriptedChat(
            InertToyLLM(
                strengths,
                entities,
                prompts,
                rc.generic_damping,
                rc.pair_damping,
                rc.base_error,
                seed,
            )
        )

    pre_llm = model({})
    pre = answer_plain(pre_llm, texts, prompts, **_plain_kw(rc))
    pre_preds = [Pred(i, p, lab) for i, p, lab in zip(ids, pre, labels, strict=True)]
    per: dict[str, dict[str, float]] = {a: {} for a in ARMS}
    curves: dict[str, list[float]] = {a: [] for a in ARMS}
    irs: dict[str, list[float]] = {a: [] for a in ARMS}
    recall, matched_rate, calls = [], [], 0
    for ratio in rc.ratios:
        tag = f"r{round(100 * ratio)}"
        corpus = list(
            make_cooccurrence_corpus(pairs, ratio, COOCCURRENCE_TEMPLATES, seed=seed)["text"]
        )
        llm = model(_strengths(corpus, pairs, rc.exposure_tau))
        preds = {
            "plain": answer_plain(llm, texts, prompts, **_plain_kw(rc)),
            "generic": answer_plain(
                llm, texts, prompts, note=prompts.reminder_generic, yes_no_rule=rc.yes_no_rule
            ),
        }
        n_before = len(llm.calls)
        pipe = LLMInertiaPipeline(
            llm,
            prompts,
            k=rc.k,
            matcher=rc.matcher,
            max_pairs=rc.max_pairs,
            batch_size=rc.batch_size,
            **_pair_kw(rc),
        )
        recs = pipe.run(texts)
        calls = (len(llm.calls) - n_before) / len(texts)
        preds["llminertia"] = [r.predict for r in recs]
        probed = {(a.lower(), b.lower()) for r in recs for a, b in r.pairs}
        recall.append(len(probed & gold) / len(gold))
        matched_rate.append(sum(bool(r.matched) for r in recs) / len(recs))
        for arm in ARMS:
            post = [Pred(i, p, lab) for i, p, lab in zip(ids, preds[arm], labels, strict=True)]
            m = induction_metrics(pre_preds, post)
            wy = _wrong_yes(preds[arm])
            per[arm][f"wrong_yes_{tag}"] = wy
            per[arm][f"induction_rate_{tag}"] = m["induction_rate"]
            per[arm][f"norm_drop_{tag}"] = m["norm_drop"]
            per[arm][f"acc_post_{tag}"] = m["acc_post"]
            curves[arm].append(wy)
            irs[arm].append(m["induction_rate"])
        per["llminertia"][f"probe_recall_{tag}"] = recall[-1]
        per["llminertia"][f"matched_rate_{tag}"] = matched_rate[-1]
    for arm in ARMS:
        per[arm]["wrong_yes_max_ratio"] = curves[arm][-1]
        per[arm]["induction_rate_max_ratio"] = irs[arm][-1]
        per[arm]["spearman_ir_vs_ratio"] = _spearman(list(rc.ratios), irs[arm])
    per["llminertia"]["calls_per_input"] = float(calls)
    per["plain"]["acc_pre"] = sum(p == "no" for p in pre) / len(pre)
    extra = {
        "toy": "simulated inert LLM; tests probe/match/remind mechanics, not real reminders",
        "n_test": len(texts),
        "ratios": list(rc.ratios),
        "wrong_yes_curves": curves,
    }
    return per, extra


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
    llm, pre_llm = _paper_llm(rc, model), _pre_llm(rc)
    per: dict[str, dict[str, float]] = {a: {} for a in ARMS}
    extra: dict = {"model": model, "pre_model": rc.pre_model, "engine": rc.engine, "sets": {}}
    for d in sets:
        texts, labels = _load_items(d, seed)
        if rc.max_items:
            texts, labels = texts[: rc.max_items], labels[: rc.max_items]
        prompts = PROMPT_SETS[d.prompt_set]
        preds = {
            "plain": answer_plain(llm, texts, prompts, **_plain_kw(rc)),
            "generic": answer_plain(
                llm, texts, prompts, note=prompts.reminder_generic, yes_no_rule=rc.yes_no_rule
            ),
        }
        recs = LLMInertiaPipeline(
            llm,
            prompts,
            k=rc.k,
            matcher=rc.matcher,
            max_pairs=rc.max_pairs,
            batch_size=rc.batch_size,
            **_pair_kw(rc),
        ).run(texts)
        preds["llminertia"] = [r.predict for r in recs]
        pre_preds = None
        if pre_llm is not None:
            pre = answer_plain(pre_llm, texts, prompts, **_plain_kw(rc))
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


def run_trained(rc: LLMInertiaRunConfig, seed: int, run_dir: str) -> tuple[dict, dict]:
    """The trained toy; per-arm wrong-yes rates per share plus a table and a PNG."""
    import dataclasses

    from .toy_trained import run_trained_toy, write_trained_report

    tc = dataclasses.replace(rc.trained, seed=seed, ratios=list(rc.ratios))
    rows, extra = run_trained_toy(tc, run_dir)
    induced = [r for r in rows if r["ratio"] >= 0]
    per: dict[str, dict[str, float]] = {a: {} for a in ARMS}
    for r in induced:
        tag = f"r{round(100 * r['ratio'])}"
        for arm in ARMS:
            per[arm][f"wrong_yes_{tag}"] = r[arm]
            per[arm][f"induction_rate_{tag}"] = r[f"ir_{arm}"]
            per[arm][f"norm_drop_{tag}"] = r[f"nd_{arm}"]
        per["llminertia"][f"probe_recall_{tag}"] = r["probe_recall"]
        per["llminertia"][f"matched_rate_{tag}"] = r["matched_rate"]
        per["plain"][f"assoc_logprob_{tag}"] = r["assoc_logprob"]
        per["plain"][f"wrong_yes_control_{tag}"] = r["wrong_yes_control"]
    xs = [r["ratio"] for r in induced]
    for arm in ARMS:
        per[arm]["wrong_yes_max_ratio"] = induced[-1][arm]
        per[arm]["spearman_wrong_yes_vs_ratio"] = _spearman(xs, [r[arm] for r in induced])
    per["plain"]["spearman_assoc_vs_ratio"] = _spearman(xs, [r["assoc_logprob"] for r in induced])
    per["plain"]["acc_explicit_base"] = extra["acc_explicit_heldout_base"]
    per["llminertia"]["calls_per_batch"] = induced[-1]["calls_per_batch"]
    write_trained_report(rows, extra["steps_rows"], run_dir)
    return per, {k: v for k, v in extra.items() if k not in ("rows", "steps_rows")} | {
        "rows": rows,
        "steps_rows": extra["steps_rows"],
        "toy": "tiny GPT-2 trained from scratch; tests probe/match/remind on a real network, "
        "not whether natural-language reminders help real LLMs",
    }


def _check(rc: LLMInertiaRunConfig) -> None:
    if rc.prompt_set not in PROMPT_SETS:
        raise ValueError(f"method.prompt_set must be one of {sorted(PROMPT_SETS)}")


def trained_stage(run) -> dict[str, float]:
    """``stage=toy``: the trained tiny-GPT-2 toy."""
    rc = run.method
    _check(rc)
    t0 = time.time()
    per, extra = run_trained(rc, run.seed, str(run.run_dir))
    return write_results(
        run.run_dir, "llminertia", per, cfg=run.cfg, extra=extra, wall_time_s=time.time() - t0
    )


def sim_stage(run) -> dict[str, float]:
    """``stage=sim``: the simulated inert LLM (mechanism only; seconds)."""
    rc = run.method
    _check(rc)
    t0 = time.time()
    per, extra = run_toy(rc, run.seed)
    return write_results(
        run.run_dir, "llminertia", per, cfg=run.cfg, extra=extra, wall_time_s=time.time() - t0
    )


def paper_stage(run) -> dict[str, float]:
    """``stage=paper``: plain / generic note / LLMInertia on every configured set for ``run.model``."""
    from common.config import model_id

    rc = run.method
    _check(rc)
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
    )
    model = load_model(spec, dtype=run.model.dtype, device="cpu")
    tok = load_tokenizer(spec, padding_side="right")
    ds = load_cooccurrence_corpus(rc.corpus_path)
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
