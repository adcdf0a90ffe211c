"""fairsim.live.ops without vLLM: bounded records, rate-limited log, counters, profile check."""

from __future__ import annotations

import logging

import pytest

from fairsim.costmodel import load_profile
from fairsim.live.ops import BoundedDict, HookCounters, RateLimitFilter, profile_mismatch


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_bounded_dict_keeps_the_newest():
    d = BoundedDict(3)
    for i in range(10):
        d[f"r{i}"] = i
    assert list(d) == ["r7", "r8", "r9"]
    with pytest.raises(ValueError):
        BoundedDict(0)


def test_rate_limit_one_per_interval_and_counts_the_rest():
    clock = FakeClock()
    f = RateLimitFilter(60.0, clock)

    def rec(msg, level=logging.ERROR):
        return logging.LogRecord("fairsim.live", level, __file__, 1, msg, (), None)

    assert f.filter(rec("policy %r failed"))
    for _ in range(99):
        clock.t += 0.1
        assert not f.filter(rec("policy %r failed"))
    assert f.filter(rec("another message"))  # templates are limited separately
    assert f.filter(rec("info passes", logging.INFO))
    clock.t = 60.0
    r = rec("policy %r failed")
    assert f.filter(r) and r.msg.endswith("[99 more like this in the last 60 s]")


def test_counters_log_once_per_interval(caplog):
    clock = FakeClock()
    c = HookCounters(logging.getLogger("fairsim.test"), 60.0, clock)
    with caplog.at_level(logging.INFO, logger="fairsim.test"):
        for i in range(100):
            clock.t = i
            c.step(reordered=i % 4 == 0, ordering_s=0.001, policy_errors=2)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("fairsim: 61 steps, 16 reordered by the policy, 2 policy errors")  # at t = 60: steps 0..60, every 4th reordered
    assert c.as_dict(2) == {"steps": 100, "steps_reordered": 25, "policy_errors": 2,
                            "ordering_s": pytest.approx(0.1)}


def test_profile_mismatch():
    cpu = load_profile("cpu-tiny-llama-vllm-measured").metadata
    assert profile_mismatch(cpu, "/x/fairsim/live/tiny_llama", 128) is None
    msg = profile_mismatch(cpu, "/x/fairsim/live/tiny_llama", 16)
    assert "block size 128 (engine: 16)" in msg and "model" not in msg.split(";")[0].replace("measured", "")
    gpu = load_profile("a6000-llama3.1-8b-vllm-prior").metadata
    msg = profile_mismatch(gpu, "meta-llama/Llama-3.1-70B-Instruct", 16)
    assert "model 'meta-llama/Llama-3.1-8B'" in msg and "block size" not in msg
    assert profile_mismatch({}, "any", 16) is None
