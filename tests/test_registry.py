"""Registry: every policy builds by name; bad parameters raise ValueError naming the fix."""

import pytest

from fairsim.cli import parse_params
from fairsim.policies import make_policy, policy_names
from tests.utils import constant_profile


class TestRegistry:
    """Names, parameters from the command line, errors."""

    def test_paper_policies_registered(self):
        assert {"fcfs", "lpm", "klpm", "klpm4", "klpm8", "ragcache", "preble", "peek", "fairway",
                "fairway-abswait", "fairway-nofair"} <= set(policy_names())

    @pytest.mark.parametrize("name", policy_names())
    def test_instance_carries_name(self, name):
        assert make_policy(name, constant_profile()).name == name

    def test_cli_params_reach_policies(self):
        p = constant_profile()
        fw = make_policy("fairway", p, **parse_params(["fast_weight=8", "slo_floor=2.5"]))
        assert (fw.fast_weight, fw.slo_floor) == (8.0, 2.5)
        assert make_policy("klpm", p, **parse_params(["k=3"])).k == 3
        assert make_policy("klpm8", p).k == 8
        assert make_policy("ragcache", p, **parse_params(["pgdsf=true"])).eviction_hook is not None
        assert make_policy("peek", p, **parse_params(["protect=false"])).eviction_hook is None
        lpm = make_policy("lpm", p, **parse_params(["sglang_sort_limit=true", "sglang_dedup=true"]))
        assert lpm.sglang_sort_limit and lpm.sglang_dedup
        assert not make_policy("fairway-nofair", p, fast_weight=2).fair_lane

    @pytest.mark.parametrize("name, params, match", [
        ("klpm", {"k": 0}, "integer >= 1"),
        ("klpm", {"k": 2.5}, "integer >= 1"),
        ("peek", {"protect": "yes"}, "true or false"),
        ("lpm", {"sglang_dedup": 1}, "true or false"),
        ("preble", {"x": 1}, "takes no parameters"),
        ("klpm", {"kk": 1}, "bad parameters"),
    ])
    def test_bad_params(self, name, params, match):
        with pytest.raises(ValueError, match=match):
            make_policy(name, constant_profile(), **params)

    def test_profile_needed(self):
        with pytest.raises(ValueError, match="profile"):
            make_policy("peek")
        with pytest.raises(ValueError, match="profile"):
            make_policy("ragcache", pgdsf=True)
