"""fairsim.figures: each figure draws from tidy tables and names missing columns."""

from __future__ import annotations

import pandas as pd
import pytest

from fairsim import figures


@pytest.fixture
def requests() -> pd.DataFrame:
    return pd.DataFrame({"ttft_s": [0.5, 1.0, 2.0, 0.7, 3.0, 4.0],
                         "policy": ["a", "a", "a", "b", "b", "b"],
                         "window": ["calm", "burst", "spike"] * 2})


class TestFigures:
    """Figures are written as PNG files."""

    def test_all_figures_save(self, requests, tmp_path):
        steps = pd.DataFrame({"start_s": [0.0, 1.0] * 2, "waiting": [3, 1, 4, 0],
                              "kv_blocks_used": [10, 12, 9, 11], "policy": ["a", "a", "b", "b"]})
        table = pd.DataFrame({"x": ["s1", "s2"], "y": [1.0, 2.0], "hue": ["p", "p"]})
        for name, fig in [("cdf", figures.ttft_cdf(requests)),
                          ("win", figures.window_bars(requests)),
                          ("qkv", figures.queue_and_kv(steps, kv_blocks=20)),
                          ("bars", figures.bars(table, "x", "y", "hue", log_y=True))]:
            path = figures.save(fig, tmp_path / f"{name}.png")
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def test_missing_column_is_named(self, requests):
        with pytest.raises(ValueError, match="lacks columns \\['window'\\]"):
            figures.window_bars(requests.drop(columns="window"))

    def test_identical_runs_stay_visible(self):
        # Two policies with the same TTFTs (a light load orders alike) draw the same curve: each
        # line gets its own dash pattern so the later one does not hide the earlier.
        from fairsim.run_plots import queue_and_kv_cached

        same = pd.DataFrame({"ttft_s": [0.5, 1.0, 2.0] * 3, "policy": ["a"] * 3 + ["b"] * 3 + ["c"] * 3})
        steps = pd.DataFrame({"start_s": [0.0, 1.0] * 3, "duration_s": [1.0] * 6, "waiting": [3, 1] * 3,
                              "kv_blocks_used": [10, 12] * 3, "kv_blocks_cached": [4, 5] * 3,
                              "policy": ["a", "a", "b", "b", "c", "c"]})
        for fig in (figures.ttft_cdf(same), figures.queue_and_kv(steps), queue_and_kv_cached(steps)):
            for ax in fig.axes:
                lines = [ln for ln in ax.get_lines() if ln.get_label() in ("a", "b", "c")]
                assert [ln.get_label() for ln in lines] == ["a", "b", "c"]
                dashes = [(ln.get_linestyle(), repr(ln._dash_pattern)) for ln in lines]
                assert len(set(dashes)) == 3, dashes
            figures.plt.close(fig)
