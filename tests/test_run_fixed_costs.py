"""The fixed costs of one ``fairsim run`` cut without changing a value: the step table's columns
built on first read, the offered load's shared per-request work, the trace reader's end checks.
"""

from __future__ import annotations

from operator import itemgetter

import pytest
from hypothesis import given, settings, strategies as st

from fairsim.sim.result import Columns

NAMES = ["step", "start_s", "tokens"]
ROWS = st.lists(st.tuples(st.integers(0, 10**6), st.floats(0, 1e6), st.integers(-5, 5)), max_size=30)


def eager(rows: list[tuple], names: list[str]) -> dict[str, list]:
    return {name: list(map(itemgetter(i), rows)) for i, name in enumerate(names)}


@settings(max_examples=100, deadline=None)
@given(ROWS, st.permutations(NAMES))
def test_lazy_step_columns_equal_the_eager_ones(rows, read_order):
    table = Columns.from_tuples(rows, NAMES)
    want = eager(rows, NAMES)
    assert len(table) == len(rows)
    for name in read_order[:2]:  # some columns read first (as the run's summary does)
        assert table[name].tolist() == want[name]
    assert list(table.columns) == NAMES  # column order kept, whatever was read first
    assert table.columns == want
    assert table.to_pandas().to_dict("list") == want


def test_lazy_columns_build_only_what_is_read():
    table = Columns.from_tuples([(0, 1.5, 3), (1, 2.5, 4)], NAMES)
    assert table["tokens"].tolist() == [3, 4]
    assert list(table._lists) == ["tokens"]


def test_unknown_column_is_a_key_error():
    for table in (Columns.from_tuples([(0, 1.0, 2)], NAMES), Columns.from_tuples([], NAMES),
                  Columns({"step": [0]})):
        with pytest.raises(KeyError):
            table["nosuch"]
    empty = Columns.from_tuples([], NAMES)
    assert len(empty) == 0 and empty.columns == {n: [] for n in NAMES}
    assert empty["tokens"].tolist() == []
