"""``--mode disaggregated`` beyond ``run``/``compare``'s basics: the decode side's own KV size
(``--decode-kv-blocks``), sweeps, tune, bench, and the figure by role (``--plots``).

Numbers by hand: in the first 40 requests of the shipped conversation window the longest prompt
(``conversation_window:37``, 60,157 tokens) needs 118 blocks of 512 tokens and its prompt and
output (60,157 + 383 - 1 tokens) 119.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from fairsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
WINDOW = str(ROOT / "fairsim" / "traces" / "data" / "conversation_window.jsonl")
DISAGG = ["--mode", "disaggregated", "--prefill-instances", "2", "--decode-instances", "2"]


def run_json(tmp_path: Path, *options: str, requests: int = 40) -> dict:
    out = tmp_path / "run"
    assert main(["run", "--policy", "fcfs", "--trace", WINDOW, "--max-requests", str(requests), *DISAGG,
                 *options, "--format", "json", "--out", str(out)]) == 0
    return json.loads((out / "summary.json").read_text())["fcfs"]


# -- --decode-kv-blocks ----------------------------------------------------------------------------

def test_decode_kv_blocks_sizes_the_decode_side_only(tmp_path, capsys):
    s = run_json(tmp_path, "--kv-blocks", "118", "--decode-kv-blocks", "119")
    # The prefill side holds prompts only (118 blocks: the longest prompt); each decode engine 119.
    assert s["kv_blocks"] == 118 and s["decode_kv_blocks"] == 119
    steps = pd.read_parquet(tmp_path / "run" / "steps-fcfs.parquet")
    assert steps.loc[steps["role"] == "decode", "kv_blocks_used"].max() <= 119
    assert steps.loc[steps["role"] == "prefill", "kv_blocks_used"].max() <= 118
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["decode_kv_blocks"] == 119
    # One request's worth of decode KV serialises the decode side: requests wait held.
    assert s["held_requests"] > 0
    assert "119 KV blocks each (--decode-kv-blocks)" in capsys.readouterr().err


def test_default_decode_side_is_the_prefill_sides(tmp_path):
    s = run_json(tmp_path, "--kv-blocks", "400")
    assert s["kv_blocks"] == 400 and s["decode_kv_blocks"] == 400


@pytest.mark.parametrize("options, named", [
    # No --decode-kv-blocks: the decode side is the prefill side's 118 blocks, one short.
    (["--kv-blocks", "118"], ["the decode side is too small for request 'conversation_window:37'",
                              "need 119 KV blocks", "--decode-kv-blocks 119 or more",
                              "--kv-blocks/--kv-tokens to 119 blocks"]),
    (["--decode-kv-blocks", "50"], ["the decode side is too small", "a decode instance holds 50",
                                    "--decode-kv-blocks 50; give --decode-kv-blocks 119 or more"]),
    (["--kv-blocks", "117", "--decode-kv-blocks", "500"], ["the prefill side is too small",
                                                           "needs 118 blocks", "--kv-blocks to at least 118"]),
    (["--decode-kv-blocks", "0"], ["--decode-kv-blocks 0: need 1 to"]),
])
def test_too_small_sides_exit_2_named(tmp_path, capsys, options, named):
    assert main(["run", "--policy", "fcfs", "--trace", WINDOW, "--max-requests", "40", *DISAGG, *options]) == 2
    err = capsys.readouterr().err
    assert all(n in err for n in named), err
    assert "Traceback" not in err


def test_decode_kv_blocks_needs_the_mode(capsys):
    assert main(["run", "--policy", "fcfs", "--trace", WINDOW, "--max-requests", "10",
                 "--decode-kv-blocks", "100"]) == 2
    assert "--decode-kv-blocks needs --mode disaggregated" in capsys.readouterr().err


# -- sweep -----------------------------------------------------------------------------------------

def test_sweep_runs_the_mode_as_fairsim_run_does(tmp_path):
    from fairsim.sweep import RUNS_DIR, run_sweep

    engine = {"mode": "disaggregated", "prefill_instances": [1, 2], "decode_instances": 2,
              "router": ["round-robin", "dynamo-kv"], "router_params": {"dynamo-kv": {"overlap_weight": 2}},
              "decode_kv_blocks": 200}
    summary = run_sweep({"traces": [{"path": WINDOW, "max_requests": 60}], "policies": ["fcfs"], "engine": engine},
                        tmp_path / "sweep", workers=1, progress=False, log=lambda _: None)
    assert (summary["status"] == "ok").all() and len(summary) == 4
    assert list(zip(summary["engine.prefill_instances"], summary["engine.router"])) == [
        (1, "round-robin"), (1, "dynamo-kv"), (2, "round-robin"), (2, "dynamo-kv")]
    assert (summary["engine.decode_kv_blocks"] == 200).all()
    # One prefill engine behind any router: the same run; round robin counts no cache.
    assert summary["ttft_p50_s"][0] == summary["ttft_p50_s"][1]
    assert summary["router_hit_rate"][0] == 0.0 and summary["router_hit_rate"][1] > 0
    assert summary["prefill_load_imbalance"][0] == 1.0
    # The last point is `fairsim run` with the same options, table for table and figure for figure.
    last = summary.iloc[3]
    got = pd.read_parquet(tmp_path / "sweep" / RUNS_DIR / f"{last['run_id']}.parquet")
    s = run_json(tmp_path, "--router", "dynamo-kv", "--router-param", "overlap_weight=2",
                 "--decode-kv-blocks", "200", requests=60)
    expected = pd.read_parquet(tmp_path / "run" / "requests-fcfs.parquet")
    pd.testing.assert_frame_equal(got[expected.columns].reset_index(drop=True), expected)
    for key in ("ttft_p50_s", "tpot_p50_s", "held_p50_s", "held_p99_s", "held_requests", "transfer_p99_s",
                "router_hit_rate", "prefill_load_imbalance", "decode_load_imbalance"):
        assert last[key] == pytest.approx(s[key], rel=1e-12), key


@pytest.mark.parametrize("engine, message", [
    ({"mode": "disaggregated", "prefill_instances": 0}, r"prefill_instances=0: need at least 1 instance"),
    ({"mode": "disaggregated", "kv_link_gbps": -1}, r"kv_link_gbps=-1: need a finite number > 0"),
    ({"decode_kv_blocks": 100}, 'decode_kv_blocks needs mode = "disaggregated"'),
    ({"mode": "disaggregated", "instances": 2}, "instances: mode = \"disaggregated\" counts its engines"),
    ({"mode": "disaggregated", "decode_kv_blocks": 100},
     r"the decode side is too small for request 'conversation_window:37'.*need 119 KV blocks.*"
     r"raise decode_kv_blocks\)"),
    ({"mode": "disaggregated", "kv_blocks": 117, "decode_kv_blocks": 500}, "the prefill side is too small"),
    ({"mode": "disaggregated", "prefill_instances": "2"}, "prefill_instances needs an integer"),
])
def test_bad_disaggregated_keys_are_named(engine, message):
    from fairsim.errors import SweepSpecError
    from fairsim.sweep import expand

    spec = {"traces": [{"path": WINDOW, "max_requests": 40}], "policies": ["fcfs"], "engine": engine}
    with pytest.raises(SweepSpecError, match=message):
        expand(spec, "spec.toml")


# -- tune ------------------------------------------------------------------------------------------

def tune(out: Path, *extra: str) -> int:
    return main(["tune", "--trace", WINDOW, "--max-requests", "120", "--policies", "fcfs,lpm", "--trials", "2",
                 "--folds", "2", "--targets", "p50<=100s", "--out", str(out), "--format", "json",
                 "--mode", "disaggregated", "--decode-instances", "1", *extra])


def test_tune_runs_its_trials_disaggregated(tmp_path, capsys):
    assert tune(tmp_path / "p2", "--prefill-instances", "2", "--router", "dynamo-kv") == 0
    two = json.loads((tmp_path / "p2" / "tune.json").read_text())
    assert two["fleet"] == {"mode": "disaggregated", "prefill_instances": 2, "decode_instances": 1,
                            "router": "dynamo-kv", "router_params": {}, "kv_link_gbps": 400.0,
                            "kv_bytes_per_token": 131072, "decode_kv_blocks": None}  # the link as used
    # The reference (fcfs at its defaults) runs on the same deployment: fcfs against itself is 1.
    assert [r["tail"] for r in two["front"] if r["policy"] == "fcfs" and not r["params"]] == [1.0]
    # Half the prefill engines: the training windows' default-fairway median is longer.
    assert tune(tmp_path / "p1", "--prefill-instances", "1", "--router", "dynamo-kv") == 0
    one = json.loads((tmp_path / "p1" / "tune.json").read_text())
    w_one = one["default_fairway"]["train"]["windows"]["w1"]
    w_two = two["default_fairway"]["train"]["windows"]["w1"]
    assert w_one["requests"] == w_two["requests"] and w_one["p50_s"] > w_two["p50_s"]
    capsys.readouterr()
    # Another deployment makes the study stale, named.
    assert tune(tmp_path / "p2", "--prefill-instances", "2", "--router", "dynamo-kv",
                "--decode-kv-blocks", "600") == 2
    err = capsys.readouterr().err
    assert "fleet: was" in err and '"decode_kv_blocks": null' in err and '"decode_kv_blocks": 600' in err


# -- bench -----------------------------------------------------------------------------------------

def test_bench_passes_the_mode_to_its_runs():
    from fairsim.bench import run_argv
    from fairsim.cli import build_parser
    from fairsim.cli_disagg import disagg_spec

    args = build_parser().parse_args(["bench", "--mode", "disaggregated", "--prefill-instances", "3",
                                      "--decode-instances", "2", "--kv-link-gbps", "100", "--decode-kv-blocks", "300",
                                      "--router", "dynamo-kv", "--tile", "10"])
    disagg_spec(args)  # as cmd_bench does: args.mode is colocated from here
    argv = run_argv(args)
    for option, value in (("--mode", "disaggregated"), ("--prefill-instances", "3"), ("--decode-instances", "2"),
                          ("--kv-link-gbps", "100.0"), ("--decode-kv-blocks", "300"), ("--router", "dynamo-kv")):
        assert argv[argv.index(option) + 1] == value, option
    assert "--tile" not in argv and argv.count("--mode") == 1


def test_bench_measures_the_disaggregated_run(tmp_path, capsys):
    options = ["--prefill-instances", "2", "--decode-instances", "2", "--decode-kv-blocks", "300"]
    assert main(["bench", "--trace", WINDOW, "--max-requests", "40", "--policies", "fcfs", "--mode", "disaggregated",
                 *options, "--out", str(tmp_path / "bench")]) == 0
    bench = json.loads((tmp_path / "bench" / "bench.json").read_text())["fcfs"]
    capsys.readouterr()
    s = run_json(tmp_path, *options[4:])  # DISAGG gives the counts
    assert bench["ttft_p50_s"] == s["ttft_p50_s"] and bench["ttft_p99_s"] == s["ttft_p99_s"]
    assert bench["steps"] == s["steps"] and bench["requests"] == 40


def test_bench_refuses_a_peer_for_the_mode(capsys):
    assert main(["bench", "--trace", WINDOW, "--max-requests", "10", "--policies", "fcfs", "--mode", "disaggregated",
                 "--compare", "dynamo"]) == 2
    assert "--compare dynamo: the peer simulates one engine" in capsys.readouterr().err


# -- --plots ---------------------------------------------------------------------------------------

def test_figure_by_role_draws_the_summary(tmp_path):
    from fairsim.cli_disagg import DisaggSpec, disagg_figure, disagg_summary
    from fairsim.costmodel import DEFAULT_PROFILE, load_profile
    from fairsim.sim import EngineConfig
    from fairsim.traces import load_trace

    profile = load_profile(DEFAULT_PROFILE)
    requests = sorted(load_trace(WINDOW).requests, key=lambda r: r.arrival_time)[:60]
    spec = DisaggSpec(3, 2, "round-robin", decode_kv_blocks=130)
    results = {name: spec.run(name, requests, profile, EngineConfig(kv_blocks=451, mode="colocated"), {})
               for name in ("fcfs", "lpm")}
    fig = disagg_figure(results, "t")
    for j, name in enumerate(results):
        rows = disagg_summary(results[name])["by_instance"]
        reqs = results[name].requests
        # Held time per instance: its requests' held times; both roles add up to every request's.
        for role, col in (("prefill", "instance"), ("decode", "decode_instance")):
            per = [r for r in rows if r["role"] == role]
            assert [r["held_s"] for r in per] == pytest.approx(
                [reqs.loc[reqs[col] == r["instance"], "held_s"].sum() for r in per], rel=1e-12)
            assert sum(r["requests"] for r in per) == 60
        assert sum(r["held_s"] for r in rows) == pytest.approx(2 * reqs["held_s"].sum(), rel=1e-12)
        # The bars: row 0 the 3 prefill instances, row 1 the 2 decode ones; per policy, in order.
        for row, role, n in ((0, "prefill", 3), (1, "decode", 2)):
            per = [r for r in rows if r["role"] == role]
            for col, key in enumerate(("requests", "busy_s", "held_s")):
                bars = fig.axes[3 * row + col].patches[j * n:(j + 1) * n]
                assert [b.get_height() for b in bars] == pytest.approx([r[key] for r in per], rel=1e-12)
    assert results["fcfs"].requests["held_s"].sum() > 0  # a decode cache of about one request: held


def test_plots_write_the_figure_by_role(tmp_path):
    assert main(["run", "--policy", "fcfs", "--trace", WINDOW, "--max-requests", "30", *DISAGG,
                 "--slo", "ttft=10,tpot=0.05", "--plots", str(tmp_path)]) == 0
    assert (tmp_path / "disaggregated.png").stat().st_size > 10_000 and not (tmp_path / "fleet.png").exists()
