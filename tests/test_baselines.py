"""The baseline comparison (tests/baselines.py) names every file that differs or is missing."""

from __future__ import annotations

from tests.baselines import TODAY, compare, main, masked


def test_compare_names_changed_added_and_removed_files(tmp_path, capsys):
    before, after = tmp_path / "before", tmp_path / "after"
    for folder in (before, after):
        (folder / "store").mkdir(parents=True)
        (folder / "store" / "same.csv").write_text("a\n1\n")
    (before / "store" / "changed.csv").write_text("a\n1\n")
    (after / "store" / "changed.csv").write_text("a\n1.0000000000000002\n")
    (before / "gone.txt").write_text("x")
    (after / "new.txt").write_text("x")
    assert compare(before, after) == ["gone.txt", "new.txt", "store/changed.csv"]
    assert main(["compare", str(before), str(after)]) == 1
    assert "3 of the recorded files differ" in capsys.readouterr().out
    assert main(["compare", str(before), str(before)]) == 0


def test_only_the_recording_clocks_moments_are_masked():
    """The moments of today (when the run started, finished, was reported) are masked in every
    form the reports print; the data's moments (an as-of, a window's end) are kept."""
    today = max(TODAY)
    for moment in (
        f"{today} 00:00:00.000000",
        f"{today}T00:00:00Z",
        f"{today} 13:05 UTC",
        f"{today}T02:00:00+02:00",
    ):
        assert masked(f"started {moment}.") == "started <now>."
    assert masked("as of 2026-10-31 00:00 UTC") == "as of 2026-10-31 00:00 UTC"
    assert masked("fpr 0.2026") == "fpr 0.2026"
