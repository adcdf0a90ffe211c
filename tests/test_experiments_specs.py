"""The experiments' ``NAME@KEY=VALUE+...`` policy specs (ablations on the command line)."""

from __future__ import annotations

import pytest

from experiments.common import available, run, split_spec
from fairsim.costmodel import load_profile
from fairsim.scenarios import build_scenario


def test_split_spec():
    assert split_spec("fairway") == ("fairway", {})
    assert split_spec("fairway-deadline@lookahead=none") == ("fairway-deadline", {"lookahead": "none"})
    assert split_spec("fairway-deadline@slack=1.5+fast_first=false") == (
        "fairway-deadline", {"slack": 1.5, "fast_first": False})
    with pytest.raises(ValueError, match="KEY=VALUE"):
        split_spec("fairway@fast_weight")


def test_available_and_run_use_the_spec(capsys):
    assert available(["fcfs", "fairway-deadline@lookahead=none", "nope@x=1"]) == [
        "fcfs", "fairway-deadline@lookahead=none"]
    assert "nope@x=1" in capsys.readouterr().err
    profile = load_profile()
    sc = build_scenario("flood", profile, seed=0, num_flood=60, num_miss=4)
    spec, _ = run(sc, "fairway-deadline@lookahead=none", profile)
    plain, _ = run(sc, "fairway-deadline", profile, lookahead="none")
    assert set(spec["policy"]) == {"fairway-deadline@lookahead=none"}
    assert spec["ttft_s"].tolist() == plain["ttft_s"].tolist()  # same policy, same parameters
    with pytest.raises(ValueError, match="lookahead"):
        run(sc, "fairway-deadline@lookahead=sometimes", profile)
