"""The fast paths of a run's fixed cost: the trace read, time scaling, set-up, exit.

Each fast path is checked against the code it replaces: ``iter_json_lines`` (``orjson`` with the
standard library as the fallback) against a stdlib-only reference, yielding the same records,
values, types and error messages; the Mooncake reader's plain-row path against the field-by-field
path; ``scale_time``/``window`` against ``dataclasses.replace``.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
from pathlib import Path

from hypothesis import given, settings, strategies as st

from fairsim.errors import TraceFormatError
from fairsim.traces import load_trace, scale_time, window
from fairsim.traces.formats import mooncake
from fairsim.traces.formats._common import LONE_SURROGATE, iter_json_lines, json_where, lone_surrogate
from fairsim.types import Request


def reference_json_lines(path: Path):
    """``iter_json_lines`` as it was before ``orjson`` (stdlib ``json`` only), as pairs of
    ``(line, record)`` or ``(line, "error: MESSAGE")``; a record holding a lone UTF-16 surrogate
    is refused at its path, as the reader refuses it."""
    blank_line = 0
    name = str(path)
    for line_no, raw in enumerate(path.open("rb"), start=1):
        try:
            text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            yield line_no, f"error: {TraceFormatError(name, line_no, '<json>', f'not UTF-8 text: {exc.reason}')}"
            continue
        if not text.strip():
            blank_line = blank_line or line_no
            continue
        if blank_line:
            yield blank_line, f"error: {TraceFormatError(name, blank_line, '<json>', 'empty line before more records')}"
            blank_line = 0
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as exc:
            msg = exc.msg.removesuffix(" at")  # ("Invalid control character at": its position went)
            yield line_no, f"error: {TraceFormatError(name, line_no, '<json>', f'not valid JSON: {msg} ({json_where(exc, text)})')}"
            continue
        if isinstance(rec, dict):
            bad = lone_surrogate(rec)  # a string json takes but UTF-8 cannot hold (tests/test_newuser_g.py)
            yield line_no, rec if bad is None else f"error: {TraceFormatError(name, line_no, bad, LONE_SURROGATE)}"
        else:
            yield line_no, f"error: {TraceFormatError(name, line_no, '<json>', f'expected an object, got {type(rec).__name__}')}"


def fast_json_lines(path: Path):
    return [(n, f"error: {r}" if isinstance(r, TraceFormatError) else r) for n, r in iter_json_lines(path)]


def typed(value):
    """``value`` with every number tagged by its type (``1 == 1.0`` and ``0.0 == -0.0`` in Python)."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}, list(value)
    if isinstance(value, list):
        return [typed(v) for v in value]
    if isinstance(value, float):
        return ("float", repr(value))
    return (type(value).__name__, value)


# Lines a trace file may hold, good and bad: every case where orjson and json could differ.
SPECIAL_LINES = [
    b'{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}',
    b'{"timestamp": 18446744073709551615, "input_length": 600, "output_length": 5, "hash_ids": [1]}',
    b'{"timestamp": 18446744073709551616, "input_length": 600, "output_length": 5, "hash_ids": [1]}',
    b'{"hash_ids": [-9223372036854775809, 123456789012345678901234567890]}',
    b'{"x": 1e400, "y": -1e400, "z": 1e-400}',
    b'{"x": NaN}', b'{"x": Infinity}', b'{"x": -Infinity}',
    b'{"x": "\\ud800"}', b'{"x": "\\udc00\\ud800"}', b'{"x": "\\u00e9\\ud83d\\ude00"}',
    b'{"a": 1, "a": 2, "b": 3}', b'{"x": -0, "y": -0.0, "z": 1.0, "w": 1E2}',
    b'\xef\xbb\xbf{"x": 1}', b'\xff{"x": 1}', b'{"x": "\xc3"}', b'{"x": "\xe9"}',
    b'', b'   ', b'\t', b'\xc2\xa0', b'\x1c', b'\x0c{"x": 1}', b'\xe2\x80\xa8{"x": 1}',
    b'[1, 2]', b'"text"', b'null', b'3', b'{"x": 1} {"y": 2}', b'{"x": 1,}', b'{"x": 01}',
    b'{"x": [' * 30 + b']' * 30 + b'}', b'{"x": "a\x01b"}', b'{"x": 12345678901234567.5}',
]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(SPECIAL_LINES) | st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3),
    max_leaves=8).map(lambda v: json.dumps({"v": v}).encode()), max_size=8),
    st.sampled_from([b"\n", b"\r\n"]), st.booleans())
def test_iter_json_lines_matches_the_stdlib_reference(tmp_path_factory, lines, end, bom):
    path = tmp_path_factory.mktemp("jl") / "t.jsonl"
    data = end.join(lines) + end
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data)
    got = fast_json_lines(path)
    want = list(reference_json_lines(path))
    assert [(n, typed(r)) for n, r in got] == [(n, typed(r)) for n, r in want]


def test_iter_json_lines_special_lines_one_by_one(tmp_path):
    # Each special line after a good one, so its line number and the blank-line rule are tested.
    for i, line in enumerate(SPECIAL_LINES):
        path = tmp_path / f"s{i}.jsonl"
        path.write_bytes(SPECIAL_LINES[0] + b"\n" + line + b"\n" + SPECIAL_LINES[0] + b"\n")
        assert [(n, typed(r)) for n, r in fast_json_lines(path)] == \
            [(n, typed(r)) for n, r in reference_json_lines(path)], line


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([2**64 - 1, 2**64, 2**63, -2**63, -2**63 - 1, 10**18, 10**19, -10**19])
                | st.integers(-2**66, 2**66), min_size=1, max_size=4), st.booleans())
def test_integers_at_the_64_bit_limits_read_as_by_json(tmp_path_factory, ints, as_text):
    # Dynamo's u64 hashes keep orjson; one step past int64/uint64 goes to the stdlib, which
    # keeps an int (orjson would give a float). Digits inside strings change nothing either.
    path = tmp_path_factory.mktemp("ints") / "t.jsonl"
    value = [str(i) for i in ints] if as_text else ints
    path.write_text(json.dumps({"h": value, "x": 1.5}) + "\n")
    assert [(n, typed(r)) for n, r in fast_json_lines(path)] == \
        [(n, typed(r)) for n, r in reference_json_lines(path)]


def test_big_integers_stay_integers(tmp_path):
    # orjson reads an integer beyond 64 bits as a float; the stdlib (and so the reader) keeps it.
    path = tmp_path / "big.jsonl"
    path.write_bytes(b'{"h": [18446744073709551616, -9223372036854775809, 18446744073709551615]}\n')
    ((_, rec),) = iter_json_lines(path)
    assert rec["h"] == [2**64, -2**63 - 1, 2**64 - 1]
    assert all(type(h) is int for h in rec["h"])


def _rows(n: int, seed: int):
    import random

    rnd = random.Random(seed)
    t = 0.0
    out = []
    for i in range(n):
        t += rnd.choice([0, 0, 1, 250, 1000.5, 0.25])
        length = rnd.randint(1, 3000)
        ids = [rnd.randint(0, 40) if j == 0 else 1000 * (i + 1) + j for j in range(-(-length // 512))]
        out.append({"timestamp": int(t) if t.is_integer() and rnd.random() < 0.5 else t, "input_length": length,
                    "output_length": rnd.randint(1, 900), "hash_ids": ids})
    return out


def _read(path: Path):
    t = mooncake.read(path)
    return ([(r.request_id, repr(r.arrival_time), r.prompt_len, r.block_hashes, r.hash_block_size,
              r.output_len, r.labels, r.session_id, r.after, repr(r.delay_s), r.segments) for r in t.requests],
            t.warnings, t.locations, t.hash_block_size, t.absolute_time)


def test_mooncake_plain_rows_read_as_by_the_field_by_field_path(tmp_path):
    # Plain rows take the fast path; the same rows written with the field aliases (input_tokens,
    # output_tokens, created_time) take the field-by-field one: the traces must be identical.
    rows = _rows(300, 1)
    (tmp_path / "plain").mkdir()
    (tmp_path / "alias").mkdir()
    plain = tmp_path / "plain" / "t.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in rows))
    alias = tmp_path / "alias" / "t.jsonl"
    names = {"timestamp": "created_time", "input_length": "input_tokens", "output_length": "output_tokens"}
    alias.write_text("".join(json.dumps({names.get(k, k): v for k, v in r.items()}) + "\n" for r in rows))
    assert _read(plain) == _read(alias)
    # A value the fast path does not accept as is goes through the checks, which name it.
    for bad, field, reason in [({"input_length": 0}, "input_length", "too small: 0"),
                               ({"output_length": True}, "output_length", "must be an integer"),
                               ({"timestamp": -1}, "timestamp", "negative"),
                               ({"hash_ids": [1, 1.0]}, "hash_ids", "entry 1 is 1.0"),
                               ({"hash_ids": [7, 7]}, "hash_ids", "stands at positions 0 and 1")]:
        broken = tmp_path / "broken.jsonl"
        row = {**rows[5], **bad}
        if field == "hash_ids" and "stands" in reason:
            row["input_length"] = 1024
        broken.write_text("".join(json.dumps(row if i == 5 else r) + "\n" for i, r in enumerate(rows)))
        try:
            mooncake.read(broken)
        except TraceFormatError as exc:
            assert (exc.line, exc.field) == (6, field) and reason in exc.reason, exc
        else:
            raise AssertionError(f"{bad} was accepted")


def test_mooncake_plain_row_with_a_zero_output_keeps_the_observed_label(tmp_path):
    path = tmp_path / "zero.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 0, "hash_ids": [1, 2]}\n')
    (req,) = load_trace(path).requests
    assert (req.output_len, req.labels, req.block_hashes) == (1, {"observed_output_length": 0}, (1,))


@st.composite
def requests(draw):
    L = draw(st.integers(1, 4000))
    block = draw(st.sampled_from([16, 64, 512]))
    n_hashes = draw(st.integers(0, L // block))
    return Request(
        draw(st.text(min_size=1, max_size=5)), draw(st.floats(0, 1e7)), L,
        tuple(draw(st.lists(st.integers(0, 2**70), min_size=n_hashes, max_size=n_hashes))), block,
        draw(st.integers(1, 100)), draw(st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)),
        draw(st.none() | st.text(max_size=3)), draw(st.none() | st.just("parent")),
        draw(st.floats(0, 100)), tuple((c, 1) for c in range(draw(st.integers(0, min(L, 3))))))


@settings(max_examples=200, deadline=None)
@given(st.lists(requests(), max_size=6), st.floats(1e-3, 1e3), st.floats(0, 1e6))
def test_scale_time_and_window_match_dataclasses_replace(reqs, factor, start):
    got = scale_time(reqs, factor)
    want = [dataclasses.replace(r, arrival_time=r.arrival_time * factor) for r in reqs]
    assert [repr(r) for r in got] == [repr(r) for r in want] and got == want
    assert all(g.labels is r.labels for g, r in zip(got, reqs))  # shared, as replace shares it
    reqs = sorted(reqs, key=lambda r: r.arrival_time)
    got = window(reqs, start)
    want = [dataclasses.replace(r, arrival_time=r.arrival_time - start) for r in reqs if r.arrival_time >= start]
    assert [repr(r) for r in got] == [repr(r) for r in want]


def test_with_arrival_sets_every_field_of_request():
    # fastreq sets the slots one by one: it must know every field, in dataclass order.
    assert Request.__slots__ == tuple(f.name for f in dataclasses.fields(Request))
    assert not math.isnan(scale_time([Request("a", 0.0, 5)], 2.0)[0].arrival_time)


def test_paused_restores_the_collector_state():
    import gc

    from fairsim.gcpause import paused

    assert gc.isenabled()
    with paused():
        assert not gc.isenabled()
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block leaves it off: the outer one paused it
    assert gc.isenabled()
    try:
        with paused():
            raise KeyError("x")
    except KeyError:
        pass
    assert gc.isenabled()
    gc.disable()
    try:
        with paused():
            pass
        assert not gc.isenabled()  # off before, off after
    finally:
        gc.enable()


def test_main_leaves_the_collector_on_and_nothing_frozen(tmp_path, capsys):
    # main() runs inside long-lived processes (tests, notebooks): it must not freeze anything;
    # only program(), the process's entry point, does, just before exit.
    import gc

    from fairsim.cli import main

    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows(20, 3)))
    assert main(["run", "--trace", str(path), "--policy", "fcfs", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["fcfs"]["requests"] == 20
    assert gc.isenabled() and gc.get_freeze_count() == 0
    # Failing inside the paused set-up (a cache smaller than a prompt) or in the run (a policy
    # that raises) leaves it so too.
    assert main(["run", "--trace", str(path), "--policy", "fcfs", "--kv-blocks", "1"]) == 2
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert main(["run", "--trace", str(path), "--policy", "tests.test_fixed_cost:Broken"]) == 1
    assert "policy 'tests.test_fixed_cost:Broken'" in capsys.readouterr().err
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_main_unfreezes_when_stdout_breaks_before_the_first_run(tmp_path, monkeypatch):
    # The reader of stdout leaves (`fairsim run ... | head -0`) while the trace line is printed:
    # after the frozen set-up, before any Engine.run could unfreeze. main() returns 141 and must
    # leave nothing in the permanent generation.
    import gc
    import io
    import os
    import sys

    from fairsim.cli import main

    class BrokenStdout(io.StringIO):
        def __init__(self):
            super().__init__()
            self.fd = os.open(os.devnull, os.O_WRONLY)

        def write(self, s):
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self):
            return self.fd

    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows(20, 5)))
    broken = BrokenStdout()
    monkeypatch.setattr(sys, "stdout", broken)
    try:
        assert main(["run", "--trace", str(path), "--policy", "fcfs"]) == 141
        assert gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
        os.close(broken.fd)


class Broken:
    """A user policy whose order() raises (for the freeze test above)."""

    name = "broken"

    def order(self, waiting, now):
        raise RuntimeError("broken policy")


def test_program_freezes_before_exit(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows(20, 4)))
    code = ("import gc, sys; from fairsim.__main__ import program; sys.argv = ['fairsim', 'run', '--trace', "
            f"{str(path)!r}, '--policy', 'fcfs', '--format', 'json']; status = program(); "
            "print('frozen', gc.get_freeze_count() > 0, 'status', status, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "frozen True status 0" in out.stderr, out.stderr
    assert json.loads(out.stdout)["fcfs"]["requests"] == 20


def test_program_imports_the_command_line_with_the_collector_off():
    # fairsim/__main__.py: no cyclic collection while fairsim.cli and what it imports load (their
    # objects are long-lived): with a collection due at every allocation, none may start before
    # fairsim.cli has its main, and the collector is on again after the import.
    import subprocess
    import sys

    code = ("import gc, sys\n"
            "during = []\n"
            "def seen(phase, info):\n"
            "    cli = sys.modules.get('fairsim.cli')\n"
            "    if phase == 'start' and cli is not None and not hasattr(cli, 'main'):\n"
            "        during.append(info['generation'])\n"
            "gc.callbacks.append(seen)\n"
            "from fairsim.__main__ import program\n"
            "gc.set_threshold(1)\n"
            "sys.argv = ['fairsim', '--version']\n"
            "try:\n"
            "    program()\n"
            "except SystemExit:\n"
            "    pass\n"
            "print('during', len(during), 'enabled', gc.isenabled(), 'frozen', gc.get_freeze_count() > 0, "
            "file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "during 0 enabled True frozen True" in out.stderr, out.stderr
    assert out.stdout.startswith("fairsim ")  # --version ran


def test_no_exit_freeze_once_torch_is_imported(monkeypatch):
    # Live commands import vLLM/PyTorch; skipping the final collection there made triton's
    # nanobind print hundreds of "leaked type" lines at exit (hook-overhead, found by the lead).
    import sys

    from fairsim.gcpause import freeze_for_exit

    before = gc.get_freeze_count()
    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch") or object())
    freeze_for_exit()
    assert gc.get_freeze_count() == before


@settings(max_examples=200, deadline=None)
@given(requests(), st.sampled_from(["", "parent"]), st.integers(-2, 2), st.floats(-1, 1))
def test_make_request_is_request(r, rid, dl, dt):
    # Same object and the same checks (messages) as the dataclass constructor, good or bad.
    from fairsim.traces.fastreq import make_request

    fields = [getattr(r, f) for f in Request.__slots__]
    fields[0] = rid or fields[0]  # "parent" may now equal ``after``: refused by both
    fields[2] += dl  # may fall below 1
    fields[9] += dt  # delay may fall below 0
    try:
        want = Request(*fields)
    except ValueError as exc:
        try:
            make_request(*fields)
        except ValueError as got:
            assert str(got) == str(exc)
        else:
            raise AssertionError(f"make_request accepted {fields}")
    else:
        got = make_request(*fields)
        assert repr(got) == repr(want) and got == want and got.labels is want.labels


def test_a_digit_run_beyond_pythons_int_limit_inside_a_string_reads_as_by_json(tmp_path):
    # A label holding a long decimal string (a hash or an id written as text): the 19+ digit
    # scan must not convert the run (Python refuses int() of more than 4300 digits), so the
    # line reads as json reads it.
    rec = {"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1], "note": "7" * 5000}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    assert fast_json_lines(path) == [(1, rec)]
    assert load_trace(path).requests[0].labels == {"note": "7" * 5000}


def test_json_beyond_pythons_limits_is_a_record_error(tmp_path):
    # Valid JSON that Python's json cannot read (an integer of 5000 digits; 100,000 nested
    # arrays around a NaN, which orjson refuses, so json reads the line): an error naming the
    # file and line, as any unreadable record, not an escaped ValueError or RecursionError.
    import sys

    head = '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1], "x": '
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # the interpreter's default (the test runner may have raised it)
    try:
        for value in ("7" * 5000, "[" * 100_000 + "NaN" + "]" * 100_000):
            path = tmp_path / "t.jsonl"
            path.write_text(head + value + "}\n")
            [(line, err)] = list(iter_json_lines(path))
            assert line == 1 and isinstance(err, TraceFormatError)
            assert str(err).startswith(f"{path}:1: field '<json>': cannot be read: ")
    finally:
        sys.setrecursionlimit(limit)


def test_a_timestamp_too_large_for_a_float_names_the_field(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": ' + "7" * 400 + ', "input_length": 10, "output_length": 1, "hash_ids": [1]}\n')
    try:
        load_trace(path)
    except TraceFormatError as exc:
        assert str(exc).startswith(f"{path}:1: field 'timestamp': ")
    else:
        raise AssertionError("read a timestamp of 400 digits")
