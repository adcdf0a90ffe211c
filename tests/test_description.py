"""``fairsim.description.describe_run``: one order of checks, what it resolves, and that every
simulating command goes through it."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

import fairsim.description as description
from fairsim.cli import main
from fairsim.costmodel import load_profile
from fairsim.description import Needs, RunDescription, describe_run
from fairsim.options import add_common, params_for, scoped_params

SHIPPED = Path(__file__).resolve().parents[1] / "fairsim/traces/data/conversation_window.jsonl"


def parse(*argv: str) -> argparse.Namespace:
    """The shared options of the simulating commands (``add_common``) and ``--plots``."""
    p = argparse.ArgumentParser()
    add_common(p)
    p.add_argument("--plots", type=Path)
    return p.parse_args(list(argv))


def write_trace(path: Path, arrivals_ms: list[int], prompt: int = 40) -> Path:
    """A Mooncake trace (hash blocks of 512 tokens): one request per arrival (ms) of ``prompt``
    tokens, no shared prefix (hash ids distinct per request)."""
    blocks = -(-prompt // 512)
    rows = [{"timestamp": t, "input_length": prompt, "output_length": 4,
             "hash_ids": list(range(i * blocks, (i + 1) * blocks))} for i, t in enumerate(arrivals_ms)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class TestOrderOfChecks:
    """Of several bad options, the error of the earliest stage is raised: options, outputs,
    profile, policies, trace, capacity (module docstring of ``fairsim.description``)."""

    POLICY = (None, "unknown policy 'nosuch-policy'")
    """The ladder's rung of the policy itself: ``nosuch-policy`` run until this rung, ``fcfs`` after."""

    @classmethod
    def ladder(cls, tmp_path: Path) -> list[tuple[list[str] | None, str]]:
        a_file = tmp_path / "a-file"
        a_file.write_text("")
        return [
            (["--budget", "8", "--max-num-seqs", "16"], "--max-num-seqs 16 is above --budget 8"),
            (["--slo", "ttft=1"], "--slo needs --mode colocated or --mode disaggregated"),
            (["--param", "x"], "--param 'x': expected KEY=VALUE"),
            (["--seed", "-1"], "--seed -1: need an integer >= 0"),
            (["--load-window", "0"], "--load-window 0: need"),
            (["--out", str(a_file)], f"--out {a_file}: exists and is not a folder"),
            (["--profile", "nosuch-profile"], "profile 'nosuch-profile' is neither a file nor a shipped profile"),
            (["--param", "lpm.k=1"], "--param lpm.k: policy 'lpm' is not among those run"),
            cls.POLICY,
            (["--trace", "/nonexistent/t.jsonl"], "/nonexistent/t.jsonl: no such trace file or folder"),
        ]

    def test_each_stage_before_the_next(self, tmp_path):
        """Rung i: every bad option from rung i on given at once; rung i's error is the one raised."""
        ladder = self.ladder(tmp_path)
        for i, (_, expected) in enumerate(ladder):
            argv = [a for options, _ in ladder[i:] if options for a in options]
            policy = "nosuch-policy" if i <= ladder.index(self.POLICY) else "fcfs"
            with pytest.raises((ValueError, OSError)) as err:
                describe_run(parse(*argv), policies=[policy])
            assert str(err.value).startswith(expected), (i, argv, str(err.value))

    def test_capacity_last(self, tmp_path):
        trace = write_trace(tmp_path / "t.jsonl", [0, 1000, 2000], prompt=100)
        args = parse("--trace", str(trace), "--kv-blocks", "2", "--block-size", "16")
        with pytest.raises(ValueError, match="needs 7 blocks of 16 tokens but the KV cache holds 2"):  # 100 / 16
            describe_run(args, policies=["fcfs"])
        # Below Needs.CAPACITY the same options resolve: the trace is read, the capacity not.
        desc = describe_run(parse("--trace", str(trace), "--kv-blocks", "2", "--block-size", "16"),
                            needs=Needs.TRACE, policies=["fcfs"])
        assert len(desc.requests) == 3 and desc.kv_blocks is None

    def test_no_trace_read_before_the_policies_pass(self, monkeypatch, tmp_path):
        monkeypatch.setattr("fairsim.options.load_trace", lambda *a, **k: pytest.fail("read the trace"))
        with pytest.raises(ValueError, match="unknown policy 'nosuch-policy'"):
            describe_run(parse("--trace", str(tmp_path / "t.jsonl")), policies=["nosuch-policy"])
        desc = describe_run(parse("--trace", str(tmp_path / "t.jsonl")), needs=Needs.POLICIES, policies=["fcfs"])
        assert desc.trace is None and desc.requests is None

    def test_policy_files_collide_before_any_policy_is_built(self, tmp_path):
        names = ["m:C", "m_C"]  # both write requests-m_C.parquet (fairsim.io.file_stem)
        args = parse("--out", str(tmp_path / "out"))
        with pytest.raises(ValueError, match="would both write requests-"):
            describe_run(args, needs=Needs.POLICIES, policies=names, policy_files=True)

    def test_command_order_through_main(self, tmp_path, capsys):
        """run with a bad --seed and an --out that is a file: the option is named first."""
        a_file = tmp_path / "a-file"
        a_file.write_text("")
        assert main(["run", "--seed", "-1", "--out", str(a_file)]) == 2
        assert capsys.readouterr().err == "fairsim: error: --seed -1: need an integer >= 0\n"


class TestWhatItResolves:
    """Hand-computed descriptions of a three-request trace (arrivals 0, 1, 2 s; 40-token prompts)."""

    def test_scaled_run(self, tmp_path):
        trace = write_trace(tmp_path / "t.jsonl", [0, 1000, 2000, 3000])
        args = parse("--trace", str(trace), "--time-scale", "2", "--max-requests", "3", "--kv-tokens", "640",
                     "--block-size", "16", "--param", "fairway.fast_weight=8",
                     "--out", str(tmp_path / "out"))
        desc = describe_run(args, policies=["fairway", "fcfs"])
        assert isinstance(desc, RunDescription)
        assert [r.arrival_time for r in desc.requests] == [0.0, 2.0, 4.0]
        assert desc.scaled and desc.time_scale == 2.0 and desc.target_load is None
        assert (desc.window_start_s, desc.window_end_s, desc.max_requests) == (0.0, None, 3)
        assert (desc.block_size, desc.kv_blocks) == (16, 40)  # 640 tokens / 16
        assert desc.capacity_source == "set as 640 tokens"
        assert desc.policies == ("fairway", "fcfs")
        assert desc.params == {"fairway.fast_weight": 8}
        assert desc.policy_params == {"fairway": {"fast_weight": 8}, "fcfs": {}}
        assert desc.replay == "open" and desc.session_rate is None and desc.think_scale == 1.0
        assert desc.out == tmp_path / "out" and (tmp_path / "out").is_dir() and desc.plots is None
        assert desc.format == "table" and desc.slo == {}
        assert desc.profile.name == load_profile(args.profile).name

    def test_trace_time(self, tmp_path):
        """accept/analyze: arrivals left in trace seconds, the factor kept to apply after."""
        trace = write_trace(tmp_path / "t.jsonl", [0, 1000, 2000])
        desc = describe_run(parse("--trace", str(trace), "--time-scale", "3"), trace_time=True)
        assert [r.arrival_time for r in desc.requests] == [0.0, 1.0, 2.0]
        assert not desc.scaled and desc.time_scale == 3.0

    def test_target_load_chooses_the_scale(self, tmp_path, capsys):
        from fairsim.traces.offered import offered_load

        trace = write_trace(tmp_path / "t.jsonl", [0, 1000, 2000, 3000])
        desc = describe_run(parse("--trace", str(trace), "--target-load", "0.01"))
        assert desc.target_load == 0.01
        assert f"time scale {desc.time_scale:.6g}" in capsys.readouterr().err
        # The scale chosen gives the load asked for, on the requests as scaled.
        load = offered_load(desc.requests, desc.profile, desc.config.budget_tokens)
        assert load.load == pytest.approx(0.01, rel=1e-6)

    def test_profile_capacity_and_live_block(self, tmp_path):
        trace = write_trace(tmp_path / "t.jsonl", [0, 1000])
        profile = load_profile(parse().profile)
        desc = describe_run(parse("--trace", str(trace)), live_block_size=128)
        assert desc.config.block_size == 128 and desc.block_size == 128
        assert desc.config.kv_tokens == profile.kv_capacity_tokens
        assert desc.kv_blocks == profile.kv_capacity_tokens // 128
        # --block-size wins over the live default; without it the trace's hash block is used.
        assert describe_run(parse("--trace", str(trace), "--block-size", "32"), live_block_size=128).block_size == 32
        assert describe_run(parse("--trace", str(trace))).block_size == 512  # Mooncake's hash block

    def test_params_of(self):
        """accept's rule: the candidate takes every unscoped parameter, the baselines only their own."""
        def accept_rule(name, params):
            return params_for(name, params) if name == "fairway" else scoped_params(name, params)

        names = ["fcfs", "lpm", "fairway"]
        desc = describe_run(parse("--param", "fast_weight=8"), needs=Needs.POLICIES, policies=names,
                            params_of=accept_rule)
        assert desc.policy_params == {"fcfs": {}, "lpm": {}, "fairway": {"fast_weight": 8}}
        with pytest.raises(ValueError, match="policy 'fcfs' takes no parameters, got \\['fast_weight'\\]"):  # run's rule: every policy
            describe_run(parse("--param", "fast_weight=8"), needs=Needs.POLICIES, policies=names)
        with pytest.raises(ValueError, match="policy 'lpm': bad parameters {'k': 2}"):
            describe_run(parse("--param", "lpm.k=2"), needs=Needs.POLICIES, policies=names, params_of=accept_rule)

    def test_frozen(self):
        desc = describe_run(parse(), needs=Needs.POLICIES, policies=["fcfs"])
        with pytest.raises(AttributeError):
            desc.time_scale = 2.0  # type: ignore[misc]


@pytest.fixture
def calls(monkeypatch):
    """``describe_run`` replaced by a stand-in that records its keywords and raises
    ``ValueError("described")`` (exit 2), so no command does any work past it."""
    seen: list[dict] = []

    def stand_in(args, **kwargs):
        seen.append(kwargs)
        raise ValueError("described")

    monkeypatch.setattr(description, "describe_run", stand_in)
    return seen


class TestEveryCommandUsesIt:
    """Each simulating command resolves its options through ``describe_run``."""

    @pytest.mark.parametrize("argv, policies", [
        (["run", "--policy", "lpm"], ["lpm"]),
        (["compare", "--policies", "fcfs,fairway"], ["fcfs", "fairway"]),
        (["bench", "--policies", "fcfs"], ["fcfs"]),
        (["accept", "--policy", "fairway"], ["fcfs", "lpm", "fairway"]),
        (["analyze"], []),
    ])
    def test_simulating_commands(self, calls, capsys, argv, policies):
        assert main(argv) == 2
        assert capsys.readouterr().err == "fairsim: error: described\n"
        assert len(calls) == 1 and list(calls[0].get("policies", [])) == policies

    def test_replay(self, calls, capsys):
        if importlib.util.find_spec("vllm") is None:
            pytest.skip("replay checks that vLLM is installed first")
        assert main(["replay", "--engine", "vllm", "--policy", "fcfs"]) == 2
        assert capsys.readouterr().err.startswith("fairsim: error: described\n")
        assert calls == [{"policies": ["fcfs"], "live_block_size": 128, "fit_longest_prompt": True}]

    def test_sweep_trace_runs(self, calls):
        from fairsim.sweep.tracerun import load_trace_input

        with pytest.raises(ValueError, match="described"):
            load_trace_input({"path": str(SHIPPED), "time_scale": 1.0, "window_start_s": 0.0}, load_profile(parse().profile))
        assert calls == [{"needs": Needs.TRACE, "profile": calls[0]["profile"]}]
