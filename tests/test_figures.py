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
