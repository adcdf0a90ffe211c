"""Defects found in the twenty-seventh session's new-user passes, each with the case that showed it."""

import json

from fairsim.cli import main
from fairsim.traces import load_trace


def test_a_mooncake_delay_that_follows_no_turn_is_warned_not_dropped_silently(tmp_path, capsys):
    # Session a's first turn and a record of no session give a delay: it counts from the turn a
    # record follows, so it cannot be used; the later turn's 200 ms is its think time.
    p = tmp_path / "d.jsonl"
    rows = [{"session_id": "a", "delay": 500, "input_length": 100, "output_length": 5, "hash_ids": [1]},
            {"session_id": "a", "delay": 200, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]},
            {"delay": 50, "input_length": 100, "output_length": 5, "hash_ids": [9]}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    t = load_trace(p)
    assert sorted((r.request_id, r.after, r.delay_s) for r in t.requests) == [
        ("d:1", None, 0.5), ("d:2", "d:1", 0.2), ("d:3", None, 0.05)]
    assert [str(w) for w in t.warnings if "follow no turn" in str(w)] == [
        f"{p}: 2 records have a delay but follow no turn (a session's first turn, or a record without "
        "session_id): a delay counts from the turn a record follows, so theirs is not used (the session "
        "starts at its timestamp, or as --session-rate places it)"]
    # Said under either replay (open loop places turns by their delays too).
    for replay in ("open", "closed"):
        assert main(["run", "--trace", str(p), "--policy", "fcfs", "--replay", replay, "--format", "json"]) == 0
        assert "2 records have a delay but follow no turn" in capsys.readouterr().err
    # A file whose turns all follow one: no such warning.
    p.write_text("".join(json.dumps(r) + "\n" for r in rows[:1] + rows[1:2]).replace('"delay": 500, ', ""))
    assert not [w for w in load_trace(p).warnings if "follow no turn" in str(w)]


def test_a_user_policy_that_is_an_object_is_named_with_its_article(tmp_path, monkeypatch, capsys):
    (tmp_path / "teamobj.py").write_text("inst = object()\nclass P:\n    order = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["run", "--policy", "teamobj:inst", "--format", "json"]) == 2
    assert "'inst' is an object, not a class" in capsys.readouterr().err
    assert main(["run", "--policy", "teamobj:P", "--format", "json"]) == 2
    assert "is not a policy" in capsys.readouterr().err


def test_the_disaggregated_note_says_1_request_held():
    from fairsim.cli_disagg import format_disaggregated

    row = {"mode": "disaggregated", "held_p50_s": 0.5, "held_p99_s": 0.5, "transfer_p50_s": 0.01,
           "transfer_p99_s": 0.01, "prefill_load_imbalance": 1.0, "decode_load_imbalance": 1.0,
           "by_instance": [{"role": "prefill", "instance": 0, "requests": 1, "busy_s": 0.2, "tokens": 100,
                            "evictions": 0, "preemptions": 0, "held_max": 1}]}
    assert "(1 request held)" in format_disaggregated({"fcfs": {**row, "held_requests": 1}})
    assert "(742 requests held)" in format_disaggregated({"fcfs": {**row, "held_requests": 742}})


def test_bench_refuses_a_router_the_trace_cannot_serve_before_any_child(tmp_path, capsys):
    # Was refused only when the first policy's own run started ("its fairsim run exited 2").
    p = tmp_path / "ns.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
                 '{"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n')
    for tile in ([], ["--tile", "2"]):
        assert main(["bench", "--trace", str(p), "--instances", "2", "--router", "session-affinity",
                     "--policies", "fcfs", *tile]) == 2
        err = capsys.readouterr().err
        assert err.strip().splitlines()[-1] == (
            f"fairsim: error: {p}: --router session-affinity needs sessions (a session_id per request) and the "
            "trace has none; use a session trace or another router")
        assert "bench: fcfs" not in err
