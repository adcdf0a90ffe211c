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
