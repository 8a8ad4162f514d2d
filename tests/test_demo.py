"""The tour's summary (``make demo``): every method's ``TOY_RESULT`` matches its doc, and the verdicts.

``TOY_RESULT`` (``common.demo.ToyResult``) in each ``methods/<slug>/run.py`` is the documented
full-toy result of the ``HEADLINE`` pair; both its numbers and its command must appear in
``docs/methods/<slug>.md``, so the table and the doc cannot drift apart. The verdict logic of
``scripts.demo.summarize`` is checked on hand-made rows.
"""

from __future__ import annotations

import re

import pytest

from common.demo import ToyResult, direction
from common.registry import REPO_ROOT, discover_methods, get_method
from scripts.demo import summarize, table

SLUGS = discover_methods()
_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")


def _numbers(text: str) -> list[float]:
    out = []
    for tok in _NUMBER.findall(text):
        try:
            out.append(float(tok.replace(",", "")))
        except ValueError:
            continue
    return out


@pytest.mark.parametrize("slug", SLUGS)
def test_toy_result_is_the_documented_one(slug):
    module = get_method(slug)
    toy = getattr(module, "TOY_RESULT", None)
    assert isinstance(toy, ToyResult), (
        f"methods/{slug}/run.py must define TOY_RESULT = ToyResult(...)"
    )
    doc = (REPO_ROOT / "docs" / "methods" / f"{slug}.md").read_text()
    numbers = _numbers(doc)
    for name in ("method", "baseline"):
        value = getattr(toy, name)
        assert any(abs(n - value) <= 1e-9 for n in numbers), (
            f"TOY_RESULT.{name} = {value} of {slug} does not appear in docs/methods/{slug}.md"
        )
    assert toy.command in doc, (
        f"TOY_RESULT.command {toy.command!r} is not in docs/methods/{slug}.md"
    )
    assert toy.command.startswith(f"icml26 experiment={slug}_toy"), toy.command


def test_numbers_parser_reads_table_cells():
    assert _numbers("| kore | 93.1 ± 0.7 | 1,782 s | 0.000 | −0.55 |") == [
        93.1,
        0.7,
        1782.0,
        0.0,
        0.55,
    ]
    assert 3.0 not in _numbers("v3.1 and x3")  # a digit glued to a word is not a number


def _toy(verdict="effect", hib=True, method=0.8, baseline=0.2, note=""):
    note = note or ("the claim does not show" if verdict != "effect" else "")
    return ToyResult(method, baseline, hib, verdict, "icml26 experiment=x_toy", note)


@pytest.mark.parametrize(
    ("toy", "value", "base", "agrees", "status"),
    [
        (_toy(), 0.6, 0.3, True, "effect shown"),
        (_toy(), 0.3, 0.6, False, "effect not shown at demo size"),
        (_toy(), 0.5, 0.5, False, "effect not shown at demo size"),  # a tie is not an effect
        # lower is better: a lower loss agrees, a higher one does not
        (_toy(hib=False, method=3.7, baseline=4.0), 4.1, 4.5, True, "effect shown"),
        (
            _toy(hib=False, method=3.7, baseline=4.0),
            4.5,
            4.1,
            False,
            "effect not shown at demo size",
        ),
        # the toy itself loses: a losing demo agrees, and the row names the doc's verdict
        (_toy("negative", method=0.2, baseline=0.3), 0.1, 0.4, True, "negative toy (doc)"),
        (_toy("negative", method=0.2, baseline=0.3), 0.4, 0.1, False, "negative toy (doc)"),
        (_toy("inconclusive", method=0.59, baseline=0.575), 1.0, 1.0, False, "inconclusive toy"),
    ],
)
def test_summarize_verdicts(toy, value, base, agrees, status):
    row = summarize("m", "m/acc", value, "b/acc", base, toy, 1.0)
    assert row["agrees"] is agrees
    assert row["status"].startswith(status)
    if toy.verdict != "effect":
        assert toy.note in row["status"]
    assert row["toy_value"] == toy.method and row["command"] == toy.command


def test_summarize_error_and_missing_rows():
    err = summarize("m", "m/acc", None, "b/acc", None, _toy(), 2.0, "RuntimeError: boom")
    assert err["status"] == "error" and err["agrees"] is None
    missing = summarize("m", "m/acc", 0.4, "b/acc", None, _toy(), 2.0)
    assert missing["status"] == "missing metric" and missing["agrees"] is None
    text = table([err, missing])
    assert "FAILED: RuntimeError: boom" in text
    assert text.count("\n") == 3  # header, rule, two rows


def test_table_row_shows_demo_toy_command_and_agreement():
    row = summarize(
        "kore", "kore/hars", 80.0, "lora/hars", 40.0, _toy(method=93.1, baseline=50.6), 3
    )
    line = table([row]).splitlines()[-1]
    assert "80 vs 40" in line and "93.1 vs 50.6" in line
    assert "| yes |" in line and "`icml26 experiment=x_toy`" in line
    shared = summarize("common", "reward", 0.1, "first", 0.4, None, 1.0)  # no doc: must improve
    assert shared["agrees"] is False and shared["toy_value"] is None


def test_direction_and_toy_result_checks():
    assert direction(0.5, 0.4, True) == "better" and direction(0.5, 0.4, False) == "worse"
    assert direction(1.0, 1.0 + 1e-9, True) == "tie"
    with pytest.raises(ValueError, match="verdict"):
        ToyResult(1.0, 0.5, True, "maybe", "icml26 experiment=x_toy")
    with pytest.raises(ValueError, match="note"):
        ToyResult(1.0, 0.5, True, "negative", "icml26 experiment=x_toy")
    with pytest.raises(ValueError, match="method"):
        ToyResult(float("nan"), 0.5, True, "effect", "icml26 experiment=x_toy")
    with pytest.raises(ValueError, match="command"):
        ToyResult(1.0, 0.5, True, "effect", "python run.py")
    with pytest.raises(ValueError, match="higher_is_better"):
        ToyResult(1.0, 0.5, 1, "effect", "icml26 experiment=x_toy")
