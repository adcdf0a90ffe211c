"""Regressions for the defects a new user reported (``/work/briefs/newuser-report.md``, fixb part):
each test failed before its fix."""

import gzip
import json

import pytest

from fairsim.cli import MAX_ARRIVAL_S, main
from fairsim.sim.release import earliest_releases
from fairsim.types import Request


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write_agentic(path, delay_ms):
    """A two-turn Mooncake agentic session: root at 0 ms, the second turn ``delay_ms`` after it."""
    rows = [{"session_id": "s1", "request_id": "s1-0", "created_time": 0, "input_tokens": 200,
             "output_length": 8, "hash_ids": [1, 2, 3, 4]},
            {"session_id": "s1", "request_id": "s1-1", "delay": delay_ms, "input_tokens": 300,
             "output_length": 8, "hash_ids": [1, 2, 3, 5]}]
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return str(path)


class TestClosedLoopReleaseRange:
    """Defect 1: closed-loop release times beyond MAX_ARRIVAL_S are refused before the run."""

    def test_earliest_release_hand_computed(self):
        reqs = [Request("a", 10.0, 4, (), 1), Request("b", 0.0, 4, (), 1, after="a", delay_s=2.0),
                Request("c", 0.0, 4, (), 1, after="b", delay_s=3.0), Request("d", 5.0, 4, (), 1)]
        assert earliest_releases(reqs, 1.0) == {"a": 10.0, "b": 12.0, "c": 15.0, "d": 5.0}
        assert earliest_releases(reqs, 2.0) == {"a": 10.0, "b": 14.0, "c": 20.0, "d": 5.0}
        # order of the list does not matter
        assert earliest_releases(reqs[::-1], 0.0)["c"] == 10.0

    def test_huge_delay_names_record_and_field(self, capsys, tmp_path):
        path = write_agentic(tmp_path / "a.jsonl.gz", 1e308)
        code, out, err = run_cli(capsys, "run", "--policy", "fcfs", "--trace", path,
                                 "--trace-format", "mooncake")
        assert code == 2, err
        assert "a.jsonl.gz:2: request 's1-1' (think/tool delay" in err and "1e+09" in err
        assert "Traceback" not in err and out == ""

    @pytest.mark.parametrize("scale", ["1e12", "1e300"])
    def test_huge_think_scale_names_option(self, capsys, tmp_path, scale):
        path = write_agentic(tmp_path / "a.jsonl.gz", 1500)
        code, _, err = run_cli(capsys, "run", "--policy", "fcfs", "--trace", path,
                               "--think-scale", scale)
        assert code == 2, err
        assert f"--think-scale {float(scale):g}" in err and "think/tool delay" in err

    def test_at_the_limit_still_runs(self, capsys, tmp_path):
        # 1500 ms x 1e5 = 1.5e5 s: far below the limit, runs and releases the turn after it
        path = write_agentic(tmp_path / "a.jsonl.gz", 1500)
        code, out, err = run_cli(capsys, "run", "--policy", "fcfs", "--trace", path,
                                 "--think-scale", "1e5", "--format", "json")
        assert code == 0, err
        assert json.loads(out)["fcfs"]["sim_time_s"] >= 1.5e5
        assert 1.5e5 < MAX_ARRIVAL_S

    def test_huge_time_scale_still_blames_time_scale(self, capsys, tmp_path):
        path = write_agentic(tmp_path / "a.jsonl.gz", 1500)
        code, _, err = run_cli(capsys, "run", "--policy", "fcfs", "--trace", path,
                               "--time-scale", "1e300")
        assert code == 2 and "--time-scale 1e+300" in err and "delay" not in err


BOOM = '''
from fairsim.policies.base import arrival_key


class Boom:
    """order() raises a ValueError of its own."""

    def order(self, waiting, now):
        raise ValueError("boom")


class LateBoom:
    """on_admitted() raises after the first admission."""

    def order(self, waiting, now):
        return sorted(waiting, key=arrival_key)

    def on_admitted(self, admitted, now):
        raise KeyError("k")
'''


@pytest.fixture
def mypol(tmp_path, monkeypatch):
    (tmp_path / "mypol.py").write_text(BOOM)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "mypol"


class TestPolicyExceptions:
    """Defect 4: an exception escaping a policy is the policy's error, exit 1, not bad input."""

    def test_value_error_in_order(self, capsys, mypol):
        code, out, err = run_cli(capsys, "run", "--policy", "mypol:Boom", "--max-requests", "5")
        assert code == 1, err
        assert "fairsim: error in policy 'mypol:Boom' (Boom): ValueError: boom" in err
        assert "Traceback" not in err and "bug in fairsim" not in err and "fairsim: error: boom" not in err

    def test_on_admitted(self, capsys, mypol):
        code, _, err = run_cli(capsys, "run", "--policy", "mypol:LateBoom", "--max-requests", "5")
        assert code == 1 and "fairsim: error in policy 'mypol:LateBoom' (LateBoom): KeyError: 'k'" in err

    def test_debug_traceback_goes_through_the_policy(self, capsys, mypol):
        code, _, err = run_cli(capsys, "--debug", "run", "--policy", "mypol:Boom", "--max-requests", "5")
        assert code == 1 and "Traceback (most recent call last)" in err
        assert 'raise ValueError("boom")' in err

    def test_simulate_raises_policy_error_with_cause(self, mypol):
        from fairsim.costmodel import load_profile
        from fairsim.errors import PolicyError
        from fairsim.policies import make_policy
        from fairsim.sim import simulate

        profile = load_profile("h100-80g-llama3.1-8b-vllm-aiconfigurator")
        reqs = [Request("a", 0.0, 40, (), 1)]
        with pytest.raises(PolicyError) as info:
            simulate(reqs, make_policy("mypol:Boom", profile), profile)
        assert isinstance(info.value.__cause__, ValueError) and info.value.policy == "mypol:Boom"
        import pickle

        assert str(pickle.loads(pickle.dumps(info.value))) == str(info.value)


class TestKvTokensNamed:
    """Defect 6: a too-large --kv-tokens is named as kv_tokens, not 'kv_fraction=None'."""

    def test_cli(self, capsys):
        code, _, err = run_cli(capsys, "run", "--policy", "fcfs", "--max-requests", "5",
                               "--kv-tokens", "99999999999999")
        assert code == 2 and "kv_fraction" not in err
        # 99999999999999 // 512 = 195312499999 blocks
        assert "error: --kv-tokens 99999999999999 gives 1.95e+11 blocks of 512 tokens" in err
        assert "4194304 blocks" in err and "so --kv-blocks 28 (--kv-tokens 14336) already" in err

    def test_cli_blames_the_profile_not_an_option_not_given(self, capsys):
        code, _, err = run_cli(capsys, "run", "--policy", "fcfs", "--block-size", "100000000")
        assert code == 2
        assert err.strip().endswith("fairsim: error: the profile's KV capacity (231014 tokens): less than one "
                                    "block of 100000000 tokens (--block-size 100000000)")

    def test_cli_names_the_option_below_one_block(self, capsys):
        code, _, err = run_cli(capsys, "run", "--policy", "fcfs", "--kv-tokens", "100")
        assert code == 2 and err.strip() == "fairsim: error: --kv-tokens 100: less than one block of 512 tokens"

    def test_resolve_capacity(self):
        from fairsim.errors import CapacityError
        from fairsim.sim.capacity import resolve_capacity
        from fairsim.sim.config import EngineConfig

        reqs = [Request("a", 0.0, 33, (), 16)]  # 3 blocks of 16
        with pytest.raises(CapacityError, match=r"kv_tokens=1000000000 gives 6.25e\+07 blocks of 16 "
                                                r"tokens.*kv_blocks=3 \(kv_tokens=48\)"):
            resolve_capacity(reqs, EngineConfig(block_size=16, kv_tokens=10**9))


class TestBusiestWindow:
    """Defect 8: the busiest window of a trace shorter than the window is the whole trace."""

    @staticmethod
    def profile():
        from fairsim.costmodel import Profile

        return Profile("toy", "prior", a_s=0.01, b_s_per_token=0.001, k_s_per_pair=1e-6,
                       d_s_per_request=0.002, idle_prompt_tokens=(1, 2), idle_seconds=(0.0, 0.0),
                       budget_tokens=100)

    def test_short_trace_peak_is_its_mean(self):
        from fairsim.traces.offered import offered_load

        reqs = [Request("a", 0.0, 100, (), 50), Request("b", 2.0, 100, (), 50)]
        load = offered_load(reqs, self.profile(), budget_tokens=100, window_s=60.0)
        # each: 1 step 0.01 + 100 x 0.001 + 5,000 pairs x 1e-6 + 1 chunk 0.002 = 0.117 s; 0.234 s / 2 s
        assert load.load == pytest.approx(0.117)
        assert load.peak_load == pytest.approx(0.117) and load.peak_start_s == 0.0
        assert load.peak_ideal_load == pytest.approx(load.ideal_load)
        assert "shorter than the window: the whole 2 s trace" in load.describe()

    def test_longer_trace_unchanged(self):
        from fairsim.traces.offered import offered_load

        reqs = [Request("a", 0.0, 100, (), 50), Request("b", 2.0, 100, (), 50)]
        load = offered_load(reqs, self.profile(), budget_tokens=100, window_s=1.0)
        assert load.peak_load == pytest.approx(0.117 / 1.0)  # one request per 1 s window

    def test_azure_peak_not_below_mean(self, capsys):
        code, out, err = run_cli(capsys, "run", "--policy", "fcfs", "--trace",
                                 "tests/data/formats/azure.csv", "--format", "json")
        assert code == 0
        assert "load 1.10 (ideal reuse 1.10); busiest 60 s window from 0.0 s: load 1.10" in err

    @pytest.mark.parametrize("value", ["1e-9", "0", "-1", "nan", "inf"])
    def test_bad_load_window_named(self, capsys, value):
        code, _, err = run_cli(capsys, "run", "--policy", "fcfs", "--max-requests", "5",
                               "--load-window", value)
        assert code == 2 and "fairsim: error: --load-window" in err and ">= 0.001" in err


def test_tiny_target_load_names_target_load(capsys):
    """Defect 11: --target-load 1e-300 is named, not the --time-scale it implied."""
    code, _, err = run_cli(capsys, "run", "--policy", "fcfs", "--max-requests", "20",
                           "--target-load", "1e-300")
    assert code == 2
    assert "fairsim: error: --target-load 1e-300 (time scale" in err and "beyond 1e+09 s" in err
    assert "--time-scale" not in err and "use a larger --target-load" in err


class TestConvertAndHashBlock:
    """Defect 12: convert names OUT before reading; dynamo on another format; --hash-block-size 0."""

    def test_out_is_a_folder(self, capsys, tmp_path):
        code, _, err = run_cli(capsys, "convert", "tests/data/formats/mooncake.jsonl", str(tmp_path))
        assert code == 2 and f"fairsim: error: convert: OUT {tmp_path}: is a folder" in err
        assert "Errno" not in err

    def test_out_not_writable(self, capsys):
        code, _, err = run_cli(capsys, "convert", "tests/data/formats/mooncake.jsonl", "/proc/self/x.jsonl")
        assert code == 2 and "fairsim: error: convert: OUT /proc/self/x.jsonl: not writable" in err

    def test_out_checked_before_reading(self, capsys, tmp_path):
        # IN does not parse, but the unusable OUT is reported first
        bad = tmp_path / "bad.jsonl"
        bad.write_text("{not json\n")
        code, _, err = run_cli(capsys, "convert", str(bad), str(tmp_path))
        assert code == 2 and "is a folder" in err

    def test_dynamo_format_on_mooncake_file(self, capsys, tmp_path):
        code, _, err = run_cli(capsys, "convert", "tests/data/formats/mooncake.jsonl",
                               str(tmp_path / "o.jsonl"), "--trace-format", "dynamo")
        assert code == 2 and "no request_end events found in" in err
        assert "no valid requests" not in err and not (tmp_path / "o.jsonl").exists()

    @pytest.mark.parametrize("trace", [[], ["--trace", "tests/data/formats/mooncake.jsonl"]])
    def test_hash_block_size_zero_refused(self, capsys, trace):
        code, out, err = run_cli(capsys, "run", "--policy", "fcfs", "--max-requests", "3",
                                 "--hash-block-size", "0", *trace)
        assert code == 2 and "fairsim: error: --hash-block-size 0: need >= 1 token" in err and out == ""


REV = '''
from fairsim.policies.base import arrival_key


class Rev:
    """Newest first."""

    def order(self, waiting, now):
        return sorted(waiting, key=arrival_key, reverse=True)
'''


class TestTableFileNames:
    """Defect 14: per-policy tables get portable file names (``:`` -> ``_``)."""

    def test_file_stem(self):
        from fairsim.io import file_stem

        assert file_stem("mypol:Rev") == "mypol_Rev"
        assert file_stem("pkg.mod:Cls") == "pkg.mod_Cls"
        assert file_stem("fairway-carry") == "fairway-carry"
        assert file_stem("a/b c") == "a_b_c"

    def test_compare_user_policy(self, capsys, tmp_path, monkeypatch):
        import pandas as pd

        import sys

        (tmp_path / "revpol.py").write_text(REV)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, "revpol", raising=False)
        out = tmp_path / "out"
        code, _, err = run_cli(capsys, "compare", "--policies", "fcfs,revpol:Rev", "--max-requests", "20",
                               "--out", str(out))
        assert code == 0, err
        names = sorted(p.name for p in out.iterdir())
        assert names == ["requests-fcfs.parquet", "requests-revpol_Rev.parquet", "run.json",
                         "steps-fcfs.parquet", "steps-revpol_Rev.parquet", "summary.json"]
        assert list(json.loads((out / "summary.json").read_text())) == ["fcfs", "revpol:Rev"]
        assert len(pd.read_parquet(out / "requests-revpol_Rev.parquet")) == 20

    def test_colliding_stems_refused(self):
        from fairsim.io import check_file_stems

        check_file_stems(["fcfs", "a:b", "a:b"])  # the same name twice is not a collision

        with pytest.raises(ValueError, match="'a:b' and 'a_b' would both write requests-a_b.parquet"):
            check_file_stems(["a:b", "a_b"])


class TestSweepUserPolicy:
    """Defect 15: sweeps accept ``package.module:Class`` policy names, as --policy does."""

    @pytest.fixture
    def revpol(self, tmp_path, monkeypatch):
        import sys

        (tmp_path / "revpol.py").write_text(REV)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, "revpol", raising=False)  # imported by an earlier test
        return tmp_path / "revpol.py"

    SPEC = {"scenarios": [{"name": "rag", "params": {"num_requests": 20}}],
            "policies": ["fcfs", "revpol:Rev"]}

    def test_runs_on_two_workers(self, revpol, tmp_path):
        from fairsim.sweep.command import run_sweep

        summary = run_sweep(self.SPEC, tmp_path / "out", workers=2, progress=False, log=lambda _: None)
        assert summary["policy"].tolist() == ["fcfs", "revpol:Rev"]
        assert (summary["status"] == "ok").all() and (summary["requests"] == 20).all()

    def test_module_edit_changes_run_id(self, revpol):
        from fairsim.sweep.plan import expand

        before = [r.run_id for r in expand(self.SPEC)]
        revpol.write_text(REV + "\n# edited\n")
        after = [r.run_id for r in expand(self.SPEC)]
        assert before[0] == after[0] and before[1] != after[1]
        assert str(revpol.resolve()) in expand(self.SPEC)[1].inputs

    def test_missing_module_named(self, capsys, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        (tmp_path / "s.toml").write_text('[[scenarios]]\nname = "rag"\n[[policies]]\nname = "nopol_xyz:Cls"\n')
        code, _, err = run_cli(capsys, "sweep", "s.toml", "--out", "out", "--no-progress")
        assert code == 2 and "s.toml: policies[0].name: policy 'nopol_xyz:Cls': module 'nopol_xyz' not found" in err


@pytest.mark.parametrize("deployment", [
    ("--instances", "2", "--router", "round-robin"),
    ("--mode", "disaggregated", "--prefill-instances", "2", "--decode-instances", "1"),
])
def test_a_policy_failing_in_a_fleet_is_named_as_on_one_engine(capsys, mypol, deployment):
    """A fleet (and a disaggregated deployment) reports an exception escaping an instance's
    policy as the lone engine does (``fleet.run_reporting_policy_failure``): the policy named,
    exit 1, no traceback."""
    code, _, err = run_cli(capsys, "run", "--policy", "mypol:Boom", "--max-requests", "5", *deployment)
    assert code == 1, err
    assert "fairsim: error in policy 'mypol:Boom' (Boom): ValueError: boom" in err
    assert "Traceback" not in err and "bug in fairsim" not in err
