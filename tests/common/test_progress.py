"""common.tracking.progress: silent with ICML26_PROGRESS=0 (CI), shown with 1, off on non-zero ranks."""

from common.tracking import progress


def _run(capsys, monkeypatch, env: dict[str, str]) -> str:
    for k in ("ICML26_PROGRESS", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    capsys.readouterr()
    out = list(progress(range(5), desc="probe-bar", unit="step"))
    assert out == list(range(5))  # the bar never changes what is iterated
    cap = capsys.readouterr()
    return cap.out + cap.err


def test_progress_silent_when_disabled(capsys, monkeypatch):
    assert "probe-bar" not in _run(capsys, monkeypatch, {"ICML26_PROGRESS": "0"})


def test_progress_shown_when_enabled(capsys, monkeypatch):
    text = _run(capsys, monkeypatch, {"ICML26_PROGRESS": "1"})
    assert "probe-bar" in text and "/5" in text


def test_progress_silent_on_other_ranks(capsys, monkeypatch):
    assert "probe-bar" not in _run(capsys, monkeypatch, {"ICML26_PROGRESS": "1", "RANK": "1"})
