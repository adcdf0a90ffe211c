"""Live commands' options and exits, without starting vLLM: the engine-driving functions are
replaced by fakes, so what is checked is the command's own handling (a refusal before the engine,
file names, the exit status of a policy that failed in the hook)."""

from __future__ import annotations

import importlib.util
import json
import re
import textwrap
import time

import pandas as pd
import pytest

from fairsim.cli import build_parser, main

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="the live commands check that vLLM is installed first")


def _cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@needs_vllm
@pytest.mark.parametrize("argv, message", [
    (["--policy", "preble"], "--policy preble: policy 'preble' has skips_misfits"),
    (["--policy", "peek"], "--policy peek: policy 'peek' has eviction_hook=ProtectWaitingHits"),
    (["--policy", "ragcache", "--param", "pgdsf=true"], "--policy ragcache: policy 'ragcache' has eviction_hook="),
])
def test_replay_refuses_a_hook_incompatible_policy_before_the_engine(capsys, monkeypatch, argv, message):
    import fairsim.live.replay as replay_mod

    def no_engine(*args, **kwargs):
        raise AssertionError("the engine was started")

    monkeypatch.setattr(replay_mod, "make_llm", no_engine)
    t0 = time.perf_counter()
    code, out, err = _cli(capsys, "replay", "--engine", "vllm", "--max-requests", "5", "--virtual", *argv)
    assert code == 2 and message in err and "Traceback" not in err and out == ""
    assert err.count("\n") == 1
    assert time.perf_counter() - t0 < 30


def test_replay_help_leaves_out_mode_and_slo():
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    text = sub.choices["replay"].format_help()
    mode = re.compile(r"--mode(?![\w-])")  # not --model
    assert not mode.search(text) and "--slo" not in text
    assert "--virtual" in text and "--record" in text and "--model" in text
    assert mode.search(sub.choices["run"].format_help())  # only replay's are hidden


@needs_vllm
@pytest.mark.parametrize("option", [["--mode", "colocated"], ["--slo", "ttft=1"]])
def test_replay_still_refuses_mode_and_slo(capsys, option):
    code, out, err = _cli(capsys, "replay", "--engine", "vllm", "--virtual", *option)
    assert code == 2 and out == ""
    assert "--mode/--slo: 'replay' drives the live engine prefill-only" in err


USER_POLICY = '''
from fairsim.policies.base import arrival_key


class ShortestFirst:
    def order(self, waiting, now):
        return sorted(waiting, key=lambda r: (r.prompt_len, arrival_key(r)))


class Raises:
    def order(self, waiting, now):
        raise RuntimeError("boom")
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    import sys

    (tmp_path / "mypolicy.py").write_text(textwrap.dedent(USER_POLICY))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "mypolicy"
    sys.modules.pop("mypolicy", None)


@needs_vllm
def test_equivalence_file_names_use_file_stem(capsys, tmp_path, monkeypatch, user_module):
    import fairsim.live.equivalence as eq_mod

    class Fake:
        fraction_identical = 1.0
        evictions = preemptions = 0
        table = pd.DataFrame({"request_id": ["r0", "r1"], "identical": [True, True]})

        def first_difference(self):
            return None

    seen = []
    monkeypatch.setattr(eq_mod, "compare", lambda requests, name, *a, **k: seen.append(name) or Fake())
    out = tmp_path / "eq1"
    code, printed, _ = _cli(capsys, "equivalence", "--policies", f"{user_module}:ShortestFirst", "--requests", "4",
                            "--out", str(out))
    assert code == 0 and seen == ["mypolicy:ShortestFirst"]
    assert sorted(p.name for p in out.iterdir()) == ["equivalence-mypolicy_ShortestFirst.csv"]
    assert pd.read_csv(out / "equivalence-mypolicy_ShortestFirst.csv")["request_id"].tolist() == ["r0", "r1"]
    assert "mypolicy:ShortestFirst" in printed


@needs_vllm
def test_replay_exits_1_when_the_policy_failed_in_the_hook(capsys, tmp_path, monkeypatch, user_module):
    """The hook keeps vLLM's order on a policy error (by design); replay still writes and prints
    everything, then exits 1 naming how many steps failed, as hook-overhead does."""
    import fairsim.live.replay as replay_mod
    from fairsim.live.replay import STEP_COLUMNS, LiveResult

    def fake(requests, cfg, profile, **kwargs):
        assert cfg.policy == "mypolicy:Raises"
        table = pd.DataFrame({"request_id": [r.request_id for r in requests], "ttft_s": 0.1,
                              "cached_tokens": 0, "prompt_tokens": [r.prompt_len for r in requests]})
        steps = pd.DataFrame([(i, 0.1 * i, 0.1, 1, 1, 0, 1, 1.0, 0, 0) for i in range(12)], columns=STEP_COLUMNS)
        return LiveResult(table, steps, cfg.policy, "virtual", [], 12)

    monkeypatch.setattr(replay_mod, "replay_virtual", fake)
    out = tmp_path / "rep"
    code, printed, err = _cli(capsys, "replay", "--engine", "vllm", "--policy", f"{user_module}:Raises",
                              "--max-requests", "5", "--virtual", "--out", str(out), "--format", "json")
    assert code == 1
    assert json.loads(printed)["mypolicy:Raises"]["policy_errors"] == 12
    assert (out / "requests-mypolicy_Raises.parquet").is_file() and (out / "summary.json").is_file()
    assert ("fairsim: replay: policy mypolicy:Raises failed in the hook in 12 of 12 steps, where the hook kept "
            "vLLM's order") in err
