"""Tests for common/tracking.py's plot helpers: Agg pyplot, save_plot writes a PNG and closes it."""

from __future__ import annotations

from common.tracking import pyplot, save_plot


def test_pyplot_is_agg_and_save_plot_writes_and_closes(tmp_path):
    plt = pyplot()
    assert plt.get_backend().lower() == "agg"
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    out = save_plot(fig, tmp_path / "sub" / "curve.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # a PNG, in a folder save_plot created
    assert not plt.fignum_exists(fig.number)  # closed: toys drawing many plots do not leak figures
