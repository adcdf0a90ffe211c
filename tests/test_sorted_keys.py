"""The compiled sorted list (``fairsim/policies/_sorted_c.pyx``) against ``SortedList``.

Both are driven by the same operations; after each, the twin holds the same objects (by
identity, so equal values keep ``SortedList``'s order among themselves) and raises the same
errors. A small load factor makes sublists split and merge within a few dozen values."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sortedcontainers import SortedList

_sorted_c = pytest.importorskip("fairsim.policies._sorted_c")
SortedKeys = _sorted_c.SortedKeys


def reference(load: int, values=None) -> SortedList:
    ref = SortedList(values)
    ref._reset(load)
    return ref


def same(twin, ref) -> None:
    assert len(twin) == len(ref)
    assert [id(v) for v in twin] == [id(v) for v in ref]


# Values are (key, tag) tuples compared by key only (tag is a distinct object), so equal keys
# are distinguishable and the twin must keep them in SortedList's order.
class Tagged:
    __slots__ = ("key", "tag")

    def __init__(self, key: int, tag: int) -> None:
        self.key, self.tag = key, tag

    def __lt__(self, other: "Tagged") -> bool:
        return self.key < other.key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tagged) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"Tagged({self.key}, {self.tag})"


operation = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 40)),
    st.tuples(st.just("remove"), st.integers(0, 40)),
    st.tuples(st.just("discard"), st.integers(0, 40)),
    st.tuples(st.just("update"), st.lists(st.integers(0, 40), max_size=30)),
    st.tuples(st.just("contains"), st.integers(0, 40)),
    st.tuples(st.just("getitem"), st.integers(-50, 50)),
    st.tuples(st.just("islice"), st.tuples(st.none() | st.integers(-50, 50), st.none() | st.integers(-50, 50))),
    st.tuples(st.just("irange"), st.tuples(st.none() | st.integers(-1, 41), st.none() | st.integers(-1, 41),
                                           st.booleans(), st.booleans(), st.booleans())),
)


def outcome(call):
    try:
        return ("ok", call())
    except (ValueError, IndexError) as exc:
        return (type(exc).__name__, None)


@settings(max_examples=300, deadline=None)
@given(st.integers(4, 8), st.lists(st.integers(0, 40), max_size=20), st.lists(operation, max_size=120))
def test_same_objects_in_the_same_order_as_sorted_list(load, initial, ops):
    tag = iter(range(10**9))
    first = [Tagged(k, next(tag)) for k in initial]
    twin, ref = SortedKeys(first, load=load), reference(load, first)
    same(twin, ref)
    for op, arg in ops:
        if op in ("add", "remove", "discard", "contains"):
            value = Tagged(arg, next(tag))
            got = outcome(lambda: getattr(twin, op)(value) if op != "contains" else value in twin)
            want = outcome(lambda: getattr(ref, op)(value) if op != "contains" else value in ref)
            assert got == want
        elif op == "update":
            values = [Tagged(k, next(tag)) for k in arg]
            twin.update(values)
            ref.update(values)
        elif op == "getitem":
            got, want = outcome(lambda: twin[arg]), outcome(lambda: ref[arg])
            assert got[0] == want[0] and got[1] is want[1]
        elif op == "irange":
            low, high, inc_low, inc_high, rev = arg
            low = None if low is None else Tagged(low, -1)
            high = None if high is None else Tagged(high, -1)
            got = twin.irange(low, high, inclusive=(inc_low, inc_high), reverse=rev)
            want = ref.irange(low, high, inclusive=(inc_low, inc_high), reverse=rev)
            assert [id(v) for v in got] == [id(v) for v in want]
        else:
            start, stop = arg
            assert [id(v) for v in twin.islice(start, stop)] == [id(v) for v in ref.islice(start, stop)]
            assert ([id(v) for v in twin.islice(start, stop, reverse=True)]
                    == [id(v) for v in ref.islice(start, stop, reverse=True)])
        same(twin, ref)


def test_hand_made_split_and_merge():
    # load 4: a sublist splits above 8 values and merges with a neighbour at or below 2.
    twin = SortedKeys(load=4)
    for v in [5, 1, 9, 3, 7, 2, 8, 4, 6, 0]:
        twin.add(v)
    assert list(twin) == list(range(10))
    assert (twin[0], twin[-1], twin[4], twin[-3]) == (0, 9, 4, 7)
    assert twin[2:5] == [2, 3, 4]
    for v in [0, 1, 2, 3, 4, 5, 6]:
        twin.remove(v)
    assert list(twin) == [7, 8, 9] and len(twin) == 3
    with pytest.raises(ValueError, match="not in list"):
        twin.remove(1)
    with pytest.raises(IndexError):
        twin[3]
    twin.discard(1)  # absent: nothing happens
    assert 8 in twin and 1 not in twin
    twin.clear()
    assert len(twin) == 0 and list(twin) == [] and 8 not in twin
    with pytest.raises(ValueError):
        twin.remove(8)


def test_tuples_as_the_orders_key_them():
    keys = [(-3, 2.0, "b"), (-3, 1.0, "a"), (0, 0.5, "c"), (-7, 9.0, "d")]
    twin = SortedKeys(keys)
    assert list(twin) == sorted(keys)
    assert list(twin.islice(0, 2)) == sorted(keys)[:2]
    with pytest.raises(TypeError):
        twin.add("not a tuple")


def test_load_below_four_is_refused():
    with pytest.raises(ValueError, match="load must be >= 4"):
        SortedKeys(load=3)


# -- the keys' comparison in C (``_lt``) against Python's ``<`` --------------------------------------
_NAN = float("nan")
_items = st.one_of(
    st.integers(-3, 3), st.integers(-(2**70), 2**70),  # small ints, and ints beyond a C long
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 1.0, _NAN]),
    st.text(max_size=3), st.sampled_from(["", "a", "é", "\U0001f600"]), st.booleans(), st.none())
_keys = st.one_of(st.tuples(_items, _items, _items), st.lists(_items, max_size=4).map(tuple), _items)


def _python_lt(a, b):
    try:
        return ("ok", a < b)
    except TypeError as exc:
        return ("TypeError", str(exc))


def _twin_lt(a, b):
    try:
        return ("ok", _sorted_c.lt(a, b))
    except TypeError as exc:
        return ("TypeError", str(exc))


@settings(max_examples=3000, deadline=None)
@given(a=_keys, b=_keys, share=st.booleans())
def test_the_keys_compare_as_python_compares_them(a, b, share):
    """``_lt`` (the bisects' comparison: exact int, float and str items compared in C) gives
    Python's ``<`` on tuples of ints (small and beyond 64 bits), floats (NaN, infinities, -0.0),
    strings, bools and None, tuples of any lengths, and plain values: the same result or the
    same TypeError. ``share`` puts the same object (a NaN among them) at one position of both,
    where Python takes it as equal to itself."""
    if share and isinstance(a, tuple) and isinstance(b, tuple) and a and b:
        b = (a[0], *b[1:])
    assert _twin_lt(a, b) == _python_lt(a, b)
    assert _twin_lt(b, a) == _python_lt(b, a)


def test_the_keys_comparison_by_hand():
    nan = float("nan")
    lt = _sorted_c.lt
    assert lt((0, 1.0, "r1"), (0, 1.0, "r2")) and not lt((0, 1.0, "r2"), (0, 1.0, "r1"))
    assert lt((-512, 5.0, "x"), (0, 1.0, "a"))  # the first differing item decides
    assert lt((1,), (1, 0)) and not lt((1, 0), (1,))  # equal up to the shorter: shorter first
    n1, n2 = float("nan"), float("nan")
    assert not lt((n1, 1), (n2, 2)) and not lt((n2, 2), (n1, 1))  # distinct NaNs: unordered
    assert lt((nan, 1), (nan, 2))  # the same NaN object: equal to itself, the next item decides
    assert not lt((0.0, "b"), (-0.0, "a")) and lt((-0.0, "a"), (0.0, "b"))  # -0.0 == 0.0
    assert lt((2**70, 1), (2**71, 0)) and lt((True, 1), (2, 0))  # big ints, a bool: Python's
    with pytest.raises(TypeError):
        lt((1, "a"), (1, 2))


# -- the heap functions: heapq's algorithm with the keys compared by _lt --------------------------
# Keys as the orders make them: (number, float, str) tuples with many ties in the leading
# positions; equal keys are distinct tuple objects, so the lists are compared by identity: the
# same algorithm leaves the same objects in the same places, ties included.
heap_key = st.tuples(st.integers(-3, 3), st.sampled_from([0.0, -0.0, 0.5, 1.0, float("nan")]),
                     st.sampled_from(["a", "b", "é"]))
heap_op = st.one_of(st.tuples(st.just("push"), heap_key), st.tuples(st.just("pop"), st.none()),
                    st.tuples(st.just("heapify"), st.lists(heap_key, max_size=40)))


@settings(max_examples=300, deadline=None)
@given(st.lists(heap_op, max_size=120))
def test_heap_functions_leave_heapqs_list(ops):
    import heapq

    ref: list = []
    twin: list = []
    for op, arg in ops:
        if op == "push":
            k = tuple(arg)  # (its own object, pushed on both)
            heapq.heappush(ref, k)
            _sorted_c.heappush(twin, k)
        elif op == "pop":
            if not ref:
                with pytest.raises(IndexError):
                    _sorted_c.heappop(twin)
                continue
            assert heapq.heappop(ref) is _sorted_c.heappop(twin)
        else:
            ref[:] = [tuple(k) for k in arg]
            twin[:] = ref
            heapq.heapify(ref)
            _sorted_c.heapify(twin)
        assert [id(k) for k in twin] == [id(k) for k in ref]


def test_heap_pops_in_key_order_by_hand():
    heap: list = []
    for k in [(0, 2.0, "b"), (-1, 5.0, "a"), (0, 1.0, "c"), (-1, 5.0, "0")]:
        _sorted_c.heappush(heap, k)
    assert [_sorted_c.heappop(heap) for _ in range(4)] == [(-1, 5.0, "0"), (-1, 5.0, "a"), (0, 1.0, "c"),
                                                           (0, 2.0, "b")]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 5000), st.integers(0, 5000), st.sampled_from([0, 1, 16, 512]), st.integers(0, 12),
       st.integers(0, 3))
def test_lpms_bound_key_is_the_key_of_the_bound_snapshot(prompt_len, cached, block_size, n_keys, computed):
    # k-LPM's longest lane keys a raised request without building its bound snapshot.
    from fairsim.policies.incremental import _bound, longest_bound_key, longest_key
    from fairsim.types import QueuedRequest

    cached = min(cached, prompt_len - 1)
    keys = tuple(range(n_keys))
    q = QueuedRequest("r1", 2.5, prompt_len, cached, max(1, prompt_len - cached - computed), computed, None,
                      block_keys=keys, block_size=block_size)
    assert longest_bound_key(q) == longest_key(_bound(q))
