"""The tour's summary (``make demo``): every method's ``TOY_RESULT`` matches its doc, and the verdicts.

``TOY_RESULT`` (``common.demo.ToyResult``) in each ``methods/<slug>/run.py`` is the documented
full-toy result of the ``HEADLINE`` pair; both its numbers and its command must appear in
``docs/methods/<slug>.md``, so the table and the doc cannot drift apart. The verdict logic of
``scripts.demo.summarize`` is checked on hand-made rows.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys

import pytest

from common.demo import ToyResult, direction
from common.registry import REPO_ROOT, discover_methods, get_method
from scripts.demo import BWRAP_SKIP, captured, fresh_dir, summarize, table
from tests.markers import path_without

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


def _toy(verdict="effect", hib=True, method=0.8, baseline=0.2, note="", minutes=None):
    note = note or ("the claim does not show" if verdict != "effect" else "")
    return ToyResult(method, baseline, hib, verdict, "icml26 experiment=x_toy", note, minutes)


@pytest.mark.parametrize(
    ("toy", "value", "base", "where", "status"),
    [
        (_toy(), 0.6, 0.3, "better", "effect shown"),
        (_toy(minutes=9.2), 0.3, 0.6, "worse", "effect needs the full toy (9.2 min): `icml26"),
        (_toy(), 0.5, 0.5, "tie", "effect needs the full toy: `icml26"),  # a tie is not an effect
        # lower is better: a lower loss is better, a higher one is not
        (_toy(hib=False, method=3.7, baseline=4.0), 4.1, 4.5, "better", "effect shown"),
        (_toy(hib=False, method=3.7, baseline=4.0), 4.5, 4.1, "worse", "effect needs the full"),
        # the toy itself loses: the row names the doc's verdict whatever the demo shows, and the
        # direction is the demo's own (a losing method reads "worse", never "agrees")
        (_toy("negative", method=0.2, baseline=0.3), 0.1, 0.4, "worse", "negative toy (doc)"),
        (_toy("negative", method=0.2, baseline=0.3), 0.4, 0.1, "better", "negative toy (doc)"),
        (_toy("inconclusive", method=0.59, baseline=0.575), 1.0, 1.0, "tie", "inconclusive toy"),
    ],
)
def test_summarize_direction_and_status(toy, value, base, where, status):
    row = summarize("m", "m/acc", value, "b/acc", base, toy, 1.0)
    assert row["direction"] == where
    assert row["status"].startswith(status)
    assert row["effect_shown"] is (
        {"better": True}.get(where, False) if toy.verdict == "effect" else None
    )
    if toy.verdict != "effect":
        assert toy.note in row["status"]
    assert row["toy_value"] == toy.method and row["command"] == toy.command


def test_summarize_error_missing_and_skipped_rows():
    err = summarize("m", "m/acc", None, "b/acc", None, _toy(), 2.0, "RuntimeError: boom")
    assert err["status"] == "error" and err["direction"] is None
    missing = summarize("m", "m/acc", 0.4, "b/acc", None, _toy(), 2.0)
    assert missing["status"] == "missing metric" and missing["direction"] is None
    skipped = summarize("m", "m/acc", None, "b/acc", None, _toy(), 0.1, skipped=BWRAP_SKIP)
    assert skipped["status"] == BWRAP_SKIP and not skipped["error"]
    text = table([err, missing, skipped])
    assert "FAILED: RuntimeError: boom" in text and BWRAP_SKIP in text
    assert text.count("\n") == 4  # header, rule, three rows


def test_table_direction_column_reads_in_the_metric_good_direction():
    row = summarize(
        "kore", "kore/hars", 80.0, "lora/hars", 40.0, _toy(method=93.1, baseline=50.6), 3
    )
    line = table([row]).splitlines()[-1]
    assert "80 vs 40" in line and "93.1 vs 50.6 (effect)" in line
    assert "| method better |" in line and "| effect shown |" in line
    # a loss that is lower for the method is "better" even though its number is smaller
    low = summarize("q", "q/loss", 2.5, "u/loss", 2.6, _toy(hib=False, method=2.4, baseline=2.6), 1)
    assert "| method better |" in table([low])
    # the method losing on a negative toy never reads as agreement
    neg = summarize(
        "s", "s/acc", 0.37, "l/acc", 0.57, _toy("negative", method=0.88, baseline=1.0), 1
    )
    line = table([neg]).splitlines()[-1]
    assert "| method worse |" in line and "negative toy (doc)" in line and "yes" not in line
    tie = summarize("w", "w/acc", 0.0, "r/acc", 0.0, _toy(), 1)
    assert "cannot separate (equal)" in table([tie])
    shared = summarize("common", "reward", 0.1, "first", 0.4, None, 1.0)  # no doc: must improve
    assert shared["effect_shown"] is False and shared["toy_value"] is None


def test_fresh_dir_moves_the_previous_run_aside(tmp_path):
    root = tmp_path / "demo"
    assert fresh_dir(root) is None and root.is_dir()
    (root / "old.txt").write_text("1")
    moved = fresh_dir(root)
    assert moved == tmp_path / "demo.previous" and (moved / "old.txt").read_text() == "1"
    assert list(root.iterdir()) == []
    (root / "new.txt").write_text("2")
    fresh_dir(root)  # the older .previous is replaced, the last run kept
    assert sorted(p.name for p in (tmp_path / "demo.previous").iterdir()) == ["new.txt"]


def test_captured_sends_every_writer_to_the_log(tmp_path, capfd):
    import subprocess

    log = tmp_path / "x" / "demo.log"
    with captured(log):
        print("py-stdout")
        print("py-stderr", file=sys.stderr)
        os.write(1, b"fd1\n")
        os.write(2, b"fd2\n")
        subprocess.run([sys.executable, "-c", "print('child')"], check=True)
    print("after")
    out, err = capfd.readouterr()
    text = log.read_text()
    for needle in ("py-stdout", "py-stderr", "fd1", "fd2", "child"):
        assert needle in text and needle not in out + err
    assert "after" in out and "after" not in text


def test_demo_console_is_demo_lines_and_table(tmp_path, monkeypatch, capfd):
    """A one-method tour: the console holds only [demo] lines and the table; the rest is in the log."""
    import scripts.demo as demo

    monkeypatch.setattr(demo, "RESULTS", tmp_path / "demo")
    assert demo.main(["maxrl"]) == 0
    out, err = capfd.readouterr()
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert lines[0].startswith("[demo] maxrl (1/1)") and lines[1].startswith("[demo] maxrl: ")
    assert all(ln.startswith(("[demo]", "|", "total ")) for ln in lines), out
    assert err == ""
    assert (tmp_path / "demo" / "demo.md").exists() and (
        tmp_path / "demo" / "maxrl" / "demo.log"
    ).exists()


def test_demo_skips_sacopt_without_bubblewrap(tmp_path, monkeypatch, capfd):
    """bwrap hidden from PATH: sacopt's row says it was skipped and why; the tour still exits 0."""
    import scripts.demo as demo
    from common import sandbox

    monkeypatch.setenv("PATH", path_without("bwrap", tmp_path / "shadow"))
    assert shutil.which("bwrap") is None
    sandbox._probe.cache_clear()
    monkeypatch.setattr(demo, "RESULTS", tmp_path / "demo")
    try:
        assert demo.main(["sacopt"]) == 0
    finally:
        sandbox._probe.cache_clear()
    out, _ = capfd.readouterr()
    row = json.loads((tmp_path / "demo" / "demo.json").read_text())["rows"][0]
    assert row["status"] == BWRAP_SKIP and not row["error"]
    assert "[demo] sacopt: " in out and BWRAP_SKIP in out
    assert "Traceback" not in out


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


@pytest.mark.slow
def test_sandbox_tests_skip_with_the_reason_without_bubblewrap(tmp_path):
    """On a machine without bwrap (not root), a sandbox test skips and says why; it does not fail."""
    import subprocess

    env = {**os.environ, "PATH": path_without("bwrap", tmp_path / "shadow")}
    test = "tests/methods/test_sacopt.py::test_sandbox_kills_an_infinite_loop"
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", test],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:]
    assert "1 skipped" in r.stdout and "bubblewrap (`bwrap`) is not installed" in r.stdout
    assert "apt-get install bubblewrap" in r.stdout
