"""``fairsim bench``: tiling, the options passed to each ``fairsim run`` child, the peer check, a run."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

from fairsim.bench import run_argv, tile_trace
from fairsim.cli import build_parser, main
from fairsim.traces.trace import Trace
from tests.utils import make_request, write_failing_policy


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_tile_shifts_renames_and_separates_content():
    reqs = (make_request("a", 0.0, 8, hashes=[1, 2]), make_request("b", 3.0, 8, hashes=[1, 5]))
    trace = Trace("t", "test", reqs)
    tiled = tile_trace(trace, 3).requests
    assert [r.request_id for r in tiled] == ["a", "b", "a#1", "b#1", "a#2", "b#2"]
    # span 3 s + mean gap 3 s: copies start 6 s apart.
    assert [r.arrival_time for r in tiled] == [0.0, 3.0, 6.0, 9.0, 12.0, 15.0]
    # hash ids offset past the largest (5): copies share no prefix content.
    assert tiled[2].block_hashes == (7, 8) and tiled[5].block_hashes == (13, 17)
    assert tile_trace(trace, 1) is trace


def test_run_argv_passes_shaping_and_engine_options_but_not_bench_ones():
    args = build_parser().parse_args([
        "bench", "--policies", "fcfs", "--trace", "x.jsonl", "--time-scale", "8", "--kv-blocks", "99",
        "--param", "fast_weight=8", "--skip-long", "--compare", "sched-sim", "--repeat", "3"])
    argv = run_argv(args)
    assert argv[argv.index("--trace") + 1] == "x.jsonl"
    assert argv[argv.index("--time-scale") + 1] == "8.0"
    assert argv[argv.index("--kv-blocks") + 1] == "99"
    assert argv[argv.index("--param") + 1] == "fast_weight=8"
    assert "--skip-long" in argv
    for bench_only in ("--policies", "--compare", "--repeat", "--tile", "--out"):
        assert bench_only not in argv
    again = build_parser().parse_args(["run", *argv])
    assert (again.trace, again.time_scale, again.kv_blocks, again.param) == ("x.jsonl", 8.0, 99, ["fast_weight=8"])


def test_missing_peer_exits_2_with_the_install_command(capsys, tmp_path):
    code, _, err = _cli(capsys, "bench", "--policies", "fcfs", "--compare", str(tmp_path / "no-such-sim"))
    assert code == 2
    assert "pip install sched-sim" in err and "no-such-sim" in err


def test_a_peer_file_that_is_not_executable_is_named(capsys, tmp_path):
    script = tmp_path / "peer.sh"
    script.write_text("#!/bin/sh\necho TTFT\n")  # mode 644
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs", "--compare", str(script))
    assert code == 2 and out == ""
    assert f"--compare {script}: the file is not executable" in err and "Traceback" not in err


@pytest.mark.parametrize("option, value, given", [("--repeat", "2e0", 2), ("--tile", "1e0", 1)])
def test_bench_counts_take_the_exponent_form_as_other_counts(capsys, option, value, given):
    # Was: "invalid int value: '2e0'", where --max-requests 2e3 and --budget 2e3 are taken.
    assert getattr(build_parser().parse_args(["bench", option, value]), option[2:]) == given
    with pytest.raises(SystemExit) as stop:
        main(["bench", "--policies", "fcfs", option, "2.5"])
    assert stop.value.code == 2
    assert f"argument {option}: '2.5': need a whole number, e.g. 2048 or 2e3" in capsys.readouterr().err


@pytest.mark.parametrize("option, message", [
    (["--time-scale", "0"], "--time-scale 0.0: need a finite factor > 0"),
    (["--budget", "0"], "--budget 0: need >= 1 token per step"),
    (["--max-num-seqs", "0"], "--max-num-seqs 0: need >= 1"),
    (["--kv-blocks", "0"], "--kv-blocks 0: need >= 1 block"),
    (["--max-requests", "0"], "--max-requests 0: need an integer >= 1"),
    (["--think-scale", "-1"], "--think-scale -1.0: need a finite factor >= 0"),
    (["--session-rate", "0"], "--session-rate 0.0: need a finite rate > 0 sessions/s"),
    (["--load-window", "0"], "--load-window 0: need a finite number of seconds >= 0.001 (about one engine step)"),
    (["--kv-tokens", "100"], "--kv-tokens 100: less than one block of 512 tokens"),  # needs the trace's block
    (["--kv-blocks", "2"], "request 'rag-00701' needs 10 blocks of 512 tokens but the KV cache holds 2;"),
])
def test_bad_options_are_refused_before_tiling_and_children(capsys, monkeypatch, option, message):
    def never(*args, **kwargs):
        raise AssertionError("reached the tiling or a child run")

    monkeypatch.setattr("fairsim.bench.tile_trace", never)
    monkeypatch.setattr("fairsim.bench.bench_policy", never)
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs", "--tile", "3", *option)
    assert code == 2 and out == ""
    # Named once, in the bench's own words (a child's refusal would say "fairsim run exited 2").
    assert err.startswith(f"fairsim: error: {message}") and err.count("\n") == 1


def test_bench_runs_each_policy_and_the_peer(capsys, tmp_path):
    # A stand-in peer: reads its trace argument, prints a TTFT line and the count of the requests
    # in it, and exits 0 (sched-sim's CLI shape).
    peer = tmp_path / "peer"
    peer.write_text(_COUNTING_PEER)
    peer.chmod(peer.stat().st_mode | stat.S_IEXEC)
    code, out, _ = _cli(capsys, "bench", "--policies", "fcfs,lpm", "--max-requests", "40", "--repeat", "1",
                        "--compare", str(peer), "--format", "json")
    assert code == 0
    rows = json.loads(out)
    assert set(rows) == {"fcfs", "lpm", "sched-sim"}
    for name in ("fcfs", "lpm"):
        r = rows[name]
        assert r["requests"] == 40 and r["steps"] > 0
        assert 0 < r["loop_s"] < r["process_s"]
        assert abs(r["requests_per_s"] * r["process_s"] - 40) < 1e-6
        assert r["peak_mib"] > 10
        # One pair: the peer's run and this policy's run after it; the ratio is that pair's.
        (peer_s, policy_s), = r["peer_pairs"]
        assert policy_s == r["process_s"] and abs(r["vs_sched_sim"] - peer_s / policy_s) < 1e-9
    assert rows["sched-sim"]["requests"] == 40
    assert sorted(rows["sched-sim"]["process_s_runs"]) == sorted(rows[n]["peer_pairs"][0][0] for n in ("fcfs", "lpm"))
    assert os.path.basename(rows["sched-sim"]["command"].split()[0]) == "peer"


def test_the_peers_trace_is_kept_in_out_for_its_printed_command(capsys, tmp_path):
    peer = tmp_path / "peer"
    peer.write_text(_COUNTING_PEER)
    peer.chmod(0o755)
    code, out, _ = _cli(capsys, "bench", "--policies", "fcfs", "--max-requests", "40",
                        "--compare", peer, "--out", tmp_path / "o")
    assert code == 0
    kept = tmp_path / "o" / "sched-sim-trace.json"
    line = out.strip().splitlines()[-1]
    assert line.startswith(f"sched-sim: {peer} trace {kept} --scheduler chunked") and "temporary" not in line
    trace = json.loads(kept.read_text())
    assert len(trace) == 40 and set(trace[0]) == {"id", "timestamp", "prompt_tokens", "output_tokens"}
    assert json.loads((tmp_path / "o" / "bench.json").read_text())["sched-sim"]["command"].split()[2] == str(kept)
    code, out, _ = _cli(capsys, "bench", "--policies", "fcfs", "--max-requests", "40", "--compare", peer)
    assert code == 0 and out.strip().endswith("; a temporary trace file: --out DIR keeps it)")


#: A stand-in for sched-sim's ``trace`` command: counts the requests of its trace (one ``"id"``
#: each) and prints them as sched-sim's table row does, with a TTFT row.
_COUNTING_PEER = ("#!/bin/sh\nn=$(grep -o '\"id\"' \"$2\" | wc -l)\n"
                  "echo \"| Workload Volume | Completed / Total | $n / $n |\"\n"
                  "echo '| Latency Percentiles | TTFT (p50 / p90 / p99) | 1 / 2 / 3 ms |'\n")


def _logging_peer(log, fail_on: int | None = None) -> str:
    """``_COUNTING_PEER`` that first appends ``P`` to the file ``log``; with ``fail_on``, its run
    of that number (1-based) exits 3 instead."""
    fail = "" if fail_on is None else f'[ "$(grep -c P {log})" = {fail_on} ] && {{ echo broke >&2; exit 3; }}\n'
    return _COUNTING_PEER.replace("#!/bin/sh\n", f"#!/bin/sh\necho P >> {log}\n{fail}", 1)


def _peer_file(tmp_path, text: str):
    peer = tmp_path / "peer"
    peer.write_text(text)
    peer.chmod(peer.stat().st_mode | stat.S_IEXEC)
    return peer


@pytest.mark.parametrize("script, says", [
    ("#!/bin/sh\necho first >&2\necho second >&2\nexit 3\n", "exited 3: first | second"),  # fails
    ("#!/bin/sh\nexit 0\n", "printed no TTFT"),  # not sched-sim (e.g. /bin/true): no made-up figure
    ("#!/bin/sh\necho 'TTFT p50 abc'\n", "printed no TTFT figures and no 'Completed / Total' count"),
    ("#!/bin/sh\necho 'TTFT 1 ms | Completed / Total | 3 / 3'\n", "counted 3 requests, not the 40 it was given"),
    ("echo no shebang\n", "cannot run it"),  # executable, but not a program the system can start
])
def test_a_bad_peer_exits_2_before_any_policy_runs(capsys, tmp_path, monkeypatch, script, says):
    # The peer runs first (before the first policy's first run), so a peer that cannot run costs
    # no policy run: nothing printed, no bench.json.
    def never(*args, **kwargs):
        raise AssertionError("a policy ran before the peer's first run")

    monkeypatch.setattr("fairsim.bench.bench_policy", never)
    peer = _peer_file(tmp_path, script)
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs,lpm", "--max-requests", "40",
                          "--compare", str(peer), "--out", tmp_path / "o")
    assert code == 2 and out == "" and not (tmp_path / "o" / "bench.json").exists()
    assert err.count("\n") == 1 and err.startswith(f"fairsim: error: bench: --compare {peer}: ") and says in err


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_peer_failing_later_keeps_the_finished_policies_and_their_pairs(capsys, tmp_path, fmt):
    # Runs: peer, fcfs, peer (fails). fcfs finished with its pair; lpm did not run.
    log = tmp_path / "log"
    peer = _peer_file(tmp_path, _logging_peer(log, fail_on=2))
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs,lpm", "--max-requests", "40", "--repeat", "1",
                          "--compare", str(peer), "--out", tmp_path / "o", "--format", fmt)
    errors = [line for line in err.splitlines() if not line.startswith("bench: ")]  # no progress lines
    assert code == 2 and errors == [f"fairsim: error: bench: --compare {peer}: its trace command exited 3: broke"]
    assert log.read_text() == "P\nP\n"
    rows = json.loads((tmp_path / "o" / "bench.json").read_text())
    assert set(rows) == {"fcfs", "sched-sim"} and rows["fcfs"]["requests"] == 40
    assert rows["fcfs"]["peer_pairs"] == [[rows["sched-sim"]["process_s"], rows["fcfs"]["process_s"]]]
    if fmt == "json":
        assert json.loads(out) == rows
    else:
        lines = out.splitlines()
        assert lines[1].split()[-1] == "sched-sim" and lines[2].startswith("fcfs") and lines[3].startswith("sched-sim")
        assert "lpm" not in out


def test_the_peer_runs_before_each_policy_run_and_the_ratio_is_the_median_of_the_pairs(capsys, tmp_path,
                                                                                      monkeypatch):
    from tests.utils import timed_walls

    log = tmp_path / "log"
    peer = _peer_file(tmp_path, _logging_peer(log))
    # Wall seconds in the order run, (peer, policy) x 3 for fcfs then lpm.
    fcfs = [(1.0, 2.0), (3.0, 2.0), (2.0, 8.0)]  # peer/policy 0.5, 1.5, 0.25: median 0.5
    lpm = [(2.0, 1.0), (2.0, 4.0), (2.0, 2.0)]  # 2, 0.5, 1: median 1
    timed_walls(monkeypatch, log, [s for pair in fcfs + lpm for s in pair])
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs,lpm", "--max-requests", "40", "--repeat", "3",
                          "--compare", str(peer), "--out", tmp_path / "o")
    assert code == 0, err
    assert log.read_text().split() == ["P", "fcfs"] * 3 + ["P", "lpm"] * 3
    rows = json.loads((tmp_path / "o" / "bench.json").read_text())
    assert rows["fcfs"]["peer_pairs"] == [list(p) for p in fcfs] and rows["lpm"]["peer_pairs"] == [list(p) for p in lpm]
    # The median of the pair ratios, not the ratio of the medians (fcfs: 2 s / 2 s = 1).
    assert rows["fcfs"]["vs_sched_sim"] == 0.5 and rows["lpm"]["vs_sched_sim"] == 1.0
    assert rows["fcfs"]["process_s"] == 2.0 and rows["lpm"]["process_s"] == 2.0
    # The peer's row: the median (lower middle) of all its 6 runs.
    assert rows["sched-sim"]["process_s_runs"] == [1.0, 2.0, 2.0, 2.0, 2.0, 3.0]
    assert rows["sched-sim"]["process_s"] == 2.0 and rows["sched-sim"]["requests_per_s"] == 20.0
    table = out.splitlines()
    assert table[2].split()[-1] == "0.50" and table[3].split()[-1] == "1.00"
    assert ("x sched-sim: the median over the 3 pair(s) of the policy's req/s over sched-sim's, each policy "
            "run right after a sched-sim run (sched-sim's row: the median of its 6 run(s))") in table


@pytest.mark.parametrize("option, runs", [
    (["--tile", "2"], ["P", "tiled", "untiled"]),
    (["--instances", "2", "--vs-one-engine"], ["P", "fleet", "one"]),
])
def test_with_a_peer_each_round_is_peer_then_the_rows_run_then_its_partner(capsys, tmp_path, monkeypatch,
                                                                          option, runs):
    # The peer pairs with the runs whose req/s the row gives (the tiled ones, the fleet's); each
    # ratio's pair is two runs back to back.
    from tests.utils import timed_walls

    log = tmp_path / "log"
    peer = _peer_file(tmp_path, _logging_peer(log))
    # (peer, row's run, partner) x 2: peer/row 2/4, 6/4: median 1 (the row's median run: 4 s).
    cmds = timed_walls(monkeypatch, log, [2.0, 4.0, 1.0, 6.0, 4.0, 2.0])
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs", "--max-requests", "40", "--repeat", "2",
                          "--compare", str(peer), "--format", "json", *option)
    assert code == 0, err

    def kind(cmd):
        if "--policy" not in cmd:
            return "P"
        if option[0] == "--tile":
            return "tiled" if "tiled.jsonl" in " ".join(cmd) else "untiled"
        return "fleet" if "--instances" in cmd else "one"

    assert [kind(c) for c in cmds] == runs * 2
    r = json.loads(out)["fcfs"]
    assert r["peer_pairs"] == [[2.0, 4.0], [6.0, 4.0]] and r["vs_sched_sim"] == 1.0
    assert r["process_s_runs"] == [4.0, 4.0]
    partner = r["tile_pairs"] if option[0] == "--tile" else r["one_engine_pairs"]
    assert [p[:2] for p in partner] == [[1.0, 4.0], [2.0, 4.0]]  # [partner, row's run] of each round


def test_a_peer_that_is_a_folder_is_named(capsys, tmp_path):
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs", "--compare", tmp_path)
    assert code == 2 and out == ""
    assert err.strip() == f"fairsim: error: --compare {tmp_path}: is a folder; give the peer's executable, e.g. sched-sim"


def test_an_error_only_the_tiled_trace_meets_says_so(capsys):
    # 300 requests over about 70 s x 5e6 = 3.5e8 s: fine; three copies reach 1.04e9 s > 1e9 s.
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs", "--max-requests", "300", "--time-scale", "5e6",
                          "--tile", "3")
    assert code == 2 and out == ""
    assert "the last arrival is at 1.04299e+09 s, beyond 1e+09 s" in err
    assert err.strip().endswith("(in the trace tiled 3 times by --tile 3)")


def test_a_failing_policy_keeps_the_ones_before_it(capsys, tmp_path, monkeypatch):
    # A team's policy that raises once the clock passes 5 s: its child exits 1 with the policy's
    # message; the bench prints and writes the policies that finished, then exits 1 with it.
    write_failing_policy(tmp_path, "benchfailpol")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    log = tmp_path / "log"
    peer = _peer_file(tmp_path, _logging_peer(log))  # runs before each policy run
    try:
        code, out, err = _cli(capsys, "bench", "--policies", "fcfs,benchfailpol:Boom,lpm", "--max-requests", "60",
                              "--repeat", "1", "--out", tmp_path / "o", "--compare", peer, "--format", "json")
    finally:
        sys.modules.pop("benchfailpol", None)  # imported by the policy check: not left for other tests
    assert code == 1
    # lpm not run after the failure; the peer's figures are those of its runs so far (before fcfs
    # and before the failed policy).
    assert log.read_text() == "P\nP\n"
    assert set(json.loads(out)) == {"fcfs", "sched-sim"}
    assert len(json.loads(out)["sched-sim"]["process_s_runs"]) == 2
    assert json.loads((tmp_path / "o" / "bench.json").read_text())["fcfs"]["requests"] == 60
    last = err.strip().splitlines()[-1]
    assert last == ("fairsim: bench: policy 'benchfailpol:Boom' (its fairsim run exited 1): "
                    f"error in policy 'benchfailpol:Boom' (Boom): ValueError: boom "
                    f"(at {tmp_path / 'benchfailpol.py'}, line 6)")


def test_tile_also_runs_the_trace_itself_and_gives_the_cost_ratio(capsys):
    code, out, _ = _cli(capsys, "bench", "--policies", "fcfs", "--max-requests", "40", "--tile", "3",
                        "--repeat", "2", "--format", "json")
    assert code == 0
    r = json.loads(out)["fcfs"]
    assert r["requests"] == 120
    assert len(r["process_s_runs"]) == len(r["tile1_process_s_runs"]) == 2
    assert r["tile1_process_s"] == sorted(r["tile1_process_s_runs"])[0] + (
        sorted(r["tile1_process_s_runs"])[1] - sorted(r["tile1_process_s_runs"])[0]) / 2  # median of 2
    # Cost per request of the 120-request run over the 40-request one: the median (here the mean
    # of two) of the ratios of the pairs, each an untiled run and the tiled run after it.
    pairs = r["tile_pairs"]
    assert len(pairs) == 2 and sorted(p[1] for p in pairs) == sorted(r["process_s_runs"])
    assert sorted(p[0] for p in pairs) == r["tile1_process_s_runs"]
    ratios = [(p[1] / 120) / (p[0] / 40) for p in pairs]
    loops = [(p[3] / 120) / (p[2] / 40) for p in pairs]
    assert abs(r["per_request_vs_tile1"] - sum(ratios) / 2) < 1e-9
    assert abs(r["loop_per_request_vs_tile1"] - sum(loops) / 2) < 1e-9
    assert r["tile1_loop_s"] == sum(p[2] for p in pairs) / 2


def test_tile_of_the_generated_input_of_a_seed(capsys):
    # --seed 3 without --trace: the tiled file holds that generated input (seed not passed on
    # with it); the untiled children generate it again from the seed.
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs", "--seed", "3", "--max-requests", "30", "--repeat", "1",
                          "--tile", "2", "--format", "json")
    assert code == 0, err
    r = json.loads(out)["fcfs"]
    assert r["requests"] == 60 and len(r["tile_pairs"]) == 1
    _, once, _ = _cli(capsys, "run", "--policy", "fcfs", "--seed", "3", "--max-requests", "30", "--format", "json")
    _, default, _ = _cli(capsys, "run", "--policy", "fcfs", "--max-requests", "30", "--format", "json")
    # The seeded input is not the embedded default (so the tile above is of the seeded one).
    assert json.loads(once)["fcfs"]["ttft_p50_s"] != json.loads(default)["fcfs"]["ttft_p50_s"]


def test_target_load_is_resolved_once_for_the_children(capsys):
    # The children get the resolved --time-scale only (run refuses both options together).
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs", "--max-requests", "40", "--target-load", "0.5",
                          "--format", "json")
    assert code == 0, err
    assert "time scale" in err and json.loads(out)["fcfs"]["requests"] == 40


def test_the_peak_is_the_commands_own_not_the_bench_processs():
    # Linux counts the memory a process held before its exec in its peak, so a command forked by
    # a process holding 300 MiB would read at least that; the spawner keeps bench's out of it.
    from fairsim.bench import _timed

    held = bytearray(300 * 2**20)
    held[::4096] = b"\x01" * len(held[::4096])  # resident, not only reserved
    wall, peak, code, _, _ = _timed(["/bin/sh", "-c", "exit 3"])
    assert code == 3 and 0 < wall < 5 and peak < 30  # a shell: a few MiB, plus the spawner's ~9
    wall, peak, code, _, _ = _timed([sys.executable, "-c", "x = bytearray(200 * 2**20); x[::4096] = b'1' * len(x[::4096])"])
    assert code == 0 and 200 <= peak < 290
    del held


def test_a_command_that_cannot_start_raises_oserror(tmp_path):
    from fairsim.bench import _timed

    script = tmp_path / "noshebang"
    script.write_text("echo no shebang\n")
    script.chmod(0o755)
    with pytest.raises(OSError, match="Exec format error"):
        _timed([str(script)])


def test_a_scoped_param_goes_to_its_policy_only(capsys, tmp_path):
    from fairsim.bench import child_argv

    argv = ["--trace", "x", "--param", "fairway.fast_weight=8", "--param", "lpm.sglang_dedup=true",
            "--param", "seed_free=1", "--kv-blocks", "9"]
    assert child_argv(argv, "fairway") == ["--trace", "x", "--param", "fairway.fast_weight=8",
                                           "--param", "seed_free=1", "--kv-blocks", "9"]
    assert child_argv(argv, "fcfs") == ["--trace", "x", "--param", "seed_free=1", "--kv-blocks", "9"]
    # As compare takes it: fcfs runs without the parameter, fairway with it.
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs,fairway", "--max-requests", "40",
                          "--param", "fairway.fast_weight=8", "--format", "json")
    assert code == 0, err
    assert set(json.loads(out)) == {"fcfs", "fairway"}


def test_ctrl_c_prints_the_policies_that_finished(capsys, tmp_path, monkeypatch):
    import fairsim.bench as bench

    real = bench.bench_policy

    def second_interrupted(argv, name):
        if name == "lpm":
            raise KeyboardInterrupt
        return real(argv, name)

    monkeypatch.setattr(bench, "bench_policy", second_interrupted)
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs,lpm,fairway", "--max-requests", "40",
                          "--out", tmp_path / "o")
    assert code == 130 and err.strip().endswith("fairsim: interrupted; results already written are kept")
    lines = out.splitlines()
    assert lines[1].startswith("policy") and lines[2].startswith("fcfs") and len(lines) == 3
    assert set(json.loads((tmp_path / "o" / "bench.json").read_text())) == {"fcfs"}


def test_a_bare_peer_name_of_a_file_here_says_what_is_wrong(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "peer.txt").write_text("#!/bin/sh\n")
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs", "--compare", "peer.txt")
    assert code == 2 and out == "" and "--compare peer.txt: the file is not executable" in err
    (tmp_path / "peer.txt").chmod(0o755)
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs", "--compare", "peer.txt")
    assert code == 2 and "a bare name is looked up on PATH only; give it as ./peer.txt" in err


def test_ctrl_c_during_a_peer_run_prints_the_finished_policies_with_their_pairs(capsys, tmp_path, monkeypatch):
    import fairsim.bench as bench

    real, calls = bench.run_peer, []

    def second_interrupted(cmd, n):
        calls.append(cmd)
        if len(calls) == 2:  # the peer's run before lpm's
            raise KeyboardInterrupt
        return real(cmd, n)

    monkeypatch.setattr(bench, "run_peer", second_interrupted)
    peer = _peer_file(tmp_path, _COUNTING_PEER)
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs,lpm", "--max-requests", "40", "--repeat", "1",
                          "--compare", peer, "--format", "json", "--out", tmp_path / "o")
    assert code == 130 and err.strip().endswith("fairsim: interrupted; results already written are kept")
    rows = json.loads(out)
    assert set(rows) == {"fcfs", "sched-sim"} and len(rows["fcfs"]["peer_pairs"]) == 1
    assert json.loads((tmp_path / "o" / "bench.json").read_text()) == rows


_EDITABLE_FINDER = """\
# What `pip install -e .` installs (setuptools' editable finder): a meta path finder consulted
# after the module path, so a namespace folder named fairsim on the path is found first.
import importlib.util, sys

class _Finder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "fairsim":
            return importlib.util.spec_from_file_location(name, {init!r}, submodule_search_locations=[{pkg!r}])
        return None

sys.meta_path.append(_Finder)
"""


def test_a_folder_named_fairsim_in_the_working_folder_does_not_shadow_the_package(capsys, tmp_path, monkeypatch):
    # From a clone's parent folder, `python -m fairsim run` imported the clone's top folder (a
    # namespace package without __version__) instead of an editable install's package, and every
    # policy's run failed; the children now leave the working folder off their path (-P).
    import subprocess

    import fairsim
    from fairsim.bench import child_interpreter

    pkg = os.path.dirname(os.path.abspath(fairsim.__file__))
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_EDITABLE_FINDER.format(init=os.path.join(pkg, "__init__.py"), pkg=pkg))
    work = tmp_path / "work"
    (work / "fairsim").mkdir(parents=True)  # a clone's top folder, seen from its parent
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.chdir(work)
    # The case itself: the working folder's fairsim shadows the install without -P, not with it.
    plain = subprocess.run([sys.executable, "-m", "fairsim", "--version"], capture_output=True, text=True)
    assert plain.returncode != 0 and "fairsim" in plain.stderr
    assert child_interpreter() == [sys.executable, "-P"]
    code, out, err = _cli(capsys, "bench", "--policies", "fcfs", "--max-requests", "20", "--repeat", "1",
                          "--format", "json")
    assert code == 0, err
    assert json.loads(out)["fcfs"]["requests"] == 20
    monkeypatch.chdir(os.path.dirname(pkg))  # a checkout run in place: its own folder is the package's
    assert child_interpreter() == [sys.executable]


def test_a_tiled_bench_says_the_readers_notes_once(capsys, tmp_path):
    # A Bailian file's think times are taken as gaps (a reader's note); the tiled file, written
    # in canonical form, cannot say it again, so bench says it before tiling, once.
    from experiments import synth_bailian

    path = tmp_path / "b.jsonl"
    synth_bailian.write(str(path), 60, 8.0, 2)
    code, _, err = _cli(capsys, "bench", "--policies", "fcfs", "--repeat", "1", "--tile", "2", "--trace", path,
                        "--format", "json")
    assert code == 0, err
    assert err.count("think time of") == 1 and "taken as the gap to the parent turn's arrival" in err
