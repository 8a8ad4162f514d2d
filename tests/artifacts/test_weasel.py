"""weasel_paper(_qwen3_8b) read AgentTrek converted to AgentLab chat records (``method.data_path``)
as the official ``prepare_scores.py`` does: a JSON list or JSON lines of ``{"messages": [system,
user, assistant]}`` steps, the user prompt in GenericAgent form; the ``sft`` stage reads the
subset ``select`` wrote. The scorer is the fast ``jaccard`` stand-in (roberta-large is not here)."""

from __future__ import annotations

import json

import pytest

from common.config import validate
from common.registry import compose
from tests.artifact_samples import sample_for

GOAL_A = "Find the opening hours of the Lyon city library on its website."
GOAL_B = "Add a 10 m garden hose to the shopping cart."


def _sample_path():
    s = sample_for("format:agenttrek_agentlab")
    return s["dir"] / s["files"]["train"]


def _run(preset, data_path, tmp_path, *overrides):
    return validate(
        compose(
            [
                f"experiment={preset}",
                "method.stage=select",
                f"method.data_path={data_path}",
                f"method.output_path={tmp_path / 'subset.json'}",
                "method.scorer=jaccard",
                f"run_dir={tmp_path}",
                *overrides,
            ]
        )
    )


def test_sample_parses_into_the_fields_the_selection_scores():
    from methods.weasel.data import load_agentlab_file, parse_records, segment_by_goal

    steps, counts = parse_records(load_agentlab_file(_sample_path()))
    assert counts == {"skipped_no_message": 0, "missing_goal": 0}
    assert [s.goal for s in steps] == [GOAL_A] * 4 + [GOAL_B] * 2 + [GOAL_A]
    assert [s.action for s in steps][:2] == ["click('a21')", "click('b5')"]
    assert steps[3].action.startswith("send_msg_to_user('Tuesday to Saturday")
    # AXTree: the note and the tree, up to the next section (## Focused element: is not in it)
    assert steps[1].axtree.startswith("Note: [bid] is the unique alpha-numeric identifier")
    assert steps[1].axtree.endswith("[b7] link 'Bibliothèque du 2e'")
    # obs_history: the observation up to '# Action space:', interaction history included
    assert "## step 0\n<think>\nOpen the opening-hours page." in steps[1].obs_history
    assert "# Action space:" not in steps[1].obs_history
    assert steps[0].assistant.startswith("<think>\nI am on the library home page.")
    # one goal, two non-contiguous runs: two trajectories (official split_contiguous)
    assert [t.index for t in segment_by_goal(steps)] == [[0, 1, 2, 3], [4, 5], [6]]


@pytest.mark.parametrize("preset", ["weasel_paper", "weasel_paper_qwen3_8b"])
def test_select_stage_reads_the_sample_and_writes_the_subset(tmp_path, preset):
    from methods.weasel.paper import select_stage

    run = _run(preset, _sample_path(), tmp_path)
    metrics = select_stage(run)
    # budget 3 per trajectory: 3 of [0..3], both of [4, 5], the lone [6]
    assert (metrics["weasel/n_input"], metrics["weasel/n_selected"]) == (7.0, 6.0)
    subset = json.loads((tmp_path / "subset.json").read_text())
    assert len(subset) == 6
    assert all(
        [m["role"] for m in r["messages"]] == ["system", "user", "assistant"] for r in subset
    )
    sidecar = json.loads((tmp_path / "subset.scores.json").read_text())
    assert [t["index"] for t in sidecar["trajectories"]] == [[0, 1, 2, 3], [4, 5], [6]]


def test_json_lines_are_read_like_the_json_list(tmp_path):
    from methods.weasel.data import load_agentlab_file

    rows = json.loads(_sample_path().read_text())
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    assert load_agentlab_file(jsonl) == rows


def test_bad_records_fail_before_the_scorer_loads(tmp_path, monkeypatch):
    """ShareGPT rows or a prompt without '## Goal:' stop the stage before any model loads."""
    from methods.weasel import paper

    def no_scorer(rc):
        raise AssertionError("the scorer must not load before the records are checked")

    monkeypatch.setattr(paper, "similarity_for", no_scorer)
    rows = json.loads(_sample_path().read_text())
    share = tmp_path / "sharegpt.json"
    share.write_text(json.dumps([rows[0], {"conversations": [{"from": "human", "value": "hi"}]}]))
    with pytest.raises(ValueError, match=r"record 1: no 'messages' list.*Expected a JSON list"):
        paper.select_stage(_run("weasel_paper", share, tmp_path))
    no_goal = tmp_path / "no_goal.json"
    rows[2]["messages"][1]["content"] = rows[2]["messages"][1]["content"].replace("## Goal:", "")
    no_goal.write_text(json.dumps(rows))
    with pytest.raises(ValueError, match="record 2 has no '## Goal:' section"):
        paper.select_stage(_run("weasel_paper", no_goal, tmp_path))


def test_assistant_turn_is_the_last_one_as_in_the_official_loader():
    from methods.weasel.data import parse_records

    rows = json.loads(_sample_path().read_text())
    extra = {
        "role": "assistant",
        "content": "<think>\nlater\n</think>\n<action>\nclick('a22')\n</action>",
    }
    rows[0]["messages"].append(extra)
    steps, _ = parse_records(rows)
    assert steps[0].action == "click('a22')"


@pytest.mark.slow  # imports trl
def test_sft_stage_reads_the_selected_subset_as_prompt_completion(tmp_path):
    from methods.weasel.paper import select_stage
    from methods.weasel.sft import load_agentlab_records, to_prompt_completion

    run = _run("weasel_paper", _sample_path(), tmp_path)
    select_stage(run)
    pairs = to_prompt_completion(load_agentlab_records(tmp_path / "subset.json"))
    assert len(pairs) == 6
    assert [[m["role"] for m in p["prompt"]] for p in pairs] == [["system", "user"]] * 6
    assert all(p["completion"][0]["content"].startswith("<think>") for p in pairs)
