"""A team's own policy, --policy package.module:Class: loaded, built and checked at start."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from fairsim.cli import main
from fairsim.costmodel import load_profile
from fairsim.policies import make_policy

MODULE = '''
from fairsim.policies.base import arrival_key


class Oldest:
    """FCFS written by a team: the same order as fairsim's fcfs."""

    def order(self, waiting, now):
        return sorted(waiting, key=arrival_key)


class ShortFirst:
    """Fewest uncached tokens first; T_idle from the profile as a tie-break scale."""

    def __init__(self, profile, scale=1.0):
        if scale <= 0:
            raise ValueError("scale must be > 0")
        self.t_idle = profile.idle_prefill_time
        self.scale = scale
        self.name = "short-first"

    def order(self, waiting, now):
        return sorted(waiting, key=lambda r: (r.uncached_len * self.scale, arrival_key(r)))


class Skipper(Oldest):
    skips_misfits = True


class NoOrder:
    pass


not_a_class = 3
'''


@pytest.fixture
def team_module(tmp_path, monkeypatch):
    pkg = tmp_path / "teampol"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "orders.py").write_text(textwrap.dedent(MODULE))
    (pkg / "broken.py").write_text("import not_installed_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "teampol.orders"
    for name in [m for m in sys.modules if m.startswith("teampol")]:
        del sys.modules[name]


def run_json(capsys, *argv):
    code = main(list(argv) + ["--format", "json", "--max-requests", "150"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


class TestSimulator:
    def test_team_fcfs_equals_fcfs(self, team_module, capsys):
        code, mine, _ = run_json(capsys, "run", "--policy", f"{team_module}:Oldest")
        _, ref, _ = run_json(capsys, "run", "--policy", "fcfs")
        assert code == 0
        (a,), (b,) = mine.values(), ref.values()
        for key in ("ttft_p50_s", "ttft_p99_s", "ttft_max_s", "hit_rate", "steps"):
            assert a[key] == b[key]

    def test_profile_and_params_reach_the_class(self, team_module):
        profile = load_profile()
        pol = make_policy(f"{team_module}:ShortFirst", profile, scale=2.0)
        assert pol.name == "short-first" and pol.scale == 2.0
        assert pol.t_idle(1000) == profile.idle_prefill_time(1000)
        assert make_policy(f"{team_module}:Oldest").name == f"{team_module}:Oldest"

    def test_in_compare(self, team_module, capsys):
        code, rows, _ = run_json(capsys, "compare", "--policies", f"fcfs,{team_module}:ShortFirst")
        assert code == 0 and list(rows) == ["fcfs", f"{team_module}:ShortFirst"]

    @pytest.mark.parametrize("spec,needle", [
        ("nopkg_xyz.mod:Cls", "module 'nopkg_xyz.mod' not found"),
        ("teampol.orders:Missing", "has no attribute 'Missing'"),
        ("teampol.orders:not_a_class", "is a int, not a class"),
        ("teampol.orders:NoOrder", "is not a policy: it has no order(waiting, now)"),
        ("teampol.broken:Cls", "importing module 'teampol.broken' failed: ModuleNotFoundError"),
        ("teampol.orders:", "expected package.module:Class"),
    ])
    def test_load_errors_exit_2(self, team_module, capsys, spec, needle):
        code, _, err = run_json(capsys, "run", "--policy", spec)
        assert code == 2 and needle in err and "Traceback" not in err

    def test_param_errors_exit_2(self, team_module, capsys):
        code, _, err = run_json(capsys, "run", "--policy", f"{team_module}:ShortFirst", "--param", "nope=1")
        assert code == 2 and "bad parameters {'nope': 1}" in err and "accepted: scale" in err
        code, _, err = run_json(capsys, "run", "--policy", f"{team_module}:ShortFirst", "--param", "scale=-1")
        assert code == 2 and "constructor refused {'scale': -1}: scale must be > 0" in err
        code, _, err = run_json(capsys, "run", "--policy", f"{team_module}:Oldest", "--param", "x=1")
        assert code == 2 and "accepted: none" in err


class TestHook:
    """The vLLM hook builds policies through the same make_policy (no engine needed here)."""

    def test_hook_loads_and_checks_team_class(self, team_module):
        scheduler = pytest.importorskip("fairsim.live.scheduler")
        pol = scheduler.build_policy({"policy": f"{team_module}:ShortFirst", "params": {"scale": 3}})
        assert pol.scale == 3
        with pytest.raises(ValueError, match="skips_misfits"):
            scheduler.build_policy({"policy": f"{team_module}:Skipper"})
        with pytest.raises(ValueError, match="not found"):
            scheduler.build_policy({"policy": "nopkg_xyz:Cls"})
