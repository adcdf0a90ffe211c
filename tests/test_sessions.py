"""Closed-loop session replay: hand-computed turn times, forks, think scale, errors, placement."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairsim.cli import main
from fairsim.errors import SessionError
from fairsim.policies import make_policy
from fairsim.sim import EngineConfig, simulate
from fairsim.sim.arrivals import Arrivals, check_sessions, resolve_replay
from fairsim.traces.agent import AgentSpec, generate_agent
from fairsim.traces.sessions import detach_cut, place_sessions, session_groups
from fairsim.traces.trace import Trace
from fairsim.types import Request
from tests.utils import constant_profile

PROFILE = constant_profile(step_s=1.0)  # every step lasts 1 s
CONFIG = EngineConfig(budget_tokens=8, block_size=4, kv_blocks=20)


def turn(rid, arrival, prompt_len, hashes=(), session="S", after=None, delay=0.0):
    return Request(rid, arrival, prompt_len, tuple(hashes), 4, 1, {}, session_id=session,
                   after=after, delay_s=delay)


# A 3-turn session (recorded timestamps 0, 1, 3) and an independent request X at 3 s.
T0 = turn("S-t0", 0.0, 12, [1, 2, 3])
T1 = turn("S-t1", 1.0, 16, [1, 2, 3, 4], after="S-t0", delay=1.5)
T2 = turn("S-t2", 3.0, 10, [1, 2], after="S-t1", delay=0.0)
X = turn("X", 3.0, 8, session=None)


def run(requests, replay=None, think_scale=1.0, policy="fcfs"):
    res = simulate(requests, make_policy(policy), PROFILE, CONFIG, replay=replay,
                   think_scale=think_scale)
    return res.requests.set_index("request_id")


class TestClosedLoop:
    """Turn times computed by hand (1 s steps, budget 8 tokens, 4-token blocks)."""

    def test_three_turns_and_a_slow_step(self):
        t = run([T0, T1, T2, X])
        # T0: steps [0,1) 8 tokens and [1,2) 4 tokens -> finishes at 2.
        # X arrives at 3 and takes the step [3,4).
        # T1 is sent at finish(T0) + 1.5 = 3.5 and waits behind X's step; in [4,5) it hits
        # T0's 3 cached blocks (12 tokens; cap (16-1)//4 = 3) and computes 4 -> finishes at 5.
        # T2 is sent at 5 + 0 and hits 2 blocks (cap (10-1)//4 = 2): [5,6) -> finishes at 6.
        assert t.loc["S-t0", "finish_s"] == 2.0
        assert t.loc["S-t1", "released_s"] == 3.5 and t.loc["S-t1", "finish_s"] == 5.0
        assert t.loc["S-t2", "released_s"] == 5.0 and t.loc["S-t2", "finish_s"] == 6.0
        assert t.loc["X", "released_s"] == 3.0 and t.loc["X", "finish_s"] == 4.0
        # TTFT and queue delay are measured from the send time in closed loop.
        assert t.loc["S-t1", "ttft_s"] == 1.5 and t.loc["S-t1", "queue_delay_s"] == 0.5
        assert t.loc["S-t2", "ttft_s"] == 1.0 and t.loc["S-t2", "queue_delay_s"] == 0.0
        assert t.loc["S-t1", "cached_tokens"] == 12 and t.loc["S-t2", "cached_tokens"] == 8
        # The recorded timestamps stay in arrival_s; session columns are in the table.
        assert t.loc["S-t1", "arrival_s"] == 1.0
        assert t.loc["S-t2", "after"] == "S-t1" and t.loc["S-t2", "session_id"] == "S"

    def test_default_is_closed_where_sessions_exist(self):
        assert resolve_replay([T0, T1], None) == "closed"
        assert resolve_replay([T0, X], None) == "open"
        assert resolve_replay([T0, T1], "open") == "open"
        pd.testing.assert_frame_equal(run([T0, T1, T2, X]), run([T0, T1, T2, X], replay="closed"))

    def test_open_loop_keeps_timestamps(self):
        t = run([T0, T1, T2, X], replay="open")
        # T1 is sent at its timestamp 1, before T0 finished; in [1,2) T0's last chunk runs first
        # and caches block 3, so T1 hits 12 tokens and computes 4: both finish at 2.
        assert (t["released_s"] == t["arrival_s"]).all()
        assert t.loc["S-t1", "released_s"] == 1.0 and t.loc["S-t1", "finish_s"] == 2.0
        assert t.loc["S-t1", "ttft_s"] == 1.0

    @pytest.mark.parametrize("scale, t1_release, t2_release, x_finish",
                             [(2.0, 5.0, 6.0, 4.0), (0.0, 2.0, 3.0, 5.0)])
    def test_think_scale(self, scale, t1_release, t2_release, x_finish):
        t = run([T0, T1, T2, X], think_scale=scale)
        # scale 2: T1 at 2 + 2 x 1.5 = 5 (X ran [3,4)), [5,6); T2 at 6.
        # scale 0: T1 at 2, [2,3); T2 and X are both sent at 3. FCFS ties by (release, id),
        # "S-t2" < "X": T2 hits 8 and computes 2, X gets the 6 tokens left -> X finishes at 5.
        assert t.loc["S-t1", "released_s"] == t1_release
        assert t.loc["S-t2", "released_s"] == t2_release
        assert t.loc["S-t2", "released_s"] == t.loc["S-t1", "finish_s"]
        assert t.loc["S-t2", "finish_s"] == t2_release + 1.0 and t.loc["X", "finish_s"] == x_finish

    def test_subagent_runs_beside_its_parent(self):
        a0 = turn("S.sub0-t0", 0.5, 8, session="S.sub0", after="S-t0", delay=0.5)
        a1 = turn("S.sub0-t1", 1.0, 8, session="S.sub0", after="S.sub0-t0", delay=0.0)
        t = run([T0, T1, a0, a1])
        # Both follow T0 (finished at 2): the sub-agent at 2.5, the parent's next turn at 3.5.
        assert t.loc["S.sub0-t0", "released_s"] == 2.5 and t.loc["S-t1", "released_s"] == 3.5
        # The sub-agent's first turn runs [2.5,3.5), so its next turn is sent at 3.5, beside T1:
        # FCFS ties by id, "S-t1" < "S.sub0-t1": T1 (4 new tokens) and a1 (4 of 8) share [3.5,4.5).
        assert t.loc["S.sub0-t0", "finish_s"] == 3.5
        assert t.loc["S.sub0-t1", "released_s"] == 3.5
        assert t.loc["S-t1", "finish_s"] == 4.5 and t.loc["S.sub0-t1", "finish_s"] == 5.5


class TestSessionErrors:
    """Links closed loop cannot follow are refused by name, before running."""

    def test_unknown_after(self):
        bad = turn("S-t1", 1.0, 8, after="nope", delay=1.0)
        with pytest.raises(SessionError, match="'S-t1'.*'nope'.*not in the trace"):
            run([T0, bad])
        run([T0, bad], replay="open")  # open loop ignores the links

    def test_cycle(self):
        a = turn("a", 0.0, 8, after="c")
        b = turn("b", 0.0, 8, after="a")
        c = turn("c", 0.0, 8, after="b")
        with pytest.raises(SessionError, match=r"cycle \(each request waits for the next\).*a -> c -> b -> a"):
            check_sessions([a, b, c, X])

    def test_a_cycle_in_a_file_names_the_file_and_line(self, tmp_path, capsys):
        # At one timestamp (no link goes back in time): the cycle itself is named.
        path = tmp_path / "cyc.jsonl"
        path.write_text("".join(json.dumps({"timestamp": 0, "input_length": 10, "output_length": 1,
                                            "hash_ids": [i], "request_id": rid, "after": after}) + "\n"
                                for i, (rid, after) in enumerate([("a", "b"), ("b", "a")])))
        assert main(["run", "--trace", str(path)]) == 2
        assert capsys.readouterr().err.strip() == (
            f"fairsim: error: {path}:1: 'after' links form a cycle (each request waits for the next), so "
            f"none of them can be sent: a -> b -> a")
        # At two timestamps the cycle has a link back in time, which the reader refuses first.
        later = tmp_path / "later.jsonl"
        later.write_text(path.read_text().replace('"timestamp": 0, "input_length": 10, "output_length": 1, '
                                                  '"hash_ids": [1]', '"timestamp": 1, "input_length": 10, '
                                                  '"output_length": 1, "hash_ids": [1]'))
        assert main(["run", "--trace", str(later)]) == 2
        assert capsys.readouterr().err.strip() == (
            f"fairsim: error: {later}:1: field 'after': this request (arrival 0 s) follows 'b' (line 2), which "
            "arrives later (0.001 s); a turn follows a request that started before it")

    def test_bad_think_scale(self):
        with pytest.raises(ValueError, match="think-scale -1"):
            Arrivals([(T0, None)], "closed", think_scale=-1.0)

    def test_cli_names_the_error(self, monkeypatch, capsys):
        trace = Trace("t", "t.jsonl", (T0, turn("S-t1", 1.0, 8, after="gone", delay=1.0)))
        monkeypatch.setattr("fairsim.options.load_trace", lambda *a, **k: trace)
        assert main(["run", "--trace", "t.jsonl", "--policy", "fcfs"]) == 2
        assert "'after' names 'gone'" in capsys.readouterr().err


class TestPlacement:
    """Seeded Poisson session starts."""

    REQS = [turn(f"s{i}-t{k}", 2.0 * k, 8, session=f"s{i}",
                 after=None if k == 0 else f"s{i}-t{k - 1}", delay=1.0)
            for i in range(50) for k in range(3)]

    def test_deterministic_and_offsets_kept(self):
        a = place_sessions(self.REQS, rate=0.5, seed=3)
        assert a == place_sessions(self.REQS, rate=0.5, seed=3)
        assert a != place_sessions(self.REQS, rate=0.5, seed=4)
        starts = {}
        for r in a:
            starts.setdefault(r.session_id, r.arrival_time)
        assert min(starts.values()) == 0.0
        for r in a:  # the offset of turn k from its session's start stays 2k
            assert r.arrival_time - starts[r.session_id] == pytest.approx(2.0 * int(r.request_id[-1]))
        assert [r.arrival_time for r in a] == sorted(r.arrival_time for r in a)

    def test_rate(self):
        reqs = [turn(f"r{i}", 0.0, 8, session=None) for i in range(4000)]
        times = sorted(r.arrival_time for r in place_sessions(reqs, rate=4.0, seed=1))
        gaps = np.diff(times)
        assert gaps.mean() == pytest.approx(0.25, rel=0.05)  # exponential gaps of mean 1/rate
        assert gaps.std() == pytest.approx(0.25, rel=0.08)

    def test_groups_follow_links_and_ids(self):
        sub = turn("q", 5.0, 8, session="other", after="s0-t0")
        groups = session_groups(self.REQS[:6] + [sub])
        assert [[r.request_id for r in g] for g in groups] == [
            ["s0-t0", "s0-t1", "s0-t2", "q"], ["s1-t0", "s1-t1", "s1-t2"]]

    def test_bad_rate(self):
        with pytest.raises(ValueError, match="session-rate 0"):
            place_sessions(self.REQS, rate=0.0)

    def test_detach_cut(self):
        kept, n = detach_cut(self.REQS[1:3], self.REQS[:3])
        assert n == 1 and kept[0].after is None and kept[1].after == "s0-t1"


@st.composite
def session_traces(draw):
    """Forests of turns: each request is a root or follows an earlier one."""
    n = draw(st.integers(1, 14))
    reqs = []
    for i in range(n):
        parent = draw(st.one_of(st.none(), st.integers(0, i - 1))) if i else None
        # Chained ids as in real traces: one of two families of prefixes, never repeating an id.
        family, depth = draw(st.integers(0, 1)), draw(st.integers(0, 3))
        hashes = [10 * family + j for j in range(depth)]
        reqs.append(Request(
            f"r{i:02d}", draw(st.floats(0, 5, allow_nan=False)), 4 * len(hashes) + draw(st.integers(1, 6)),
            tuple(hashes), 4, 1, {}, session_id=None, after=None if parent is None else f"r{parent:02d}",
            delay_s=draw(st.floats(0, 3, allow_nan=False))))
    return reqs


class TestProperties:
    @given(session_traces(), st.sampled_from([0.0, 0.5, 1.0, 3.0]),
           st.sampled_from(["fcfs", "lpm", "fairway"]))
    def test_no_turn_before_its_predecessor_finished(self, reqs, scale, policy):
        profile = constant_profile(step_s=0.25, per_token_s=0.01)
        res = simulate(reqs, make_policy(policy, profile), profile,
                       EngineConfig(budget_tokens=8, block_size=4, kv_blocks=12), replay="closed",
                       think_scale=scale)
        t = res.requests.set_index("request_id")
        assert t["finish_s"].notna().all()
        assert (t["first_scheduled_s"] >= t["released_s"]).all()
        for r in reqs:
            if r.after is None:
                assert t.loc[r.request_id, "released_s"] == r.arrival_time
            else:
                prev = t.loc[r.after, "finish_s"]
                assert t.loc[r.request_id, "released_s"] == prev + r.delay_s * scale
                assert t.loc[r.request_id, "first_scheduled_s"] >= prev


@dataclass(frozen=True)
class RelativeTrace(Trace):
    """A trace whose times are offsets from each session's start (as Claude Code files)."""

    absolute_time: bool = False


class TestCommand:
    """`fairsim run` on session traces: defaults, options, run.json and the table."""

    SPEC = AgentSpec(num_sessions=4, turns=(2, 3), system_tokens=1024, tool_result_tokens=(64, 512),
                     subagent_prob=0.3, seed=5)

    def run_cli(self, monkeypatch, tmp_path, trace, *extra):
        monkeypatch.setattr("fairsim.options.load_trace", lambda *a, **k: trace)
        out = tmp_path / "out"
        assert main(["run", "--trace", "agent.jsonl", "--policy", "fcfs", "--kv-blocks", "200",
                     "--out", str(out), *extra]) == 0
        return pd.read_parquet(out / "requests-fcfs.parquet"), json.loads((out / "run.json").read_text())

    def test_closed_by_default_and_recorded(self, monkeypatch, tmp_path, capsys):
        table, info = self.run_cli(monkeypatch, tmp_path, generate_agent(self.SPEC),
                                   "--think-scale", "2", "--time-scale", "3")
        assert info["replay"] == "closed" and info["think_scale"] == 2.0
        assert info["session_rate_per_s"] is None
        assert "closed loop" in capsys.readouterr().out
        t = table.set_index("request_id")
        trace = {r.request_id: r for r in generate_agent(self.SPEC).requests}
        for rid, row in t.iterrows():
            r = trace[rid]
            if r.after is None:  # --time-scale scales session starts ...
                assert row["released_s"] == pytest.approx(3 * r.arrival_time)
            else:  # ... and --think-scale the think times
                assert row["released_s"] == pytest.approx(t.loc[r.after, "finish_s"] + 2 * r.delay_s)
        assert set(t["session_id"]) >= {"s0", "s1", "s2", "s3"}

    def test_open(self, monkeypatch, tmp_path):
        table, info = self.run_cli(monkeypatch, tmp_path, generate_agent(self.SPEC), "--replay", "open")
        assert info["replay"] == "open"
        assert (table["released_s"] == table["arrival_s"]).all()

    def test_relative_times_get_poisson_starts(self, monkeypatch, tmp_path, capsys):
        base = generate_agent(self.SPEC)
        rel = RelativeTrace(base.name, base.source, tuple(place_sessions(base.requests, 1.0, 0)))
        # Make every session start at 0: offsets from the session start, as the format records.
        zero = [dataclasses.replace(r, arrival_time=r.arrival_time - min(
            q.arrival_time for q in rel.requests if q.session_id.split(".")[0] == r.session_id.split(".")[0]))
            for r in rel.requests]
        rel = RelativeTrace(base.name, base.source, tuple(zero))
        table, info = self.run_cli(monkeypatch, tmp_path, rel, "--seed", "7")
        assert info["session_rate_per_s"] == 0.1 and info["seed"] == 7
        assert "Poisson process of 0.1/s, seed 7" in capsys.readouterr().out
        placed = {r.request_id: r.arrival_time for r in place_sessions(zero, 0.1, 7)}
        roots = table[table["after"].isna()]
        for rid, released in zip(roots["request_id"], roots["released_s"]):
            assert released == pytest.approx(placed[rid])

    def test_seed_without_placement_is_refused(self, monkeypatch, capsys):
        monkeypatch.setattr("fairsim.options.load_trace", lambda *a, **k: generate_agent(self.SPEC))
        assert main(["run", "--trace", "agent.jsonl", "--seed", "3"]) == 2
        assert "--seed" in capsys.readouterr().err


class TestAgentGenerator:
    def test_structure(self):
        trace = generate_agent(AgentSpec(num_sessions=20, seed=2))
        assert trace == generate_agent(AgentSpec(num_sessions=20, seed=2))
        reqs = {r.request_id: r for r in trace.requests}
        check_sessions(trace.requests)
        subs = [r for r in reqs.values() if r.labels["klass"] == "subagent"]
        assert subs, "seed 2 spawns sub-agents"
        for r in reqs.values():
            if r.after is None:
                assert r.labels["turn"] == 0 and r.labels["klass"] == "agent"
                continue
            prev = reqs[r.after]
            if prev.session_id == r.session_id:  # next turn: the context grows, prefix kept
                assert r.prompt_len > prev.prompt_len
                assert r.block_hashes[: len(prev.block_hashes)] == prev.block_hashes
            else:  # sub-agent spawned by a turn of its parent session
                assert r.session_id.startswith(prev.session_id + ".sub") and r.labels["turn"] == 0
            assert 0 <= r.delay_s <= 60.0
        # The shared system prompt (4096 tokens = 8 blocks) is the same in every session.
        tops = [r for r in reqs.values() if r.labels["klass"] == "agent"]
        assert len({r.block_hashes[:8] for r in tops}) == 1
        # Past it, each session's content is its own.
        own = [r.block_hashes[8] for r in tops if len(r.block_hashes) > 8]
        assert len(own) > 20 and len(set(own)) == len({r.session_id for r in tops if len(r.block_hashes) > 8})


class TestAgentScenario:
    def test_registered_outside_e2(self):
        from fairsim.costmodel import load_profile
        from fairsim.scenarios import build_scenario, scenario_names

        assert "agent" not in scenario_names() and scenario_names(include_sessions=True)[-1] == "agent"
        sc = build_scenario("agent", load_profile(), seed=1, num_sessions=5)
        assert len({r.session_id for r in sc.requests}) >= 5
        res = simulate(sc.requests, make_policy("fcfs"), load_profile(), sc.engine)
        t = res.requests.set_index("request_id")
        follow = t[t["after"].notna()]
        assert (follow["released_s"].to_numpy() >= t.loc[follow["after"], "finish_s"].to_numpy()).all()


class TestPlacementProperties:
    @given(st.lists(st.tuples(st.integers(0, 5), st.floats(0, 100, allow_nan=False)), min_size=1,
                    max_size=30),
           st.floats(0.01, 10), st.integers(0, 3))
    def test_offsets_within_a_session_are_kept(self, rows, rate, seed):
        reqs = [turn(f"r{i:02d}", t, 8, session=f"s{s}") for i, (s, t) in enumerate(rows)]
        placed = {r.request_id: r for r in place_sessions(reqs, rate, seed)}
        assert len(placed) == len(reqs)
        starts = sorted({min(placed[q.request_id].arrival_time for q in g)
                         for g in session_groups(reqs)})
        assert starts[0] == 0.0
        for g in session_groups(reqs):
            base = g[0].arrival_time
            new_base = placed[g[0].request_id].arrival_time
            for r in g:
                assert placed[r.request_id].arrival_time - new_base == pytest.approx(r.arrival_time - base)
