"""Every hub data set a paper preset reads has a real-format sample in ``tests/fixtures/artifacts``.

The list of what a preset reads is the one ``icml26 check`` prints (:func:`common.artifacts.list_artifacts`
over every stage of the preset), so a new preset, benchmark group or ``DatasetSpec`` default that names a
hub data set without a sample fails here; the per-method contract tests in this folder then load each
sample through the preset's own code path. The sets that lm-evaluation-harness itself loads for a
task name (swordsman's ``eval.engine=lm_eval``: :data:`common.artifact_needs.LM_EVAL_TASK_DATA`) are read
by the harness's task files, not by our code, and are not required to have a sample (listed under the
``method.eval.tasks.<task>`` key); an id that our own code also reads still needs one.
"""

from __future__ import annotations

import functools

import pytest

from common.artifacts import list_artifacts
from common.artifacts_cli import compose_for_check
from common.registry import CONFIG_DIR
from tests.artifact_samples import samples

PRESETS = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*_paper*.yaml"))


@functools.cache
def _hub_sets(preset: str) -> tuple[str, ...]:
    cfg = compose_for_check([f"experiment={preset}"])
    return tuple(
        sorted(
            {
                a.name
                for a in list_artifacts(cfg)
                if a.kind == "dataset"
                and not a.local
                and not a.key.startswith("method.eval.tasks.")
            }
        )
    )


@pytest.mark.parametrize("preset", PRESETS)
def test_every_hub_data_set_of_a_paper_preset_has_a_sample(preset):
    have = {s["id"] for s in samples().values()}
    missing = [name for name in _hub_sets(preset) if name not in have]
    assert not missing, (
        f"{preset} reads {missing} with no real-format sample: add tests/fixtures/artifacts/<name>/ "
        "(see tests/artifact_samples.py) and load it in tests/artifacts/test_<slug>.py"
    )


def test_the_check_lists_hub_data_sets_for_the_math_presets():
    """Guards the test above against an empty listing (it would pass vacuously)."""
    assert "BytedTsinghua-SIA/DAPO-Math-17k" in _hub_sets("apo_paper")
    assert "HuggingFaceH4/MATH-500" in _hub_sets("maxrl_paper")


BENCHMARKS = sorted(p.stem for p in (CONFIG_DIR / "benchmark").glob("*.yaml"))


@pytest.mark.parametrize("group", BENCHMARKS)
def test_every_hub_set_of_a_benchmark_group_has_a_sample(group):
    """Also the groups no preset selects by default (a swap such as ``benchmark=math6``)."""
    from common.registry import compose

    sets = compose([f"benchmark={group}"]).benchmark.sets
    have = {s["id"] for s in samples().values()}
    missing = sorted({s.hub_id for s in sets.values() if s.hub_id and s.hub_id not in have})
    assert not missing, f"benchmark={group} names {missing} with no real-format sample"
