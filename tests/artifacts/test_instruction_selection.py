"""The instruction_selection paper presets read their three hub sets as a real run does: the select
and finetune stages call ``datasets.load_dataset`` on the Tulu pool, the LESS warm-up set and the
target task's processed query set (one config per task, split ``dev``), served here from the
samples; every set is read, and checked, before the model loads."""

from __future__ import annotations

import json

import datasets
import pytest

from common.config import validate
from common.registry import compose
from tests.artifact_samples import sample_for

PRESETS = (
    "instruction_selection_paper",
    "instruction_selection_paper_llama32_3b",
    "instruction_selection_paper_qwen3_4b",
)
TASKS = ("bbh", "codex", "gsm8k", "tydiqa", "mmlu_pro")


class ModelLoads(Exception):
    """Raised where the stage would load the model: everything before it has run."""


def _serve(monkeypatch, calls: list) -> None:
    def fake(hub_id, config=None, split=None, **kw):
        calls.append((hub_id, config, split))
        s = sample_for(hub_id)
        rel = s["files"][split if config is None else f"{config}/{split}"]
        lines = (s["dir"] / rel).read_text().splitlines()
        return datasets.Dataset.from_list([json.loads(ln) for ln in lines])

    monkeypatch.setattr(datasets, "load_dataset", fake)


def _stop_at_model(monkeypatch) -> None:
    from methods.instruction_selection import paper

    def stop(run):
        raise ModelLoads

    monkeypatch.setattr(paper, "_load", stop)


def _run(preset: str, *extra: str):
    """The preset at one of its paper stages (``select`` unless ``extra`` names another)."""
    return validate(compose([f"experiment={preset}", "method.stage=select", *extra]))


@pytest.mark.parametrize("preset", PRESETS)
def test_select_reads_pool_warmup_and_queries_before_the_model(preset, monkeypatch, tmp_path):
    from methods.instruction_selection.paper import select_stage

    run = _run(preset, f"run_dir={tmp_path}")
    calls: list = []
    _serve(monkeypatch, calls)
    _stop_at_model(monkeypatch)
    with pytest.raises(ModelLoads):
        select_stage(run)
    assert calls == [
        ("Harvard-DCML/tulu-v2-197K-processed", None, "train"),
        ("Harvard-DCML/targeted-query-set-processed", "bbh", "dev"),
        ("Harvard-DCML/tulu-v2-10K-warmup-processed", None, "train"),
    ]


def test_pool_and_warmup_rows_as_the_method_uses_them(monkeypatch):
    from methods.instruction_selection.paper_data import load_pool

    _serve(monkeypatch, [])
    run = _run(PRESETS[0])
    pool = load_pool(run.method.pool.hub_id, run.method.pool.split)
    assert [r["id"] for r in pool] == ["flan_v2_0", "cot_17", "sharegpt_Ab3kX9q_0", "oasst1_4021"]
    assert pool[0] == {
        "id": "flan_v2_0",
        "dataset": "flan_v2",
        "messages": [
            {"role": "user", "content": "Translate to French:\n\nThe meeting starts at noon."},
            {"role": "assistant", "content": "La réunion commence à midi."},
        ],
    }
    assert [m["role"] for m in pool[2]["messages"]] == ["user", "assistant"] * 2
    assert pool[3]["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}
    warm = load_pool(run.method.warmup_data.hub_id, run.method.warmup_data.split)
    assert [r["dataset"] for r in warm] == ["gpt4_alpaca", "code_alpaca"]


@pytest.mark.parametrize("task", TASKS)
def test_every_target_tasks_query_set(task, monkeypatch):
    from methods.instruction_selection.paper_data import load_queries

    calls: list = []
    _serve(monkeypatch, calls)
    q = _run(PRESETS[0], f"method.queries.config={task}").method.queries
    rows = load_queries(q.hub_id, q.config, q.split, limit=q.limit)
    assert calls == [("Harvard-DCML/targeted-query-set-processed", task, "dev")]
    assert rows and all(sorted(r) == ["labels", "prompts"] for r in rows)
    assert all(
        r["prompts"].startswith("<|user|>\n") and "<|assistant|>\n" in r["prompts"] for r in rows
    )
    assert all(r["labels"].strip() for r in rows)


def test_finetune_reads_the_subset_pool_rows_and_queries_before_the_model(monkeypatch, tmp_path):
    from methods.instruction_selection.paper import finetune_stage

    subset = tmp_path / "less_rr_B2.json"
    subset.write_text(json.dumps(["cot_17", "oasst1_4021"]))
    run = _run(PRESETS[0], "method.stage=finetune", f"method.subset_file={subset}")
    calls: list = []
    _serve(monkeypatch, calls)
    _stop_at_model(monkeypatch)
    with pytest.raises(ModelLoads):
        finetune_stage(run)
    assert [c[0] for c in calls] == [
        "Harvard-DCML/tulu-v2-197K-processed",
        "Harvard-DCML/targeted-query-set-processed",
    ]


def test_a_pool_row_without_messages_stops_on_that_row(monkeypatch):
    from methods.instruction_selection.paper_data import load_pool

    rows = [{"id": "a", "messages": [{"role": "user", "content": "hi"}]}, {"id": "b"}]
    rows += [{"id": f"x{i}"} for i in range(1000)]
    seen: list = []

    def fake(*a, **k):
        for r in rows:
            seen.append(r["id"])
            yield r

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: fake())
    with pytest.raises(ValueError, match=r"pool row 1 needs 'id' and 'messages'"):
        load_pool("Harvard-DCML/tulu-v2-197K-processed")
    assert seen == ["a", "b"]  # stopped on the bad row, not after the whole set
