"""The fixed costs of one ``fairsim run`` cut without changing a value: the step table's columns
built on first read, the offered load's shared per-request work, the fleet's and disaggregated
mode's modules left out of a run on one engine.
"""

from __future__ import annotations

from array import array
from operator import itemgetter
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fairsim.costmodel import DEFAULT_PROFILE, load_profile
from fairsim.deployment_options import DISAGG_OPTIONS, one_engine
from fairsim.sim.result import Columns
from fairsim.traces.offered import PrefillWork, _both_works, _busiest, busy_time, offered_load, prefill_work
from fairsim.types import Request
from tests.strategies import traces

NAMES = ["step", "start_s", "tokens"]
CODES = "qdq"
ROWS = st.lists(st.tuples(st.integers(0, 10**6), st.floats(0, 1e6), st.integers(-5, 5)), max_size=30)


def logged(rows: list[tuple]) -> Columns:
    """The rows as the engine keeps its step table: typed columns, each read when first needed."""
    cols = [array(code) for code in CODES]
    for row in rows:
        for col, value in zip(cols, row):
            col.append(value)
    return Columns.from_log(NAMES, cols.__getitem__, len(rows))


def eager(rows: list[tuple], names: list[str]) -> dict[str, list]:
    return {name: list(map(itemgetter(i), rows)) for i, name in enumerate(names)}


@settings(max_examples=100, deadline=None)
@given(ROWS, st.permutations(NAMES))
def test_lazy_step_columns_equal_the_eager_ones(rows, read_order):
    table = logged(rows)
    want = eager(rows, NAMES)
    assert len(table) == len(rows)
    for name in read_order[:2]:  # some columns read first (as the run's summary does)
        assert table[name].tolist() == want[name]
    assert list(table.columns) == NAMES  # column order kept, whatever was read first
    assert table.columns == want
    assert [type(v) for v in table.as_list("step")] == [int] * len(rows)  # ints stay ints
    frame = table.to_pandas()
    assert frame.to_dict("list") == want
    if rows:
        assert list(frame.dtypes.astype(str)) == ["int64", "float64", "int64"]


def test_lazy_columns_build_only_what_is_read():
    table = logged([(0, 1.5, 3), (1, 2.5, 4)])
    assert table["tokens"].tolist() == [3, 4]
    assert list(table._lists) == ["tokens"]


def test_unknown_column_is_a_key_error():
    for table in (logged([(0, 1.0, 2)]), logged([]),
                  Columns({"step": [0]})):
        with pytest.raises(KeyError):
            table["nosuch"]
    empty = logged([])
    assert len(empty) == 0 and empty.columns == {n: [] for n in NAMES}
    assert empty["tokens"].tolist() == []


# -- the offered load: one sort and one set of arrays for the cold and the ideal work ----------

def reference_prefill_work(requests, budget_tokens, ideal_reuse, profile=None, colocated=False):
    """``prefill_work`` as it was: each call sorts and builds every array itself."""
    ordered = sorted(requests, key=lambda r: r.arrival_time)
    seen: set[int] = set()
    hits = np.zeros(len(ordered), dtype=np.float64)
    lengths = np.fromiter((r.prompt_len for r in ordered), dtype=np.float64, count=len(ordered))
    if ideal_reuse:
        for i, r in enumerate(ordered):
            hit = 0
            for x in r.block_hashes:
                if x not in seen:
                    break
                hit += 1
            hits[i] = min(hit, (r.prompt_len - 1) // r.hash_block_size) * r.hash_block_size
            seen.update(r.block_hashes)
    new = lengths - hits
    decode_tokens = np.zeros(len(ordered), dtype=np.float64)
    decode_s = np.zeros(len(ordered), dtype=np.float64)
    if colocated:
        o1 = np.fromiter((r.output_len - 1 for r in ordered), dtype=np.float64, count=len(ordered))
        p = profile
        ctx = o1 * lengths + o1 * (o1 - 1) / 2.0
        decode_tokens = o1
        decode_s = (o1 * (p.b_s_per_token + p.d_s_per_request + p.f_s_per_decode + p.k_s_per_pair / 2)
                    + (p.k_s_per_pair + p.e_s_per_decode_ctx_token) * ctx)
    return PrefillWork(
        arrival_s=np.fromiter((r.arrival_time for r in ordered), dtype=np.float64, count=len(ordered)),
        new_tokens=new, pairs=(lengths**2 - hits**2) / 2.0, chunks=np.ceil(new / budget_tokens),
        decode_tokens=decode_tokens, decode_s=decode_s)


def same_work(a: PrefillWork, b: PrefillWork) -> bool:
    """The same floats, bit for bit (``_both_works`` gives lists, ``prefill_work`` arrays)."""
    return all(np.array_equal(np.asarray(getattr(a, f), dtype=np.float64).view(np.int64),
                              np.asarray(getattr(b, f), dtype=np.float64).view(np.int64))
               for f in PrefillWork.__slots__)


@settings(max_examples=150, deadline=None)
@given(traces(max_requests=12), st.sampled_from([1, 100, 512, 2048]), st.booleans(),
       st.sampled_from([0.5, 60.0]))
def test_offered_load_as_before(requests, budget, colocated, window_s):
    profile = load_profile(DEFAULT_PROFILE)
    cold, ideal = _both_works(requests, budget, profile, colocated)
    assert same_work(cold, reference_prefill_work(requests, budget, False, profile, colocated))
    assert same_work(ideal, reference_prefill_work(requests, budget, True, profile, colocated))
    for reuse in (False, True):
        assert same_work(prefill_work(requests, budget, reuse, profile, colocated),
                         reference_prefill_work(requests, budget, reuse, profile, colocated))
    got = offered_load(requests, profile, budget, window_s, colocated)
    # The figures from the reference works, as offered_load combines them.
    ref_cold = reference_prefill_work(requests, budget, False, profile, colocated)
    ref_ideal = reference_prefill_work(requests, budget, True, profile, colocated)

    def busy(w):
        return float(busy_time(profile, budget, w.new_tokens.sum(), w.pairs.sum(), w.chunks.sum(),
                               w.decode_tokens.sum(), w.decode_s.sum()))

    assert got.busy_s == busy(ref_cold) and got.ideal_busy_s == busy(ref_ideal)
    span = float(ref_cold.arrival_s[-1] - ref_cold.arrival_s[0])
    if span >= window_s:
        peak, start, first = _busiest(ref_cold, profile, budget, window_s)
        assert (got.peak_load, got.peak_start_s) == (peak, start)
        # The ideal-reuse load of that same window.
        end = first + sum(1 for t in ref_cold.arrival_s[first:] if t < start + window_s)
        assert got.peak_ideal_load == pytest.approx(busy(SimpleNamespace(
            **{f: getattr(ref_ideal, f)[first:end] for f in PrefillWork.__slots__})) / window_s, rel=1e-12)


def test_offered_load_hand_computed():
    # Two requests of 1,024 tokens (two 512-token blocks), the second sharing the first block:
    # ideal reuse hits 512 tokens of it. Budget 512, a = 1 s per step, nothing else costs.
    from fairsim.costmodel import Profile

    profile = Profile("hand", "prior", 1.0, 0.0, 0.0, 0.0, (1, 1000), (0.05, 5.0), budget_tokens=512)
    reqs = [Request("a", 0.0, 1024, (1, 2), 512, 1, {}), Request("b", 10.0, 1024, (1, 3), 512, 1, {})]
    cold, ideal = _both_works(reqs, 512, profile, False)
    assert cold.new_tokens == [1024.0, 1024.0] and ideal.new_tokens == [1024.0, 512.0]
    assert ideal.pairs == [1024**2 / 2, (1024**2 - 512**2) / 2]
    load = offered_load(reqs, profile, 512, window_s=5.0)
    assert (load.busy_s, load.ideal_busy_s) == (4.0, 3.0)  # ceil(2048 / 512) and ceil(1536 / 512) steps
    assert (load.load, load.ideal_load) == (0.4, 0.3)  # over the 10 s span
    assert (load.peak_load, load.peak_start_s) == (2 / 5.0, 0.0)  # one request per 5 s window


# -- start-up: a run on one engine does not import the fleet's and disaggregated mode's modules --

@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["prefill-only", "colocated", "disaggregated"]), st.sampled_from([1, 2]),
       st.sampled_from([None, "round-robin", "dynamo-kv"]), st.sampled_from([[], ["temperature=0.5"]]),
       st.fixed_dictionaries({dest: st.sampled_from([None, 2]) for dest, _ in DISAGG_OPTIONS}))
def test_one_engine_is_when_the_specs_are_none(mode, instances, router, router_param, disagg_values):
    import argparse

    from fairsim.cli_disagg import disagg_spec
    from fairsim.cli_fleet import fleet_spec

    def namespace() -> argparse.Namespace:
        return argparse.Namespace(mode=mode, instances=instances, router=router, router_param=router_param,
                                  seed=0, **disagg_values)

    one = one_engine(namespace())
    try:
        args = namespace()
        specs = (disagg_spec(args), fleet_spec(args))
    except ValueError:
        specs = None  # refused: only where one_engine sent the run to the checks
    if one:
        assert specs == (None, None)
    else:
        assert specs is None or specs[0] is not None or specs[1] is not None
