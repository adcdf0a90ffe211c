"""Live: the hook records a served trace; the simulator replays the recording and finds the same
cached tokens per request as the engine observed."""

from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.live

from fairsim.live.engine import ENGINE_ENV  # noqa: E402  (no vLLM import)

for _k, _v in ENGINE_ENV.items():
    os.environ.setdefault(_k, _v)

from fairsim.cli import main  # noqa: E402
from fairsim.costmodel import load_profile  # noqa: E402
from fairsim.live.engine import LiveConfig  # noqa: E402
from fairsim.live.equivalence import equivalence_trace  # noqa: E402
from fairsim.live.replay import replay_virtual  # noqa: E402
from fairsim.traces import load_trace  # noqa: E402


@pytest.mark.parametrize("policy", ["fcfs", "fairway"])
def test_recording_replays_to_the_observed_cache_hits(tmp_path, policy, capsys):
    requests = equivalence_trace(60, seed=3, rate_per_s=8.0)
    path = tmp_path / "rec.jsonl"
    profile = "a6000-llama3.1-8b-vllm-prior"
    live = replay_virtual(requests, LiveConfig(policy=policy, kv_blocks=48, max_num_seqs=16,
                                               record=str(path)), load_profile(profile))
    rec = load_trace(str(path))
    assert len(rec.requests) == len(requests)  # the warm-up request is not in the file
    assert {r.hash_block_size for r in rec.requests} == {128}
    observed = [r.labels["observed_cached_tokens"] for r in rec.requests]
    assert sorted(observed) == sorted(live.requests["cached_tokens"].tolist())
    assert sum(observed) > 0
    out = tmp_path / "sim"
    code = main(["run", "--trace", str(path), "--policy", policy, "--profile", profile,
                 "--kv-blocks", "48", "--max-num-seqs", "16", "--out", str(out), "--format", "json"])
    assert code == 0
    capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())[policy]
    assert summary["evictions"] > 50  # the cache is under pressure
    import pandas as pd

    sim = pd.read_parquet(out / f"requests-{policy}.parquet").set_index("request_id")
    same = sum(int(sim.loc[r.request_id, "cached_tokens"]) == r.labels["observed_cached_tokens"]
               for r in rec.requests)
    assert same / len(rec.requests) >= 0.99
    # analyze reads the engine's own scheduling times from the recording
    assert main(["analyze", str(path), "--format", "json", "--kv-blocks", "48"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["spread"]["source"] == "observed scheduling times"
    print(f"{policy}: {same} of {len(rec.requests)} requests with identical cached tokens")


def test_replay_command_records(tmp_path, monkeypatch):
    """The recording is complete when the command returns, whatever else still holds the engine
    (here: a list, as an earlier test's leftovers or a traceback could) and whatever the garbage
    collector does: an engine that is only dropped, not shut down, would write it later or never."""
    import gc

    import fairsim.live.replay as replay_mod
    from fairsim.traces import write_mooncake
    from fairsim.traces.trace import Trace

    trace = tmp_path / "t.jsonl"
    write_mooncake(Trace("t", "test", tuple(equivalence_trace(8, seed=2, rate_per_s=4.0))), trace)
    rec = tmp_path / "rec" / "recorded.jsonl"
    out = tmp_path / "out"
    held = []
    make_llm = replay_mod.make_llm
    monkeypatch.setattr(replay_mod, "make_llm", lambda cfg: held.append(make_llm(cfg)) or held[-1])
    monkeypatch.setattr(gc, "collect", lambda *a, **k: 0)
    gc.disable()
    try:
        assert main(["replay", "--engine", "vllm", "--virtual", "--trace", str(trace), "--policy", "lpm",
                     "--kv-blocks", "64", "--record", str(rec), "--out", str(out)]) == 0
    finally:
        gc.enable()
    recorded = load_trace(str(rec))
    assert len(recorded.requests) == 8
    assert json.loads((rec.parent / "recorded.jsonl.meta.json").read_text())["requests"] == 8
    # On the virtual clock the recorded TTFT is the replay table's: the end of the step that
    # produced the first token (its profile time included) minus the arrival, never 0.
    import pandas as pd

    table = pd.read_parquet(out / "requests-lpm.parquet").set_index("request_id")
    observed = {r.request_id[:-9]: r.labels["observed_ttft_ms"] for r in recorded.requests}  # vLLM's "-suffix"
    assert sorted(observed) == sorted(table.index)
    for rid, ms in observed.items():
        assert ms == pytest.approx(1000.0 * table.loc[rid, "ttft_s"], abs=1e-3), rid
    assert min(observed.values()) > 0


def test_accept_live_engine(tmp_path, capsys):
    """accept --engine vllm replays each window live; the verdict table and exit code agree."""
    from fairsim.traces import write_mooncake
    from fairsim.traces.trace import Trace

    trace = tmp_path / "t.jsonl"
    write_mooncake(Trace("t", "test", tuple(equivalence_trace(24, seed=4, rate_per_s=6.0))), trace)
    code = main(["accept", str(trace), "--engine", "vllm", "--policy", "fcfs", "--windows",
                 "first:0-2,second:2-4", "--warmup", "0", "--kv-blocks", "64", "--format", "json",
                 "--plots", str(tmp_path / "plots")])
    data = json.loads(capsys.readouterr().out)
    assert data["engine"] == "vllm" and [w["name"] for w in data["windows"]] == ["first", "second"]
    for w in data["windows"]:
        assert set(w["stats"]) == {"fcfs", "lpm"} and w["stats"]["fcfs"]["p50_s"] > 0
    assert code == (0 if data["pass"] else 1)
    assert (tmp_path / "plots" / "first-ttft_cdf.png").exists()
