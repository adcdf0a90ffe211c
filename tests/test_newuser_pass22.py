"""What the twenty-second session's new-user passes found, each checked by hand."""

from __future__ import annotations

import json
import math

import pytest
from sortedcontainers import SortedList

from fairsim.analysis.spread import decile_ratio
from fairsim.cli import main
from fairsim.costmodel import DEFAULT_PROFILE, load_profile
from fairsim.traces.offered import offered_load
from fairsim.types import Request

PROFILE = load_profile(DEFAULT_PROFILE)


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("n, expected", [(2, 2 / 1), (9, 9 / 1), (10, 9 / 1), (11, 10 / 2), (20, 18 / 2)])
def test_spread_is_nearest_rank_deciles(n, expected):
    # Works 1..n: the upper decile is the ceil(0.9 n)-th smallest, the lower the ceil(0.1 n)-th.
    # With nine or fewer waiting that is the largest over the smallest; with ten, the ninth (the
    # docs said "ten or fewer" before).
    queue = SortedList((float(w), w) for w in range(1, n + 1))
    assert decile_ratio(queue) == expected


# Four requests 10 s apart (the helper's file): r3 repeats r1's three blocks whole, r4 extends
# them by 64 tokens (its Mooncake hash_ids [1, 2, 3, 5]: the last one a partial block's).
FOUR = [Request("r1", 0.0, 1536, (1, 2, 3), 512), Request("r2", 10.0, 1536, (1, 2, 4), 512),
        Request("r3", 20.0, 1536, (1, 2, 3), 512), Request("r4", 30.0, 1600, (1, 2, 3), 512)]
HASH_IDS = {"r1": [1, 2, 3], "r2": [1, 2, 4], "r3": [1, 2, 3], "r4": [1, 2, 3, 5]}


def _busy(new, pairs, requests, budget=2048):
    p = PROFILE
    return (p.a_s * math.ceil(sum(new) / budget) + p.b_s_per_token * sum(new) + p.k_s_per_pair * sum(pairs)
            + p.d_s_per_request * requests)


def test_ideal_reuse_hits_whole_blocks_within_the_prompt_less_one_token():
    # Was: r3's ideal hit 1,535 tokens (L - 1); vLLM (and the engine) hit whole blocks within
    # L - 1 tokens: two blocks, 1,024, so 512 tokens to compute.
    load = offered_load(FOUR, PROFILE, 2048, window_s=100.0)
    # r1 cold 1536, r2 hits 1024 (blocks 1, 2) and computes 512, r3 512, r4 hits 1536, computes 64
    assert load.ideal_uncached_tokens_per_s * 30.0 == pytest.approx(1536 + 512 + 512 + 64)


def test_the_busiest_windows_ideal_load_is_that_windows():
    # Was: the "(ideal reuse X)" after "busiest 15 s window from 20.0 s" was the largest ideal
    # load of any window ([0, 15): r1 cold, r2 hitting 1,024), not that window's.
    load = offered_load(FOUR, PROFILE, 2048, window_s=15.0)
    assert load.peak_start_s == 20.0
    # [20, 35): r3 and r4, cold ...
    cold = _busy([1536, 1600], [1536**2 / 2, 1600**2 / 2], 2) / 15.0
    assert load.peak_load == pytest.approx(cold, rel=1e-12)
    # ... and with ideal reuse: r3 on 1,024 cached tokens, r4 on 1,536
    ideal = _busy([512, 64], [(1536**2 - 1024**2) / 2, (1600**2 - 1536**2) / 2], 2) / 15.0
    assert load.peak_ideal_load == pytest.approx(ideal, rel=1e-12)


def test_the_printed_line_and_run_json_agree_on_the_window(tmp_path, capsys):
    trace = tmp_path / "t4.jsonl"
    trace.write_text("".join(json.dumps({"request_id": r.request_id, "timestamp": int(r.arrival_time * 1000),
                                         "input_length": r.prompt_len, "output_length": 1,
                                         "hash_ids": HASH_IDS[r.request_id]}) + "\n" for r in FOUR))
    code, out, err = run_cli(capsys, "run", "--trace", trace, "--policy", "fcfs", "--load-window", "15",
                             "--out", tmp_path / "out")
    assert code == 0, err
    ideal = _busy([512, 64], [(1536**2 - 1024**2) / 2, (1600**2 - 1536**2) / 2], 2) / 15.0
    assert f"busiest 15 s window from 20.0 s: load 0.03 (ideal reuse {ideal:.2f})" in out
    offered = json.loads((tmp_path / "out" / "run.json").read_text())["offered_load_figures"]
    assert offered["peak_start_s"] == 20.0 and offered["peak_ideal_load"] == pytest.approx(ideal, rel=1e-12)


# -- the second pass: production exports -------------------------------------------------------

def _mooncake(path, rows, key="timestamp"):
    path.write_text("".join(json.dumps({key: t, "input_length": 100, "output_length": 1, "hash_ids": [i]}) + "\n"
                            for i, t in enumerate(rows)))
    return path


def test_an_azure_column_named_twice_is_refused(tmp_path, capsys):
    # Was: the last ContextTokens column (all 1s) was read silently: 100 prompt tokens, not 80,197.
    trace = tmp_path / "dup.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,contexttokens\n"
                     "2023-11-16 18:15:46.6805900,374,44,1\n2023-11-16 18:15:50.9951690,396,109,1\n")
    code, _, err = run_cli(capsys, "run", "--trace", trace, "--policy", "fcfs")
    assert code == 2
    assert f"{trace}:1: field 'ContextTokens': named twice in the header (columns 2 and 4)" in err


def test_a_stale_sidecar_is_refused(tmp_path, capsys):
    # Was: a sidecar left beside a file written again was taken for it without a check.
    trace = _mooncake(tmp_path / "t.jsonl", [0, 1000, 2000])
    (tmp_path / "t.jsonl.meta.json").write_text(json.dumps({"hash_block_size": 512, "requests": 100}))
    code, _, err = run_cli(capsys, "run", "--trace", trace, "--policy", "fcfs")
    assert code == 2 and "field 'requests': says 100 requests, but" in err and "holds 3 records" in err
    # the count right, with a byte-order mark (as the traces may have): read
    (tmp_path / "t.jsonl.meta.json").write_text("\ufeff" + json.dumps({"hash_block_size": 512, "requests": 3}),
                                                encoding="utf-8")
    assert run_cli(capsys, "run", "--trace", trace, "--policy", "fcfs")[0] == 0


def test_drawn_session_starts_are_warned(tmp_path, capsys):
    # Was: a time field named otherwise ("ts") left no timestamp, and every arrival was drawn
    # (Poisson session starts) without a word on stderr or in run.json.
    trace = _mooncake(tmp_path / "ts.jsonl", [0, 1000, 2000], key="ts")
    code, _, err = run_cli(capsys, "run", "--trace", trace, "--policy", "fcfs", "--out", tmp_path / "out")
    assert code == 0
    assert "records no absolute arrival times" in err and "drawn, not read from the trace" in err
    warnings = json.loads((tmp_path / "out" / "run.json").read_text())["warnings"]
    assert any("records no absolute arrival times" in w for w in warnings)


def test_epoch_timestamps_are_told_to_use_a_window_start(tmp_path, capsys):
    trace = _mooncake(tmp_path / "epoch.jsonl", [1_700_000_000_000 + 1000 * i for i in range(4)])
    code, _, err = run_cli(capsys, "run", "--trace", trace, "--policy", "fcfs")
    assert code == 2 and "use --window-start 1700000000, which counts arrival times from the first one" in err
    assert run_cli(capsys, "run", "--trace", trace, "--policy", "fcfs", "--window-start", "1700000000")[0] == 0


def test_a_record_past_the_time_limit_is_named_under_any_time_scale(tmp_path, capsys):
    # Was: "--time-scale 50.0: ... use a smaller --time-scale", which no scale could mend.
    trace = _mooncake(tmp_path / "huge.jsonl", [0, 1000, 2000, 1e20])
    code, _, err = run_cli(capsys, "run", "--trace", trace, "--policy", "fcfs", "--time-scale", "50")
    assert code == 2 and f"{trace}:4: arrival time" in err and "at 1e+17 s" in err and "--time-scale" not in err


def test_other_compressions_an_empty_path_and_azure_rows_as_json(tmp_path, capsys):
    import lzma

    plain = _mooncake(tmp_path / "t.jsonl", [0, 1000])
    xz = tmp_path / "t.jsonl.xz"
    xz.write_bytes(lzma.compress(plain.read_bytes()))
    for extra in ((), ("--trace-format", "mooncake")):
        code, _, err = run_cli(capsys, "run", "--trace", xz, "--policy", "fcfs", *extra)
        assert code == 2 and f"{xz}: compressed with xz; fairsim reads plain text or gzip" in err
    code, _, err = run_cli(capsys, "run", "--trace", "", "--policy", "fcfs")
    assert code == 2 and "the trace path is empty" in err
    # Azure's columns as JSON lines: not an Azure CSV (was: "missing column" naming it)
    rows = tmp_path / "az.jsonl"
    rows.write_text(json.dumps({"TIMESTAMP": "2023-11-16 18:15:46.6805900", "ContextTokens": 374,
                                "GeneratedTokens": 44}) + "\n")
    code, _, err = run_cli(capsys, "run", "--trace", rows, "--policy", "fcfs")
    assert code == 2 and "cannot tell the trace format" in err


# -- the third pass: the live path ---------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    # Was: accepted, and six empty "decode" steps went into the fit.
    (["--decodes", "0"], "--decodes 0: need integers >= 1"),
    (["--decode-contexts", "0"], "--decode-contexts 0: need integers >= 1"),
    # Was: refused after the engine loaded, without the option's name.
    (["--mixed-new-tokens", "-5"], "--mixed-new-tokens -5: need integers >= 0"),
    (["--decodes", "2048"], "--decodes 2048: need decodes + 1 <= --budget 2048"),
    (["--repeats", "0"], "--repeats 0: need an integer >= 1"),
])
def test_calibrate_checks_its_decode_grid_before_the_engine(tmp_path, capsys, argv, message):
    code, _, err = run_cli(capsys, "calibrate", "--out", tmp_path / "p.json", *argv)
    assert code == 2 and message in err


def test_replay_record_path_is_checked_before_the_engine(tmp_path, capsys):
    # Was: checked when the recorder opened, after vLLM started, as a bare [Errno 21].
    code, _, err = run_cli(capsys, "replay", "--engine", "vllm", "--policy", "fcfs", "--record", tmp_path)
    assert code == 2 and f"--record {tmp_path}: is a folder; give a file name" in err


def test_hook_settings_name_params_and_record(tmp_path):
    from fairsim.errors import OutputError
    from fairsim.live.settings import read_settings

    with pytest.raises(ValueError, match="fairsim setting 'params': need an object of policy parameters"):
        read_settings({"fairsim": {"params": [1, 2]}})
    with pytest.raises(OutputError, match="fairsim setting 'record' .*: is a folder"):
        read_settings({"fairsim": {"record": str(tmp_path)}})


def test_the_hook_logs_a_raising_policy_with_the_simulators_message():
    pytest.importorskip("vllm")
    from fairsim.live.scheduler import _failure_text

    class Boom:
        name = "mine:Boom"

        def order(self, waiting, now):
            raise RuntimeError("bad")

    policy = Boom()
    try:
        policy.order([], 0.0)
    except RuntimeError as exc:
        text = _failure_text(exc, policy, "mine:Boom")
    assert text.startswith("error in policy 'mine:Boom' (Boom): RuntimeError: bad")


def test_the_hooks_unknown_policy_lists_what_the_hook_accepts():
    # Was: the registry's list, Preble and PEEK included, which the hook refuses.
    from fairsim.live.settings import build_policy

    with pytest.raises(ValueError, match="unknown policy 'fairwy'; the vLLM hook accepts: fcfs, ") as info:
        build_policy({"policy": "fairwy"})
    assert "preble" not in str(info.value) and "peek" not in str(info.value) and "fairway-deadline" in str(info.value)


@pytest.mark.parametrize("fmt", ["azure", "mooncake", "auto"])
def test_a_git_lfs_pointer_is_named_under_any_trace_format(tmp_path, capsys, fmt):
    # Was: with --trace-format azure, "missing column (header: ['version https://git-lfs...'])".
    pointer = tmp_path / "trace.csv"
    pointer.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0a1b\nsize 1234\n")
    code, _, err = run_cli(capsys, "run", "--trace", pointer, "--trace-format", fmt, "--policy", "fcfs")
    assert code == 2 and f"{pointer}: is a Git LFS pointer, not the trace itself" in err
