"""epicache_paper(_llama) read the three LongConvQA benchmarks in their official layouts: LoCoMo's
``locomo10.json``, REALTALK's per-conversation files, and LongMemEval's custom histories both as the
builder's JSON and as the converter's ``torch.save`` ``.pt``."""

from __future__ import annotations

import pytest

from common.config import dataset_source, validate
from common.registry import compose
from tests.artifact_samples import sample_for


class _Pickled:
    """An arbitrary class instance inside a ``.pt`` file."""


def _conversations(overrides: list[str]):
    from methods.epicache.data import BENCHMARK_LOADERS

    run = validate(compose([*overrides, "method.stage=eval"]))
    (spec,) = run.benchmark.sets.values()
    return BENCHMARK_LOADERS[run.benchmark.format](dataset_source(spec))


def _path(artifact_id: str, split: str = "test") -> str:
    s = sample_for(artifact_id)
    return str(s["dir"] / s["files"][split])


def test_realtalk_per_conversation_files():
    folder = sample_for("format:realtalk")["dir"] / "data"
    conv, other = _conversations(
        ["experiment=epicache_paper", f"benchmark.sets.realtalk.path={folder}"]
    )
    assert (conv.conv_id, other.conv_id) == ("Chat_1_Emi_Elise", "Chat_2_Kate_Paola")
    assert conv.header == "A conversation between Emi and Elise over several dated sessions."
    assert [u.session_id for u in conv.utterances] == ["session_1"] * 3 + ["session_2"]
    assert (
        conv.utterances[0].text == "Hi Elise! I just got back from my trip to Kyoto."
    )  # clean_text
    assert conv.utterances[0].timestamp == "09.01.2023, 14:32:10"
    assert "a red temple surrounded by trees" in conv.utterances[2].text  # blip_caption kept
    assert [q.answer for q in conv.qa] == ["Kyoto", "10 January 2023"]  # no-answer QA skipped
    assert [q.category for q in conv.qa] == ["1", "2"]
    assert conv.qa[0].question.endswith("Question: Where did Emi travel before 9 January 2023?")


def test_locomo10():
    path = _path("format:locomo10")
    (conv,) = _conversations(
        ["experiment=epicache_paper", "benchmark=locomo", f"benchmark.sets.locomo10.path={path}"]
    )
    assert conv.conv_id == "conv-26" and len(conv.utterances) == 6
    assert conv.utterances[2].text.endswith(
        "and shared a photo of a group of people sitting in a circle."
    )
    assert conv.utterances[4].timestamp == "1:14 pm on 25 May, 2023"
    # category 5 (adversarial, no `answer`) dropped; category 3 keeps the first alternative; ints as str
    assert [(q.category, q.answer) for q in conv.qa] == [
        ("temporal", "7 May 2023"),
        ("open_domain", "A sunset"),
        ("single_hop", "3"),
        ("multi_hop", "Sweden"),
    ]
    assert "Use the DATE" in conv.qa[0].question and "Use the DATE" not in conv.qa[1].question


@pytest.mark.parametrize("artifact", ["format:longmemeval_json", "format:longmemeval_pt"])
def test_longmemeval_builder_json_and_converter_pt(artifact):
    path = _path(artifact)
    (conv,) = _conversations(
        ["experiment=epicache_paper_llama", f"benchmark.sets.longmemeval.path={path}"]
    )
    assert conv.conv_id == "conv_000"
    assert [u.speaker for u in conv.utterances] == ["user", "assistant", "user", "assistant"]
    # multi-line turns are kept whole (blank lines inside a turn included)
    assert conv.utterances[0].text == "I just adopted a cat named Luna.\nShe is two years old."
    assert conv.utterances[1].text == (
        "Congratulations!\n\nHere are tips:\n1. Keep her indoors at first.\n2. Give her a quiet room."
    )
    assert conv.utterances[3].text == "Lyon is lovely."  # the session's closing blank line trimmed
    assert [u.session_id for u in conv.utterances][2] == "evidence_answer_9a0c_old"
    assert conv.utterances[2].timestamp == "2023/06/01 (Thu) 18:40"
    assert [(q.answer, q.category) for q in conv.qa] == [
        ("Luna", "single_hop"),
        ("Lyon", "knowledge_update"),
    ]
    assert "What is the name of my cat?" in conv.qa[0].question


def test_longmemeval_pt_is_loaded_without_arbitrary_unpickling(tmp_path):
    import torch

    from methods.epicache.data import load_longmemeval

    bad = tmp_path / "bad.pt"  # any pickled object other than plain containers must be refused
    torch.save([{"prompts": ["ctx"], "ground_truth": [], "obj": _Pickled()}], bad)
    with pytest.raises(Exception, match="[Ww]eights only load failed|Unsupported"):
        load_longmemeval(bad)


def test_longmemeval_length_mismatch_is_an_error(tmp_path):
    import json

    from methods.epicache.data import load_longmemeval

    f = tmp_path / "x.json"
    f.write_text(
        json.dumps(
            [{"prompts": ["User: hi", "q1", "q2"], "ground_truth": ["a"], "task_types": [0]}]
        )
    )
    with pytest.raises(ValueError, match="2 questions .* 1 ground_truth"):
        load_longmemeval(f)


@pytest.mark.parametrize("preset", ["epicache_paper", "epicache_paper_llama"])
def test_profile_sample_is_the_booksum_chapter(monkeypatch, preset):
    import json

    import datasets

    from methods.epicache.paper import profile_text

    s = sample_for("kmfoda/booksum")
    calls = []

    def fake(hub_id, split=None, **kw):
        calls.append((hub_id, split))
        rows = (s["dir"] / s["files"][split]).read_text().splitlines()
        return [json.loads(x) for x in rows]

    monkeypatch.setattr(datasets, "load_dataset", fake)
    run = validate(compose([f"experiment={preset}", "method.stage=profile"]))
    text = profile_text(run.method.profile)
    assert calls == [("kmfoda/booksum", "test")]
    assert text.startswith("CHAPTER I.\n\nMIRIAM, HILDA")
