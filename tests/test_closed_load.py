"""Offered load of closed-loop replays (fairsim/traces/closedload.py) and its CLI lines.

The trace of every test: session A starts at 0 s (a1; a2 2 s after a1 finishes; a3 3 s after a2),
session B at 10 s (b1; b2 1 s after b1). Each turn is 4,000 tokens; the cost model is linear
(``a = k = d = 0``, ``b = 1e-4`` s/token), so a turn's best-case busy time is 0.4 s and the five
take 2.0 s cold.
"""

from __future__ import annotations

import json

import pytest

from fairsim.cli import main
from fairsim.costmodel import Profile
from fairsim.traces.closedload import (chain_offsets, closed_loop_bound, closed_loop_time_scale, delivered_load,
                                       zero_wait)
from fairsim.types import Request

LINEAR = Profile(name="linear", kind="prior", a_s=0.0, b_s_per_token=1e-4, k_s_per_pair=0.0, d_s_per_request=0.0,
                 idle_prompt_tokens=(1, 8192), idle_seconds=(1e-4, 0.8192))
BUDGET = 8192


def _turn(rid: str, t: float, after: str | None = None, delay: float = 0.0, session: str = "A") -> Request:
    return Request(rid, t, 4000, session_id=session, after=after, delay_s=delay)


def _trace() -> list[Request]:
    return [_turn("a1", 0.0), _turn("a2", 1.0, "a1", 2.0), _turn("a3", 2.0, "a2", 3.0),
            _turn("b1", 10.0, session="B"), _turn("b2", 11.0, "b1", 1.0, session="B")]


def test_chain_offsets_root_and_summed_scaled_delays():
    got = chain_offsets(_trace(), think_scale=2.0)
    assert got == {"a1": (0.0, 0.0), "a2": (0.0, 4.0), "a3": (0.0, 10.0), "b1": (10.0, 0.0), "b2": (10.0, 2.0)}


def test_a_turn_whose_predecessor_is_absent_starts_its_own_chain():
    got = chain_offsets([_turn("x", 5.0, "gone", 3.0)], think_scale=1.0)
    assert got == {"x": (5.0, 0.0)}


def test_zero_wait_sends_each_turn_at_root_plus_delays():
    sent = [(r.request_id, r.arrival_time) for r in zero_wait(_trace(), 1.0)]
    assert sent == [("a1", 0.0), ("a2", 2.0), ("a3", 5.0), ("b1", 10.0), ("b2", 11.0)]


def test_bound_load_is_busy_over_zero_wait_span():
    bound = closed_loop_bound(_trace(), LINEAR, BUDGET, 60.0, think_scale=1.0)
    assert bound.busy_s == pytest.approx(2.0)
    assert bound.span_s == pytest.approx(11.0)
    assert bound.load == pytest.approx(2.0 / 11.0)


def test_time_scale_solves_the_bound_exactly():
    # target 0.1: span 20 s; lines s*10 + 0 (b1) and s*10 + 1 (b2) -> s = (20 - 1) / 10 = 1.9;
    # then the sends: a3 at 5, b2 at 19 + 1 = 20 -> span 20, load 2 / 20 = 0.1.
    scale = closed_loop_time_scale(_trace(), LINEAR, BUDGET, 0.1, think_scale=1.0)
    assert scale == pytest.approx(1.9)
    from fairsim.traces import scale_time

    bound = closed_loop_bound(scale_time(_trace(), scale), LINEAR, BUDGET, 60.0, 1.0)
    assert bound.load == pytest.approx(0.1)


def test_time_scale_with_a_long_session_binding_at_small_scales():
    # target 0.3: span 6.67 s > the 5 s of session A's think times; b2's line binds: s = 5.67 / 10.
    scale = closed_loop_time_scale(_trace(), LINEAR, BUDGET, 0.3, think_scale=1.0)
    assert scale == pytest.approx((2.0 / 0.3 - 1.0) / 10.0)


def test_target_above_what_think_times_allow_names_think_scale():
    # Session A's think times take 5 s whatever the starts: at most 2 / 5 = 0.4.
    with pytest.raises(ValueError) as err:
        closed_loop_time_scale(_trace(), LINEAR, BUDGET, 0.8, think_scale=1.0)
    msg = str(err.value)
    assert "--target-load 0.8" in msg and "at most load 0.4" in msg
    assert "--think-scale below 0.5" in msg  # 1 x 0.4 / 0.8


def test_target_with_every_start_at_one_instant_names_session_rate():
    starts_together = [_turn("a1", 0.0), _turn("a2", 1.0, "a1", 2.0), _turn("b1", 0.0, session="B")]
    with pytest.raises(ValueError) as err:
        closed_loop_time_scale(starts_together, LINEAR, BUDGET, 0.1, think_scale=1.0)
    assert "the 2 sessions all start at one instant" in str(err.value)
    assert "--session-rate" in str(err.value) and "--think-scale" in str(err.value)


def test_target_on_one_session_names_think_scale_only():
    with pytest.raises(ValueError) as err:
        closed_loop_time_scale(_trace()[:3], LINEAR, BUDGET, 0.1, think_scale=1.0)
    assert "one session" in str(err.value) and "--session-rate" not in str(err.value)
    assert "--think-scale to scale the 5 s" in str(err.value)


def test_delivered_load_uses_the_send_times():
    sent = {"a1": 0.0, "a2": 2.5, "a3": 6.0, "b1": 10.0, "b2": 19.0}
    load = delivered_load(_trace(), sent, LINEAR, BUDGET, 60.0)
    assert load.span_s == pytest.approx(19.0) and load.load == pytest.approx(2.0 / 19.0)
    with pytest.raises(ValueError, match="never sent"):
        delivered_load(_trace(), {"a1": 0.0}, LINEAR, BUDGET, 60.0)


@pytest.fixture()
def trace_file(tmp_path):
    lines = [{"timestamp": 0, "request_id": "a1", "session_id": "A"},
             {"timestamp": 1000, "request_id": "a2", "session_id": "A", "after": "a1", "delay": 2000},
             {"timestamp": 2000, "request_id": "a3", "session_id": "A", "after": "a2", "delay": 3000},
             {"timestamp": 10000, "request_id": "b1", "session_id": "B"},
             {"timestamp": 11000, "request_id": "b2", "session_id": "B", "after": "b1", "delay": 1000}]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps({**x, "input_length": 4000, "output_length": 1,
                                        "hash_ids": [len(x["request_id"]) * 100 + i for i in range(7)]}) + "\n"
                            for i, x in enumerate(lines)))
    return path


def test_compare_prints_the_bound_and_each_delivered_load(trace_file, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["compare", "--trace", str(trace_file), "--policies", "fcfs,lpm", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "offered load, closed loop, at most" in text and "over 11.0 s" in text
    assert "load delivered under fcfs" in text and "load delivered under lpm" in text
    summary = json.loads((out / "summary.json").read_text())
    info = json.loads((out / "run.json").read_text())
    for name in ("fcfs", "lpm"):
        row = summary[name]
        # b2 is sent 1 s after b1 finishes, so later than 11 s: the delivered load is below the bound.
        assert row["delivered_span_s"] > 11.0
        assert row["delivered_load"] < info["offered_load_figures"]["load"]
        assert row["delivered_span_s"] == pytest.approx(info["delivered_load"][name]["span_s"])


def test_target_load_closed_loop_unreachable_exits_2(trace_file, capsys):
    assert main(["run", "--trace", str(trace_file), "--target-load", "50"]) == 2
    err = capsys.readouterr().err
    assert "--target-load 50" in err and "--think-scale below" in err and "Traceback" not in err


def test_time_scale_on_one_session_warns_that_it_moves_nothing(trace_file, tmp_path, capsys):
    one = tmp_path / "one.jsonl"
    one.write_text("".join(trace_file.read_text().splitlines(keepends=True)[:3]))
    assert main(["run", "--trace", str(one), "--time-scale", "0.7", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert "--time-scale 0.7 changes nothing here" in captured.err
    scaled = json.loads(captured.out)["fairway"]
    assert main(["run", "--trace", str(one), "--format", "json"]) == 0
    plain = json.loads(capsys.readouterr().out)["fairway"]
    assert scaled["ttft_p50_s"] == plain["ttft_p50_s"] and scaled["sim_time_s"] == plain["sim_time_s"]


def test_target_load_closed_loop_in_analyze_uses_the_bound(trace_file, capsys):
    assert main(["analyze", "--trace", str(trace_file), "--target-load", "0.05"]) == 0
    captured = capsys.readouterr()
    assert "(closed loop: it scales the session starts" in captured.err
    assert "offered load, closed loop, at most" in captured.out and "load 0.05" in captured.out


@pytest.mark.parametrize("scale, says", [
    # A session start at exactly 1e9 s, its next turn 1 s later: the scale put it there.
    ("1e10", "request 't:2' (think/tool delay 1 s, from the record's delay or time fields) would be "
             "released closed loop at 1e+09 s or later (its session's first arrival, 1e+09 s, placed by "
             "--time-scale 10000000000.0, plus the think/tool delays before it, 1 s), beyond 1e+09 s, where "
             "float64 time cannot resolve 1 us steps; use a smaller --time-scale or smaller delays (or fix "
             "the record)"),
    # The session start itself past the limit: the option is named, not a turn's think time.
    ("1e11", "fairsim: error: --time-scale 100000000000.0: the last arrival is at 2e+10 s, beyond 1e+09 s, "
             "where float64 time cannot resolve 1 us steps; use a smaller --time-scale"),
])
def test_closed_loop_starts_pushed_out_of_range_name_time_scale(capsys, tmp_path, scale, says):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 100, "input_length": 10, "output_length": 1, "hash_ids": [1], "session_id": "a"}\n'
                    '{"timestamp": 200, "input_length": 600, "output_length": 1, "hash_ids": [1, 2], '
                    '"session_id": "a", "delay": 1000}\n')
    code = main(["run", "--trace", str(path), "--time-scale", scale])
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err, err


@pytest.mark.parametrize("options, says", [
    # The replay is closed by default (the trace has links); --skip-long drops both followers.
    (["--max-model-len", "1030", "--skip-long"],
     "fairsim: warning: closed-loop replay: no request kept follows another (the turns that follow one were cut "
     "by --skip-long), so every request is sent at its own timestamp, as in open loop"),
    (["--max-requests", "2", "--replay", "closed"],
     "fairsim: warning: --replay closed: no request kept follows another (the turns that follow one were cut by "
     "--window-start/--window-end/--max-requests), so every request is sent at its own timestamp, as in open loop"),
])
def test_closed_loop_whose_links_were_all_cut_says_what_cut_them(capsys, tmp_path, options, says):
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2], "session_id": "a"}\n'
        '{"timestamp": 100, "input_length": 600, "output_length": 5, "hash_ids": [7, 8], "session_id": "b"}\n'
        '{"timestamp": 500, "input_length": 1536, "output_length": 10, "hash_ids": [1, 2, 3], "session_id": "a", '
        '"delay": 2000}\n'
        '{"timestamp": 900, "input_length": 1100, "output_length": 3, "hash_ids": [7, 8, 9], "session_id": "b", '
        '"delay": 1000}\n')
    code = main(["run", "--trace", str(path), "--mode", "colocated", "--policy", "fcfs", *options])
    err = capsys.readouterr().err
    assert code == 0 and says in err.splitlines(), err
    assert "no request of this trace follows another" not in err
