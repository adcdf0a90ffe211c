"""``fairsim.record``: value classes that behave as the dataclasses of the same declarations.

The reference is ``dataclasses.dataclass`` itself: each test builds one class of each kind from the
same declarations and compares what a caller sees (constructor errors included)."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairsim import record as rec

REPO = Path(__file__).resolve().parents[1]

#: Every record class a run uses (module, class): all are checked against their dataclass twins.
RECORDS = [
    ("fairsim.kvcapacity", "KVCapacity"), ("fairsim.costmodel", "Profile"), ("fairsim.types", "Request"),
    ("fairsim.sim.config", "EngineConfig"), ("fairsim.traces.trace", "Trace"),
    ("fairsim.traces.formats._common", "Head"), ("fairsim.traces.formats._common", "Collector"),
    ("fairsim.traces.formats", "TraceFormat"), ("fairsim.traces.shaping", "OfferedLoad"),
    ("fairsim.sim.result", "SimResult"), ("fairsim.description", "RunDescription"),
    ("fairsim.traces.offered", "PrefillWork"), ("fairsim.traces.offered", "OfferedLoad"),
    ("fairsim.policies.space", "FloatRange"), ("fairsim.policies.space", "IntRange"),
    ("fairsim.policies.space", "Choice"),
]


def _pair(decls, frozen, slots, name="R"):
    """The same declarations as a record and as a dataclass. ``decls``: [(name, kind, value,
    options)], kind "plain" (no default), "default", "factory"; options: field keywords."""
    def body(as_record):
        ns = {"__annotations__": {}, "__module__": __name__, "__qualname__": name}
        for fname, kind, value, options in decls:
            ns["__annotations__"][fname] = "object"
            make = rec.field if as_record else dataclasses.field
            if kind == "default" and not options:
                ns[fname] = value
            elif kind == "default":
                ns[fname] = make(default=value, **options)
            elif kind == "factory":
                ns[fname] = make(default_factory=value, **options)
            elif options:
                ns[fname] = make(**options)
        return ns

    ours = rec.record(type(name, (), body(True)), frozen=frozen, slots=slots)
    theirs = dataclasses.dataclass(type(name, (), body(False)), frozen=frozen, slots=slots)
    return ours, theirs


def _values(obj):
    """``{name: value}`` of a record's fields, in order (a shallow ``asdict``)."""
    return {name: getattr(obj, name) for name in rec.field_names(obj)}


def _outcome(fn):
    try:
        return ("ok", fn())
    except Exception as exc:  # noqa: BLE001 - the outcome compared, whatever it is
        return (type(exc).__name__, str(exc).replace(".__init__", ""))


@st.composite
def declarations(draw):
    n = draw(st.integers(0, 5))
    names = [f"f{i}" for i in range(n)]
    decls = []
    defaulted = False
    for fname in names:
        kinds = ["default", "factory"] + ([] if defaulted else ["plain"])
        kind = draw(st.sampled_from(kinds))
        defaulted = defaulted or kind != "plain"
        options = draw(st.fixed_dictionaries({}, optional={
            "repr": st.booleans(), "compare": st.booleans(), "hash": st.sampled_from([None, True, False])}))
        if kind != "plain" and draw(st.booleans()):
            options["init"] = False
        value = {"default": draw(st.sampled_from([0, 1.5, "x", None, (1, 2)])), "factory": list,
                 "plain": None}[kind]
        if kind == "factory":
            value = draw(st.sampled_from([list, dict, tuple]))
        decls.append((fname, kind, value, options))
    return decls


@settings(max_examples=150, deadline=None)
@given(decls=declarations(), frozen=st.booleans(), slots=st.booleans(),
       args=st.lists(st.sampled_from([0, 1, "a", (3,), None]), max_size=6),
       kwargs=st.dictionaries(st.sampled_from(["f0", "f1", "f2", "f3", "f4", "zz"]),
                              st.sampled_from([0, 2, "b"]), max_size=3))
def test_a_record_behaves_as_the_dataclass_of_the_same_declarations(decls, frozen, slots, args, kwargs):
    ours, theirs = _pair(decls, frozen, slots)
    # Construction: the same objects, or the same error with CPython's own message.
    a = _outcome(lambda: ours(*args, **kwargs))
    b = _outcome(lambda: theirs(*args, **kwargs))
    assert a[0] == b[0] and (a[0] == "ok" or a[1] == b[1]), (a, b)
    assert ours.__match_args__ == theirs.__match_args__
    assert ("__slots__" in ours.__dict__) == ("__slots__" in theirs.__dict__)
    assert (ours.__hash__ is None) == (theirs.__hash__ is None)
    assert str(inspect.signature(ours)) == str(inspect.signature(theirs))
    assert [(f.name, f.init, f.repr, f.compare, f.hash) for f in dataclasses.fields(ours)] == \
        [(f.name, f.init, f.repr, f.compare, f.hash) for f in dataclasses.fields(theirs)]
    assert dataclasses.is_dataclass(ours) and ours.__dataclass_params__.frozen == frozen
    if a[0] != "ok":
        return
    x, y = a[1], b[1]
    assert repr(x) == repr(y)
    assert _values(x) == {f.name: getattr(y, f.name) for f in dataclasses.fields(y)}
    x2, y2 = ours(*args, **kwargs), theirs(*args, **kwargs)
    assert (x == x2) == (y == y2) and (x != x2) == (y != y2)
    assert (x == y) is False  # another class
    if theirs.__hash__ is not None:
        assert _outcome(lambda: hash(x) == hash(x2)) == _outcome(lambda: hash(y) == hash(y2))
    for target in decls:
        set_a = _outcome(lambda: setattr(x, target[0], 7))
        set_b = _outcome(lambda: setattr(y, target[0], 7))
        assert set_a[0] == set_b[0]
    if frozen:  # (3.11's dataclass with slots raises TypeError here, from its super() call)
        with pytest.raises(dataclasses.FrozenInstanceError):
            x.other = 1
    for changes in ({}, {"f0": 5}, {"nope": 1}):
        r1 = _outcome(lambda: _values(rec.replace(x, **changes)))
        r2 = _outcome(lambda: dataclasses.asdict(dataclasses.replace(y, **changes)))
        assert r1[0] == r2[0], (changes, r1, r2)
        if r1[0] == "ok":
            assert r1 == r2
        else:
            assert _outcome(lambda: dataclasses.replace(x, **changes))[0] == r2[0]


def test_a_record_pickles_and_copies_as_its_dataclass():
    ours, _ = _pair([("a", "plain", None, {}), ("b", "factory", list, {"compare": False})], frozen=True, slots=True,
                    name="PickledRecord")
    # Pickling finds a class by its module's name: put it there for this test.
    globals()["PickledRecord"] = ours
    try:
        x = ours(1, [2])
        y = pickle.loads(pickle.dumps(x))
        assert y == x and y.b == [2] and type(y) is ours
        z = copy.deepcopy(x)
        assert z == x and z.b is not x.b
        with pytest.raises(dataclasses.FrozenInstanceError):
            y.a = 2
    finally:
        del globals()["PickledRecord"]


@pytest.mark.parametrize("module, name", RECORDS)
def test_each_record_class_is_a_dataclass_to_the_standard_library(module, name):
    cls = getattr(importlib.import_module(module), name)
    assert dataclasses.is_dataclass(cls)
    assert rec.field_names(cls) == tuple(f.name for f in dataclasses.fields(cls))
    shadow = dataclasses.dataclass(frozen=cls.__dataclass_params__.frozen)(type(name, (), {
        "__module__": module, "__annotations__": {f.name: f.type for f in dataclasses.fields(cls)},
        **{f.name: dataclasses.field(default=f.default, default_factory=f.default_factory, init=f.init,
                                     repr=f.repr, compare=f.compare, hash=f.hash)
           for f in dataclasses.fields(cls)}}))
    # The constructor's parameters: names, order and plain defaults (a factory's default reads
    # <factory> in the dataclass's and MISSING in a written-out __init__, Request's).
    ours, theirs = inspect.signature(cls).parameters, inspect.signature(shadow).parameters
    assert list(ours) == list(theirs)
    for p in theirs.values():
        if p.default is not dataclasses.MISSING and repr(p.default) != "<factory>":
            assert ours[p.name].default == p.default
    assert cls.__match_args__ == shadow.__match_args__
    assert (cls.__hash__ is None) == (shadow.__hash__ is None)


def test_request_written_out_init_is_the_generated_one():
    from fairsim.types import Request

    a = Request("r", 1.0, 10)
    assert a.labels == {} and a.labels is not Request("r", 1.0, 10).labels
    assert a == Request("r", 1.0, 10, (), 512, 1, {"x": 1}, None, None, 0.0, ())  # labels not compared
    assert repr(a) == ("Request(request_id='r', arrival_time=1.0, prompt_len=10, block_hashes=(), hash_block_size=512, "
                       "output_len=1, labels={}, session_id=None, after=None, delay_s=0.0, segments=())")
    with pytest.raises(ValueError, match="prompt_len=0"):
        Request("r", 1.0, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.prompt_len = 3
    assert dataclasses.replace(a, prompt_len=20).prompt_len == 20 == rec.replace(a, prompt_len=20).prompt_len


@pytest.mark.parametrize("bad, error", [
    ("class R:\n    a: int = 1\n    b: int\n", TypeError),             # no default after a default
    ("class R:\n    a: list = []\n", ValueError),                      # a mutable default
    ("class R:\n    a: 'ClassVar[int]' = 1\n", TypeError),             # not supported
    ("class B:\n    pass\nclass R(B):\n    a: int\n", TypeError),      # a base class
])
def test_unsupported_declarations_are_refused(bad, error):
    ns: dict = {}
    exec(bad, ns)
    with pytest.raises(error):
        rec.record(ns["R"])


def test_a_run_imports_neither_dataclasses_nor_inspect(tmp_path):
    # Their import and the dataclass decorator's compiled methods were about a tenth of a run on a
    # light trace (fairsim/record.py); a module that brings either back fails this test.
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-11-16 18:15:{i:02d}.0000000,{100 + i},{1 + i}\n" for i in range(20)))
    code = ("import runpy, sys\n"
            "sys.argv = ['fairsim', 'run', '--policy', 'fairway', '--trace', sys.argv[1], '--format', 'json']\n"
            "try:\n    runpy.run_module('fairsim', run_name='__main__')\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "print('MODULES', 'dataclasses' in sys.modules, 'inspect' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code, str(trace)], cwd=REPO, capture_output=True, text=True,
                         check=True)
    assert "MODULES False False" in out.stdout, out.stderr[-2000:]


@dataclasses.dataclass(frozen=True)
class TaggedRequest(__import__("fairsim.types", fromlist=["Request"]).Request):
    """A team's subclass of a slotted record (module level: pickle finds it by name)."""

    tenant: str = "default"


def test_a_dataclass_subclass_keeps_its_fields_and_signature():
    # Was (a new-user pass): pickle, copy and deepcopy dropped the subclass's own fields (the
    # record's state listed its own only), and inspect.signature showed the record's.
    r = TaggedRequest("a", 0.0, 100, tenant="acme")
    for twin in (pickle.loads(pickle.dumps(r)), copy.copy(r), copy.deepcopy(r)):
        assert twin == r and twin.tenant == "acme"
    assert list(inspect.signature(TaggedRequest).parameters)[-1] == "tenant"
    from fairsim.policies.space import FloatRange
    from fairsim.sim.config import EngineConfig

    step = dataclasses.dataclass(frozen=True)(type("StepRange", (FloatRange,), {
        "__annotations__": {"step": "float"}, "step": 0.1}))
    assert str(inspect.signature(step)).startswith("(low: 'float', high: 'float', log: 'bool' = False, step")
    assert str(inspect.signature(FloatRange)) == "(low: 'float', high: 'float', log: 'bool' = False) -> None"

    class Small(EngineConfig):
        def __init__(self, budget):
            super().__init__(budget_tokens=budget)

    assert str(inspect.signature(Small)) == "(budget)"
    assert "labels: 'dict[str, Any]' = <factory>" in str(inspect.signature(__import__("fairsim.types").types.Request))


def test_sim_result_replace_and_pickle():
    # Was (a new-user pass, older than the records): replace(result, requests=...) kept the old
    # table (the frame cache was a parameter, passed on), and a compiled run's result did not
    # pickle (its step table read columns from the engine's step log).
    from fairsim.cli import main  # noqa: F401 (the package's start-up, as a user's)
    from fairsim.costmodel import load_profile
    from fairsim.policies import make_policy
    from fairsim.sim import EngineConfig, simulate
    from fairsim.types import Request

    reqs = [Request(f"r{i}", 0.1 * i, 300 + 10 * i, (), 512) for i in range(8)]
    profile = load_profile()
    result = simulate(reqs, make_policy("fcfs", profile), profile, EngineConfig(kv_blocks=64))
    assert len(result.requests) == 8
    head = dataclasses.replace(result, requests=result.requests.head(3))
    assert len(head.requests) == 3 and len(result.requests) == 8
    twin = pickle.loads(pickle.dumps(result))
    assert twin.requests.equals(result.requests) and twin.steps.equals(result.steps)
