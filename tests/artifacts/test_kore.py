"""kore_paper(_qwen) read KORE-74K's training JSON (and a calibration file in the same LLaVA record
layout) through ``check_records`` before the model loads; kore_evoke reads EVOKE's
``evoke_evaluation_data.jsonl`` through ``load_questions`` and scores answers keyed by its integer
``question_id``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.config import validate
from common.registry import compose
from tests.artifact_samples import sample_for

KORE74K = sample_for("kailinjiang/KORE-74K")
EVOKE = sample_for("kailinjiang/EVOKE")


def _paper_cfg(preset: str, *extra: str):
    train = KORE74K["dir"] / KORE74K["files"]["train"]
    over = [
        f"method.paper.data_path={train}",
        f"method.paper.calib_path={train}",
        f"method.paper.image_root={KORE74K['dir'] / 'images'}",
    ]
    return validate(compose([f"experiment={preset}", *over, *extra])).method.paper


@pytest.mark.parametrize("preset", ["kore_paper", "kore_paper_qwen"])
def test_training_records_load_through_the_preset(preset):
    from methods.kore.paper import check_records

    cfg = _paper_cfg(preset)
    recs = check_records(cfg.data_path, cfg.image_root, "data_path")
    assert [r["id"] for r in recs] == [1, 2]  # integer ids, as released
    first = recs[0]["conversations"]
    assert [c["from"] for c in first] == ["human", "gpt", "human", "gpt"]  # a dialogue record
    assert first[0]["value"].startswith("<image>\n") and "<image>" not in first[2]["value"]
    assert recs[1]["conversations"][1]["value"] == "Ten feet"


def test_a_missing_image_or_broken_turns_stop_before_the_model(tmp_path):
    from methods.kore.paper import check_records

    cfg = _paper_cfg("kore_paper")
    with pytest.raises(FileNotFoundError, match=r"data_path record 0: image .*not under"):
        check_records(cfg.data_path, str(tmp_path), "data_path")
    bad = tmp_path / "bad.json"
    recs = json.loads(Path(cfg.data_path).read_text())
    recs[1]["conversations"] = recs[1]["conversations"][::-1]
    bad.write_text(json.dumps(recs))
    with pytest.raises(ValueError, match=r"calib_path record 1: conversations must alternate"):
        check_records(str(bad), cfg.image_root, "calib_path")


def test_evoke_questions_load_through_the_preset():
    from methods.kore.evoke import load_questions, score_answers

    path = EVOKE["dir"] / EVOKE["files"]["test"]
    run = validate(compose(["experiment=kore_evoke", f"benchmark.sets.evoke.path={path}"]))
    spec = run.benchmark.sets["evoke"]
    questions, gold = load_questions(spec.path, run.method.evoke.gold_file)
    assert [q["question_id"] for q in questions] == [3, 5]
    assert gold == {"3": "Tesla", "5": "Alba Berlin"}  # the line's own 'answer'
    assert questions[0]["text"].endswith("Answer the question using a single word or phrase.")
    for q in questions:  # image paths are relative to the EVOKE image folder
        assert (EVOKE["dir"] / q["image"]).is_file()
    # answers as model_vqa_loader writes them: integer question_id, prediction in 'text'
    answers = [{"question_id": 3, "text": "Tesla"}, {"question_id": 5, "text": "Bayern"}]
    res = score_answers(answers, gold)
    assert res["n"] == 2.0 and 0 < res["cem"] < 100
