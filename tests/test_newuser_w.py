"""New-user pass W: a large real trace (millions of requests): progress, plots and checks at scale."""

import sys

from fairsim.cli import main


def test_analyze_simulations_draw_runs_progress_bar_on_a_terminal(monkeypatch, tmp_path):
    # analyze's FCFS and LPM simulations ran with no progress at all: 3.5 min of silence on a
    # 3 M-row Azure CSV, where run and compare draw a bar on a terminal.
    import fairsim.analysis.analyze as analyze

    real, finished = analyze.simulate, []

    def spy(requests, *args, progress=None, **kwargs):
        assert progress is not None, "no progress callback"
        finished.append([len(requests), 0])

        def count(n):
            finished[-1][1] += n
            return progress(n)

        return real(requests, *args, progress=count, **kwargs)

    monkeypatch.setattr(analyze, "simulate", spy)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["analyze", "--max-requests", "150", "--out", str(tmp_path / "a")]) == 0
    assert finished == [[150, 150], [150, 150]]  # FCFS, then LPM, every request counted


def test_no_progress_bar_off_a_terminal(monkeypatch, tmp_path):
    import fairsim.analysis.analyze as analyze

    real, seen = analyze.simulate, []

    def spy(*args, progress=None, **kwargs):
        seen.append(progress)
        return real(*args, progress=progress, **kwargs)

    monkeypatch.setattr(analyze, "simulate", spy)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert main(["analyze", "--max-requests", "50"]) == 0
    assert seen == [None, None]
