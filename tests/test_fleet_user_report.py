"""What a new user of fleets and ``--mode disaggregated`` ran into, each pinned by its fixed
behaviour: ``--seed`` with a trace and a sampling router, a slow KV link (the decode engine that
waited on nothing), the link's bound, sweep keys, bench's record of the deployment, messages
that echo values as written.

Numbers by hand: the shipped conversation window's requests at 131,072 KV bytes per token
(the default profile's).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from fairsim.cli import main
from fairsim.errors import SweepSpecError
from fairsim.sweep import expand

ROOT = Path(__file__).resolve().parents[1]
WINDOW = str(ROOT / "fairsim" / "traces" / "data" / "conversation_window.jsonl")


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def requests_of(tmp_path: Path, name: str, *options: str) -> pd.DataFrame:
    out = tmp_path / name
    assert main(["run", "--policy", "fcfs", "--trace", WINDOW, "--max-requests", "80", "--format", "json",
                 "--out", str(out), *options]) == 0
    return pd.read_parquet(out / "requests-fcfs.parquet")


# -- --seed with a trace ---------------------------------------------------------------------------

SAMPLING = ["--instances", "4", "--router", "dynamo-kv", "--router-param", "temperature=1"]


def test_seed_seeds_a_sampling_router_with_a_trace(tmp_path, capsys):
    one = requests_of(tmp_path, "s1", *SAMPLING, "--seed", "1")
    again = requests_of(tmp_path, "s1b", *SAMPLING, "--seed", "1")
    other = requests_of(tmp_path, "s2", *SAMPLING, "--seed", "2")
    assert one["instance"].tolist() == again["instance"].tolist()  # deterministic per seed
    assert one["instance"].tolist() != other["instance"].tolist()  # and the seed is used
    assert json.loads((tmp_path / "s2" / "run.json").read_text())["seed"] == 2


def test_seed_seeds_the_disaggregated_prefill_router(tmp_path):
    disagg = ["--mode", "disaggregated", "--prefill-instances", "4", "--router", "dynamo-kv",
              "--router-param", "temperature=1"]
    one = requests_of(tmp_path, "d1", *disagg, "--seed", "1")
    other = requests_of(tmp_path, "d2", *disagg, "--seed", "2")
    assert one["instance"].tolist() != other["instance"].tolist()


@pytest.mark.parametrize("fleet", [
    [],  # a lone engine
    ["--instances", "4", "--router", "dynamo-kv"],  # temperature 0: the lowest cost, no draw
    ["--instances", "4", "--router", "round-robin"],
])
def test_seed_that_nothing_uses_is_refused(capsys, fleet):
    code, out, err = cli(capsys, "run", "--policy", "fcfs", "--trace", WINDOW, "--max-requests", "20",
                         "--seed", "3", *fleet)
    assert code == 2 and out == ""
    assert "--seed 3: seeds the generated default input, the session starts of --session-rate and a router " \
           "that samples" in err and "none of them is used with this --trace" in err


# -- a slow KV link --------------------------------------------------------------------------------

def test_a_slow_link_on_a_long_trace_finishes(tmp_path):
    # 1 Gbit/s (1.05 s per 1,000 tokens): transfers hold most of the one decode engine's blocks
    # while its running requests grow, so it preempts with nothing left to run until a transfer
    # ends; it used to stop there ("scheduled nothing although 1 requests wait and 0 run").
    out = tmp_path / "slow"
    assert main(["run", "--policy", "fcfs", "--trace", WINDOW, "--max-requests", "400", "--mode", "disaggregated",
                 "--prefill-instances", "2", "--kv-link-gbps", "1", "--format", "json", "--out", str(out)]) == 0
    r = pd.read_parquet(out / "requests-fcfs.parquet")
    assert len(r) == 400 and r["finish_s"].notna().all()
    assert r["decode_preemptions"].sum() > 0
    pd.testing.assert_series_equal(r["transfer_s"], r["transfer_tokens"] * 131072 * 8 / 1e9, check_names=False,
                                   rtol=1e-9)
    info = json.loads((out / "run.json").read_text())
    # The link as used: the given bandwidth, the profile's bytes per token (not null).
    assert info["kv_link_gbps"] == 1 and info["kv_bytes_per_token"] == 131072


@pytest.mark.parametrize("options, named", [
    # 1,000 x 131,072 bytes x 8 bits / 1e-3 bit/s = 1.05e+12 s; 1 s per token needs 1.05e6 bit/s = 0.00105 Gbit/s.
    (["--kv-link-gbps", "1e-12"], ["--kv-link-gbps 1e-12 with 131072 KV bytes per token",
                                   "1.05e+12 s per 1,000 tokens", "at most 1000 s per 1,000 tokens",
                                   "--kv-link-gbps >= 0.00105"]),
    (["--kv-link-gbps", "0.001"], ["--kv-link-gbps 0.001 with", "--kv-link-gbps >= 0.00105"]),
    (["--decode-kv-blocks", "4194305"], ["--decode-kv-blocks 4194305: need 1 to 4194304 blocks"]),
    (["--kv-link-gbps", "-1"], ["--kv-link-gbps -1: need a finite number > 0"]),
])
def test_bad_link_and_sizes_exit_2_before_any_output(capsys, options, named):
    code, out, err = cli(capsys, "run", "--policy", "fcfs", "--trace", WINDOW, "--max-requests", "20",
                         "--mode", "disaggregated", *options)
    assert code == 2 and out == "" and "Traceback" not in err
    for text in named:
        assert text in err, text


def test_the_slowest_link_taken_runs(capsys):
    # 0.0011 Gbit/s: 131,072 x 8 / 1.1e6 = 0.95325 s per token (953,251 ms per 1,000), under the bound.
    code, out, err = cli(capsys, "run", "--policy", "fcfs", "--trace", WINDOW, "--max-requests", "5",
                         "--mode", "disaggregated", "--kv-link-gbps", "0.0011", "--format", "json")
    assert code == 0 and "/ 0.0011 Gbit/s (--kv-link-gbps) = 9.533e+05 ms per 1,000 tokens" in err


def test_a_profile_without_kv_bytes_is_refused_before_the_header(capsys, tmp_path):
    profile = json.loads((ROOT / "fairsim" / "profiles" / "a6000-llama3.1-8b-vllm-prior.json").read_text())
    profile.pop("kv_capacity")
    path = tmp_path / "nokv.json"
    path.write_text(json.dumps(profile))
    code, out, err = cli(capsys, "run", "--policy", "fcfs", "--trace", WINDOW, "--max-requests", "5",
                         "--mode", "disaggregated", "--kv-blocks", "200", "--profile", path)
    assert code == 2 and out == ""
    assert "has no kv_capacity.kv_bytes_per_token; give --kv-bytes-per-token" in err
    assert "trace conversation_window" not in err  # no header line before the error


def test_fractional_bytes_per_token_print_the_value_used(capsys):
    code, err, _ = cli(capsys, "run", "--policy", "fcfs", "--trace", WINDOW, "--max-requests", "5",
                       "--mode", "disaggregated", "--kv-bytes-per-token", "0.4")  # the header: stdout
    # 1,000 tokens x 0.4 bytes x 8 bits / 400e9 bit/s = 8e-09 s = 8e-06 ms (was printed "0.000").
    assert code == 0 and "tokens x 0.4 bytes (--kv-bytes-per-token) / 400 Gbit/s" in err
    assert "= 8e-06 ms per 1,000 tokens" in err
    assert "disaggregated: 1 prefill instance behind round-robin, 1 decode instance (" in err


# -- messages --------------------------------------------------------------------------------------

@pytest.mark.parametrize("param, named", [
    ("prefix_weight", "--router-param 'prefix_weight': expected KEY=VALUE"),
    ("prefix_weight=true", "--router-param prefix_weight=true (router 'llm-d'): need a finite number from 0 to 1e+06"),
])
def test_router_param_errors_echo_what_was_written(capsys, param, named):
    code, out, err = cli(capsys, "run", "--policy", "fcfs", "--trace", WINDOW, "--instances", "2",
                         "--router", "llm-d", "--router-param", param)
    assert code == 2 and named in err and "POLICY.KEY" not in err and "True" not in err


def test_slo_names_both_modes_that_take_it(capsys):
    code, _, err = cli(capsys, "run", "--policy", "fcfs", "--trace", WINDOW, "--slo", "ttft=1")
    assert code == 2 and "--slo needs --mode colocated or --mode disaggregated" in err


def test_a_fleet_of_one_says_instance(capsys):
    code, out, _ = cli(capsys, "run", "--policy", "fcfs", "--trace", WINDOW, "--max-requests", "10",
                       "--router", "least-work")
    assert code == 0 and "fcfs: 1 instance behind least-work," in out


# -- sweeps ----------------------------------------------------------------------------------------

def sweep_error(engine: dict) -> str:
    spec = {"traces": [{"path": WINDOW, "max_requests": 20}], "policies": ["fcfs"], "engine": engine}
    with pytest.raises(SweepSpecError) as info:
        expand(spec, "spec.toml")
    return str(info.value)


def test_sweep_refuses_decode_kv_blocks_with_several_block_sizes():
    said = sweep_error({"mode": "disaggregated", "block_size": [128, 512], "decode_kv_blocks": 600})
    assert "engine.decode_kv_blocks: with several block sizes [128, 512] a block count gives each a " \
           "different decode cache size in tokens" in said
    assert "leave decode_kv_blocks out" in said


def test_sweep_router_params_not_nested_are_explained():
    said = sweep_error({"instances": 2, "router": "dynamo-kv", "router_params": {"overlap_weight": 1}})
    assert "router_params.overlap_weight: not a router; router_params holds each router's parameters under " \
           "its name, e.g. router_params = {dynamo-kv = {overlap_weight = 1}}" in said


def test_sweep_mixes_colocated_and_disaggregated():
    spec = {"traces": [{"path": WINDOW, "max_requests": 20}], "policies": ["fcfs"],
            "engine": {"mode": ["colocated", "disaggregated"], "prefill_instances": [1, 2], "instances": 2}}
    engines = [r.engine for r in expand(spec, "spec.toml")]
    # Each mode's runs take their own keys: the colocated fleet once (prefill_instances are the
    # disaggregated runs'), the disaggregated deployment per prefill count (instances are the fleet's).
    assert engines == [{"mode": "colocated", "instances": 2, "router": "round-robin"},
                       {"mode": "disaggregated", "prefill_instances": 1, "decode_instances": 1, "router": "round-robin"},
                       {"mode": "disaggregated", "prefill_instances": 2, "decode_instances": 1, "router": "round-robin"}]
    # One mode alone still refuses the other's keys.
    assert 'prefill_instances needs mode = "disaggregated"' in sweep_error({"mode": "colocated",
                                                                           "prefill_instances": 2})


# -- bench -----------------------------------------------------------------------------------------

def test_bench_records_the_fleet(capsys, tmp_path):
    code, out, _ = cli(capsys, "bench", "--policies", "fcfs", "--trace", WINDOW, "--max-requests", "30",
                       "--instances", "4", "--router", "dynamo-kv", "--router-param", "overlap_weight=2",
                       "--out", tmp_path)
    assert code == 0
    assert out.splitlines()[0].endswith("; 4 instances behind dynamo-kv (overlap_weight=2)")
    row = json.loads((tmp_path / "bench.json").read_text())["fcfs"]
    assert row["deployment"] == {"mode": "fleet", "instances": 4, "router": "dynamo-kv",
                                 "router_params": {"overlap_weight": 2}}


def test_bench_records_the_disaggregated_deployment(capsys):
    code, out, _ = cli(capsys, "bench", "--policies", "fcfs", "--trace", WINDOW, "--max-requests", "30",
                       "--mode", "disaggregated", "--prefill-instances", "2", "--decode-instances", "2",
                       "--format", "json")
    assert code == 0
    assert json.loads(out)["fcfs"]["deployment"] == {
        "mode": "disaggregated", "prefill_instances": 2, "decode_instances": 2, "router": "round-robin",
        "router_params": {}, "kv_link_gbps": 400.0, "kv_bytes_per_token": 131072, "decode_kv_blocks": None}


def test_bench_vs_one_engine_refuses_disaggregated(capsys):
    code, out, err = cli(capsys, "bench", "--policies", "fcfs", "--trace", WINDOW, "--mode", "disaggregated",
                         "--prefill-instances", "2", "--decode-instances", "2", "--vs-one-engine")
    assert code == 2 and out == ""
    assert "--vs-one-engine: compares a fleet of --instances N engines with one engine; --mode disaggregated " \
           "is not supported" in err and "give --instances" not in err


def test_tune_report_names_the_deployment(capsys, tmp_path):
    code, out, _ = cli(capsys, "tune", "--trace", WINDOW, "--max-requests", "120", "--policies", "fcfs,lpm",
                       "--trials", "2", "--folds", "2", "--targets", "p50<=100s", "--out", tmp_path,
                       "--instances", "2", "--router", "dynamo-kv", "--router-param", "overlap_weight=2")
    assert code == 0
    assert out.splitlines()[0] == "deployment: 2 instances behind dynamo-kv (overlap_weight=2)"
