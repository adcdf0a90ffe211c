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


def _line_points(ax):
    return max(len(line.get_xdata()) for line in ax.get_lines())


def test_analyze_figures_of_a_long_trace_are_drawn_per_time_bin():
    # load.png of 1.4 M BurstGPT rows drew 466,738 bins of 10 s and spread.png 1.4 M queue
    # changes over 8 inches: a solid block (fairsim run's queue_kv.png bins above 4,000 steps).
    import numpy as np
    import pandas as pd

    from fairsim.analysis.figures import load_figure, spread_figure
    from fairsim.analysis.spread import QueueSpread
    from fairsim.run_plots import MAX_STEP_POINTS, TIME_BINS

    n = MAX_STEP_POINTS + 1
    load = np.tile([0.2, 0.6], n)[:n]
    series = pd.DataFrame({"start_s": np.arange(n) * 10.0, "load": load,
                           "prompt_tokens_per_s": load * 100, "ideal_uncached_tokens_per_s": load * 50})
    fig = load_figure(series, 10.0)
    ax = fig.axes[0]
    assert _line_points(ax) == TIME_BINS + 1
    mean = ax.get_lines()[0].get_ydata()
    assert np.allclose(mean, 0.4, atol=0.01)  # time-weighted mean of 0.2 and 0.6
    assert "min-max band" in ax.get_xlabel()
    assert _line_points(load_figure(series.iloc[:100], 10.0).axes[0]) == 100  # short: per bin

    spread = np.where(np.arange(n) % 2, np.nan, 3.0)  # NaN: fewer than two waiting
    tl = pd.DataFrame({"start_s": np.arange(n) * 1.0, "duration_s": 1.0,
                       "waiting": np.where(np.isnan(spread), 1, 2), "spread": spread})
    fig = spread_figure(QueueSpread(tl, float(n), "test", 4.0))
    top, bottom = fig.axes
    assert _line_points(top) == _line_points(bottom) == TIME_BINS + 1
    assert np.allclose(bottom.get_lines()[0].get_ydata(), 3.0)  # NaN intervals left out, not NaN
    assert np.allclose(top.get_lines()[0].get_ydata(), 1.5, atol=0.01)
