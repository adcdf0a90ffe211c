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


class Typed(Oldest):
    def __init__(self, max_wait_s: float = 30.0, strict=False, limit: "int" = None, tag="x"):
        self.max_wait_s, self.strict, self.limit, self.tag = max_wait_s, strict, limit, tag


class NoOrder:
    pass


class CtorFails(Oldest):
    def __init__(self):
        raise RuntimeError("ctor boom")


class WrongSig:
    def order(self, waiting):
        return list(waiting)


class WrongFeedback(Oldest):
    def on_admitted(self, admitted):
        pass


class CallsItselfFcfs:
    """A team's class whose name attribute is a shipped policy's: errors must name the spec."""

    name = "fcfs"

    def order(self, waiting, now):
        return []


class IncRaises(Oldest):
    def incremental_order(self):
        raise RuntimeError("inc boom")


class IncNotAnOrder(Oldest):
    def incremental_order(self):
        return 42


class MyArrivalOrder:
    """A team's own fast path; its iter_order fails once the queue holds three requests."""

    def __init__(self):
        self.items = {}

    def add(self, q):
        self.items[q.request_id] = q

    def remove(self, request_id):
        del self.items[request_id]

    def __len__(self):
        return len(self.items)

    def iter_order(self, now):
        if len(self.items) >= 3:
            raise KeyError("fast path boom")
        return iter(sorted(self.items.values(), key=arrival_key))


class IncFailsLater(Oldest):
    def incremental_order(self):
        return MyArrivalOrder()


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
        ("teampol.orders:not_a_class", "is an int, not a class"),
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

    @pytest.mark.parametrize("param, needle", [
        ("max_wait_s=abc", "--param max_wait_s='abc': policy '{m}:Typed' takes a finite number there (declared float)"),
        ("max_wait_s=true", "--param max_wait_s=true: policy '{m}:Typed' takes a finite number there (declared float)"),
        ("strict=1", "--param strict=1: policy '{m}:Typed' takes true or false there (default False)"),
        ("limit=ten", "--param limit='ten': policy '{m}:Typed' takes a whole number there (declared int)"),
        # Was: 2.5 reached a parameter annotated int.
        ("limit=2.5", "--param limit=2.5: policy '{m}:Typed' takes a whole number there (declared int)"),
        ("limit=3.0", "--param limit=3.0: policy '{m}:Typed' takes a whole number there (declared int)"),
    ])
    def test_a_value_of_the_wrong_kind_exits_2_before_the_run(self, team_module, capsys, param, needle):
        # Was: the class got the string, and order() raised TypeError mid-run (exit 1).
        code, out, err = run_json(capsys, "run", "--policy", f"{team_module}:Typed", "--param", param)
        assert code == 2 and needle.format(m=team_module) in err, err

    @pytest.mark.parametrize("param", ["max_wait_s=5", "max_wait_s=2.5", "strict=true", "limit=3", "tag=7"])
    def test_values_of_the_declared_kind_or_undeclared_run(self, team_module, capsys, param):
        code, _, err = run_json(capsys, "run", "--policy", f"{team_module}:Typed", "--param", param)
        assert code == 0, err


class TestTeamCodeFails:
    """A team's policy that fails is named as such, never as "a bug in fairsim"."""

    @pytest.mark.parametrize("cls,needle", [
        ("WrongSig", "order(waiting) cannot be called as order(waiting, now)"),
        ("WrongFeedback", "on_admitted(admitted) cannot be called as on_admitted(admitted, now)"),
    ])
    def test_signature_refused_at_start_exit_2(self, team_module, capsys, cls, needle):
        code, _, err = run_json(capsys, "run", "--policy", f"{team_module}:{cls}")
        assert code == 2 and needle in err and "internal error" not in err, err

    @pytest.mark.parametrize("cls,needle", [
        ("CtorFails", "(CtorFails): RuntimeError: ctor boom"),
        ("IncRaises", "(IncRaises): RuntimeError: inc boom"),
        ("IncFailsLater", "(IncFailsLater): KeyError: 'fast path boom'"),
    ])
    def test_exception_is_the_policys_exit_1(self, team_module, capsys, cls, needle):
        code, _, err = run_json(capsys, "run", "--policy", f"{team_module}:{cls}")
        assert code == 1 and f"error in policy '{team_module}:{cls}' {needle}" in err, err
        assert "internal error" not in err and "Traceback" not in err

    def test_incremental_order_returning_junk_breaks_the_contract(self, team_module, capsys):
        code, _, err = run_json(capsys, "run", "--policy", f"{team_module}:IncNotAnOrder")
        assert code == 1 and "policy contract broken" in err and "internal error" not in err, err
        assert (f"policy '{team_module}:IncNotAnOrder': incremental_order() returned int, which has no "
                "add(), remove(), iter_order()") in err

    def test_errors_name_the_policy_as_given(self, team_module, capsys):
        # The class calls itself "fcfs": the broken contract must not blame fairsim's FCFS.
        code, _, err = run_json(capsys, "compare", "--policies", f"fcfs,{team_module}:CallsItselfFcfs")
        assert code == 1 and f"policy '{team_module}:CallsItselfFcfs': order() must return" in err, err


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
