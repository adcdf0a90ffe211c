"""fairsim.sweep.engine and the grid: per-run engine settings by hand, grid expansion as a property."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairsim.sim.capacity import resolve_capacity
from fairsim.sim.config import EngineConfig
from fairsim.sweep.engine import block_size_of, check_value, run_engine
from fairsim.sweep.plan import grid_points
from fairsim.sweep.spec import parse_spec
from tests.utils import make_request

# Two requests with 512-token hash blocks (as Mooncake traces have).
REQS = [make_request("a", 0.0, 1500, (1, 2), block=512), make_request("b", 1.0, 1100, (1,), block=512)]


def blocks(config: EngineConfig) -> tuple[int, int]:
    """``(block_size, kv_blocks)`` the engine resolves for ``REQS`` under ``config``."""
    return resolve_capacity(REQS, config)


class TestRunEngine:
    """Capacity is kept in tokens when only the block size changes."""

    def test_block_size_alone_keeps_tokens(self):
        base = EngineConfig(kv_blocks=100)  # 100 x 512 = 51,200 tokens
        assert blocks(run_engine(base, {"block_size": 128}, REQS)) == (128, 400)
        assert blocks(run_engine(base, {"block_size": 1024}, REQS)) == (1024, 50)
        assert run_engine(base, {"block_size": 512}, REQS) == EngineConfig(kv_blocks=100, block_size=512)
        assert run_engine(base, {"budget_tokens": 1024}, REQS) == EngineConfig(budget_tokens=1024, kv_blocks=100)

    def test_explicit_capacity_replaces_the_base(self):
        base = EngineConfig(kv_blocks=100)
        assert run_engine(base, {"kv_fraction": 0.2, "block_size": 128}, REQS) == \
            EngineConfig(kv_fraction=0.2, block_size=128)
        assert blocks(run_engine(base, {"kv_blocks": 70, "block_size": 128}, REQS)) == (128, 70)
        assert run_engine(EngineConfig(kv_fraction=0.3), {"block_size": 128}, REQS) == \
            EngineConfig(kv_fraction=0.3, block_size=128)  # a fraction is resolved at run time

    def test_kv_tokens(self):
        cfg = run_engine(EngineConfig(kv_blocks=100), {"kv_tokens": 2000, "block_size": 16}, REQS)
        assert blocks(cfg) == (16, 125)  # floor(2000 / 16)
        assert blocks(run_engine(EngineConfig(), {"kv_tokens": 2100}, REQS)) == (512, 4)  # floor
        with pytest.raises(ValueError, match="give one KV capacity"):
            run_engine(EngineConfig(), {"kv_tokens": 2000, "kv_blocks": 4}, REQS)
        with pytest.raises(ValueError, match="kv_tokens=10"):
            blocks(run_engine(EngineConfig(), {"kv_tokens": 10, "block_size": 16}, REQS))

    def test_block_size_of(self):
        assert block_size_of(EngineConfig(), REQS) == 512
        assert block_size_of(EngineConfig(block_size=64), REQS) == 64
        mixed = REQS + [make_request("c", 2.0, 100, (), block=16)]
        with pytest.raises(ValueError, match="mixes hash block sizes"):
            block_size_of(EngineConfig(), mixed)

    @pytest.mark.parametrize("annotation,value,ok", [
        ("int", 3, True), ("int", 3.0, False), ("int", True, False), ("int | None", None, True),
        ("int", None, False), ("float | None", 1, True), ("float | None", "x", False)])
    def test_check_value(self, annotation, value, ok):
        assert (check_value("f", annotation, value) is None) == ok


axes = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]),
                       st.lists(st.integers(-5, 5), min_size=1, max_size=4), max_size=4)
#: A spec's grid axes list each value once (parse_spec refuses a repeat).
unique_axes = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]),
                              st.lists(st.integers(-5, 5), min_size=1, max_size=4, unique=True), max_size=4)


class TestGrid:
    """Grid expansion is the cartesian product, in key order."""

    @given(axes)
    def test_product(self, grid):
        points = grid_points(grid)
        assert len(points) == math.prod(len(v) for v in grid.values())
        assert all(list(p) == list(grid) for p in points)
        assert all(p[k] in grid[k] for p in points for k in p)
        if all(len(set(v)) == len(v) for v in grid.values()):
            assert len({tuple(p.items()) for p in points}) == len(points)

    @given(unique_axes)
    def test_spec_axes(self, grid):
        spec = parse_spec({"scenarios": ["rag"], "policies": [{"name": "fairway", "grid": grid}]})
        assert spec.policies[0].grid == grid
