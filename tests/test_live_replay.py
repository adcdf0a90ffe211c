"""Replay and decision equivalence against a real vLLM engine (tiny dummy-weight Llama, CPU)."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

pytestmark = pytest.mark.live

from fairsim.live.engine import ENGINE_ENV  # noqa: E402  (no vLLM import)

for _k, _v in ENGINE_ENV.items():  # in-process core, small KV space, one bound OpenMP thread
    os.environ.setdefault(_k, _v)

from fairsim.cli import main  # noqa: E402
from fairsim.costmodel import load_profile  # noqa: E402
from fairsim.live.engine import LiveConfig  # noqa: E402
from fairsim.live.equivalence import compare, equivalence_trace  # noqa: E402
from fairsim.traces import write_mooncake  # noqa: E402
from fairsim.traces.trace import Trace  # noqa: E402

SIM_COLUMNS = ["request_id", "arrival_s", "prompt_tokens", "cached_tokens", "first_scheduled_s",
               "first_token_s", "ttft_s", "finish_s", "queue_delay_s", "first_scheduled_step",
               "finish_step", "preemptions"]


class TestDecisionEquivalence:
    """Simulator and vLLM (virtual clock) agree per request under eviction pressure."""

    # klpm4: on_admitted (its turn counter) is fed the same admissions in both engines.
    @pytest.mark.parametrize("policy", ["fcfs", "lpm", "fairway", "klpm4"])
    def test_identical_decisions(self, policy):
        requests = equivalence_trace(40, seed=1, rate_per_s=8.0)
        eq = compare(requests, policy, load_profile("a6000-llama3.1-8b-vllm-prior"),
                     LiveConfig(kv_blocks=48, max_num_seqs=16))
        assert eq.evictions > 50  # the cache is under pressure
        assert eq.table["sim_cached_tokens"].sum() > 0  # and hits happen
        assert eq.fraction_identical >= 0.99, eq.first_difference()


class TestReplayCommand:
    """`fairsim replay --engine vllm` writes the simulator's per-request table."""

    def test_realtime_replay_table(self, tmp_path):
        trace = Trace("t", "test", tuple(equivalence_trace(6, seed=2, rate_per_s=4.0)))
        path = tmp_path / "t.jsonl"
        write_mooncake(trace, path)
        out = tmp_path / "out"
        rc = main(["replay", "--engine", "vllm", "--trace", str(path), "--policy", "lpm",
                   "--kv-blocks", "64", "--time-scale", "0.5", "--out", str(out)])
        assert rc == 0
        table = pd.read_parquet(out / "requests-lpm.parquet")
        assert list(table.columns[: len(SIM_COLUMNS)]) == SIM_COLUMNS
        assert len(table) == 6 and table["ttft_s"].gt(0).all()
        assert table["cached_tokens"].sum() > 0  # shared system prompt / excerpts hit
        assert (table["first_token_s"] >= table["arrival_s"]).all()
        summary = json.loads((out / "summary.json").read_text())
        assert summary["lpm"]["requests"] == 6 and summary["lpm"]["policy_errors"] == 0


class TestClosedLoopSessions:
    """Session traces replay closed-loop in vLLM as in the simulator (virtual clock)."""

    @pytest.mark.parametrize("policy", ["fcfs", "fairway"])
    def test_identical_decisions(self, policy):
        from fairsim.live.equivalence import session_trace

        requests = session_trace(10, seed=1, session_rate_per_s=8.0)
        assert sum(r.after is not None for r in requests) > 30  # mostly follow-up turns
        eq = compare(requests, policy, load_profile("a6000-llama3.1-8b-vllm-prior"),
                     LiveConfig(kv_blocks=48, max_num_seqs=16))
        assert eq.evictions > 40 and eq.table["sim_cached_tokens"].sum() > 0
        assert eq.fraction_identical == 1.0, eq.first_difference()

    def test_virtual_replay_command_sends_turns_after_their_predecessor(self, tmp_path, monkeypatch):
        from fairsim.live.equivalence import session_trace

        requests = session_trace(4, seed=3, session_rate_per_s=4.0)
        monkeypatch.setattr("fairsim.options.load_trace",
                            lambda *a, **k: Trace("agent", "agent.jsonl", tuple(requests)))
        out = tmp_path / "out"
        rc = main(["replay", "--engine", "vllm", "--virtual", "--trace", "agent.jsonl",
                   "--policy", "lpm", "--kv-blocks", "64", "--think-scale", "2", "--out", str(out)])
        assert rc == 0
        t = pd.read_parquet(out / "requests-lpm.parquet").set_index("request_id")
        by_id = {r.request_id: r for r in requests}
        for rid, row in t.iterrows():
            r = by_id[rid]
            if r.after is None:
                assert row["released_s"] == r.arrival_time
            else:  # sent when its predecessor finished in vLLM, plus twice its think time
                assert row["released_s"] == pytest.approx(t.loc[r.after, "finish_s"] + 2 * r.delay_s)
            assert row["ttft_s"] == pytest.approx(row["finish_s"] - row["released_s"])
        assert json.loads((out / "summary.json").read_text())["lpm"]["replay"] == "closed"

    def test_realtime_replay_follows_the_live_finish(self):
        from fairsim.live.equivalence import session_trace
        from fairsim.live.replay import replay_realtime

        requests = session_trace(3, seed=4, session_rate_per_s=4.0)
        res = replay_realtime(requests, LiveConfig(policy="fcfs", kv_blocks=64, max_num_seqs=16),
                              time_scale=0.5, think_scale=0.5)
        t = res.requests.set_index("request_id")
        for r in requests:
            row = t.loc[r.request_id]
            if r.after is None:  # first turns at their scaled timestamps
                assert row["released_s"] == pytest.approx(0.5 * r.arrival_time)
            else:  # wall-clock finish of the predecessor in vLLM + half its think time
                assert row["released_s"] == pytest.approx(t.loc[r.after, "finish_s"] + 0.5 * r.delay_s)
            assert row["first_token_s"] >= row["released_s"] and row["ttft_s"] > 0
