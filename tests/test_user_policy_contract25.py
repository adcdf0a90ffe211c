"""A team's own policy: mistakes in its optional parts (``admission_limit``,
``on_prefill_tokens``, ``eviction_hook``), an ``order()`` that returns a set, a dependency that
fails to import, and ``--param`` values of the wrong kind are the team's errors (exit 2 at start,
or exit 1 naming the policy and the line of its code), never "internal error (a bug in fairsim)"
(docs/errors.md, docs/policies.md "Your own policy"; found by a new-user pass)."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from fairsim.cli import main
from fairsim.errors import PolicyContractError
from fairsim.policies.base import check_permutation
from fairsim.types import QueuedRequest

# Line numbers matter: the messages name the ``raise`` lines (PrefillRaises 20, RaisingSelect 30,
# RaisingBind 35).
MODULE = '''\
from fairsim.policies.base import arrival_key


class Base:
    def order(self, waiting, now):
        return sorted(waiting, key=arrival_key)


class LimitText(Base):
    admission_limit = "x"


class LimitMethod(Base):
    def admission_limit(self):
        return 3


class PrefillRaises(Base):
    def on_prefill_tokens(self, total):
        raise RuntimeError("prefill boom")


class PrefillNoArg(Base):
    def on_prefill_tokens(self):
        pass


class RaisingSelect:
    def select(self, pool, n):
        raise KeyError("select boom")


class RaisingBind:
    def bind(self, pool):
        raise RuntimeError("bind boom")

    def select(self, pool, n):
        return list(pool.iter_free())[:n]


class SelectFails(Base):
    def __init__(self):
        self.eviction_hook = RaisingSelect()


class BindFails(Base):
    def __init__(self):
        self.eviction_hook = RaisingBind()


class Limit2(Base):
    admission_limit = 2


class ReturnsSet:
    def order(self, waiting, now):
        return set(waiting)


class ReturnsDict:
    def order(self, waiting, now):
        return dict.fromkeys(waiting)


class ReturnsTuple:
    def order(self, waiting, now):
        return tuple(sorted(waiting, key=arrival_key))


class ReturnsGenerator:
    def order(self, waiting, now):
        return (q for q in sorted(waiting, key=arrival_key))
'''

DEPENDENT = '''\
import os
import not_installed_dependency_xyz


class Cls:
    def order(self, waiting, now):
        return list(waiting)
'''

TYPED = '''\
from typing import Optional


class Typed:
    def __init__(self, w: float = 1.0, k: Optional[int] = None, j: int | None = None):
        self.w, self.k, self.j = w, k, j

    def order(self, waiting, now):
        return list(waiting)
'''

TYPED_TEXT = '''\
from __future__ import annotations


class Typed:
    def __init__(self, j: int | None = None, flag: "Optional[bool]" = None):
        self.j, self.flag = j, flag

    def order(self, waiting, now):
        return list(waiting)
'''


@pytest.fixture
def team(tmp_path, monkeypatch):
    """The package ``team25`` on ``sys.path``; yields its folder."""
    pkg = tmp_path / "team25"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, text in (("pol", MODULE), ("dep", DEPENDENT), ("typed", TYPED), ("typed_text", TYPED_TEXT)):
        (pkg / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield pkg
    for name in [m for m in sys.modules if m.startswith("team25")]:
        del sys.modules[name]


def run(capsys, *argv):
    code = main(["run", *argv, "--format", "json", "--max-requests", "150"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


def error_line(err: str) -> str:
    """The one ``fairsim: error...`` line of stderr (there is exactly one)."""
    lines = [line for line in err.splitlines() if line.startswith("fairsim: error")]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    return lines[0]


class TestAdmissionLimitCheckedAtStart:
    # Was: TypeError "slice indices must be integers" or EngineInvariantError "scheduled nothing",
    # reported as internal errors mid-run.
    @pytest.mark.parametrize("cls, shown", [
        ("LimitText", "'x' (str)"),
        ("LimitMethod", "<bound method LimitMethod.admission_limit of"),
    ])
    def test_not_a_number_exits_2(self, team, capsys, cls, shown):
        code, _, err = run(capsys, "--policy", f"team25.pol:{cls}")
        line = error_line(err)
        assert code == 2
        assert line.startswith(f"fairsim: error: policy 'team25.pol:{cls}': admission_limit is {shown}")
        assert line.endswith("it must be None (no limit) or a whole number of requests >= 1 "
                             "(fairsim/policies/base.py)")

    @pytest.mark.parametrize("value, shown", [(0, "0 (int)"), (True, "True (bool)"), (2.0, "2.0 (float)")])
    def test_zero_bool_or_float_exits_2(self, team, capsys, value, shown):
        (team / "lim.py").write_text(f"from team25.pol import Base\n\nclass L(Base):\n"
                                     f"    admission_limit = {value!r}\n")
        code, _, err = run(capsys, "--policy", "team25.lim:L")
        assert code == 2
        assert error_line(err) == (
            f"fairsim: error: policy 'team25.lim:L': admission_limit is {shown}; it must be None "
            f"(no limit) or a whole number of requests >= 1 (fairsim/policies/base.py)")

    def test_a_whole_number_runs(self, team, capsys):
        code, rows, err = run(capsys, "--policy", "team25.pol:Limit2")
        assert code == 0, err
        assert rows["team25.pol:Limit2"]["requests"] == 150

    def test_a_numpy_integer_runs_as_the_int(self, team, capsys):
        # Was: admission_limit = numpy.int64(2) refused ("whole number"), though it is one.
        (team / "np_lim.py").write_text("import numpy\nfrom team25.pol import Base\n\nclass L(Base):\n"
                                        "    admission_limit = numpy.int64(2)\n")
        code, rows, err = run(capsys, "--policy", "team25.np_lim:L")
        assert code == 0, err
        code, plain, err = run(capsys, "--policy", "team25.pol:Limit2")
        assert code == 0, err
        drop = ("wall_time_s", "policy", "name")
        assert ({k: v for k, v in rows["team25.np_lim:L"].items() if k not in drop}
                == {k: v for k, v in plain["team25.pol:Limit2"].items() if k not in drop})


class TestOnPrefillTokens:
    def test_wrong_signature_refused_at_start(self, team, capsys):
        # Was: TypeError "takes 1 positional argument but 2 were given" mid-run, internal error.
        code, _, err = run(capsys, "--policy", "team25.pol:PrefillNoArg")
        assert code == 2
        assert error_line(err) == (
            "fairsim: error: policy 'team25.pol:PrefillNoArg': on_prefill_tokens() cannot be called "
            "as on_prefill_tokens(total) (too many positional arguments; fairsim/policies/base.py)")

    @pytest.mark.parametrize("mode", [[], ["--mode", "colocated"], ["--instances", "2"]])
    def test_an_exception_is_the_policys_error(self, team, capsys, mode):
        code, _, err = run(capsys, "--policy", "team25.pol:PrefillRaises", *mode)
        assert code == 1
        assert error_line(err) == (
            f"fairsim: error in policy 'team25.pol:PrefillRaises' (PrefillRaises): RuntimeError: "
            f"prefill boom (at {team / 'pol.py'}, line 20)")


class TestEvictionHook:
    @pytest.mark.parametrize("mode", [[], ["--mode", "colocated"], ["--instances", "2"]])
    def test_select_raising_is_the_policys_error(self, team, capsys, mode):
        code, _, err = run(capsys, "--policy", "team25.pol:SelectFails", *mode)
        assert code == 1
        assert error_line(err) == (
            f"fairsim: error in policy 'team25.pol:SelectFails' (SelectFails): KeyError: "
            f"'select boom' (at {team / 'pol.py'}, line 30)")

    @pytest.mark.parametrize("mode", [[], ["--instances", "2"]])
    def test_bind_raising_while_the_engine_is_built(self, team, capsys, mode):
        code, _, err = run(capsys, "--policy", "team25.pol:BindFails", *mode)
        assert code == 1
        assert error_line(err) == (
            f"fairsim: error in policy 'team25.pol:BindFails' (BindFails): RuntimeError: "
            f"bind boom (at {team / 'pol.py'}, line 35)")


class TestOrderReturnsNoOrder:
    @pytest.mark.parametrize("cls, kind", [("ReturnsSet", "set"), ("ReturnsDict", "dict")])
    def test_set_or_dict_breaks_the_contract(self, team, capsys, cls, kind):
        # Was: accepted; a set's iteration order follows object addresses (runs differed).
        code, _, err = run(capsys, "--policy", f"team25.pol:{cls}")
        assert code == 1
        assert error_line(err) == (
            f"fairsim: error: policy contract broken (fairsim/policies/base.py): policy "
            f"'team25.pol:{cls}': order() returned a {kind}, which has no order; return a list "
            f"(or tuple) of the waiting requests")

    def test_tuple_and_generator_run_as_the_list(self, team, capsys):
        rows = {}
        for cls in ("Base", "ReturnsTuple", "ReturnsGenerator"):
            code, out, err = run(capsys, "--policy", f"team25.pol:{cls}")
            assert code == 0, err
            rows[cls] = out[f"team25.pol:{cls}"]
        for key in ("ttft_p50_s", "ttft_p99_s", "ttft_max_s", "hit_rate", "steps"):
            assert rows["ReturnsTuple"][key] == rows["Base"][key] == rows["ReturnsGenerator"][key]

    def test_check_permutation(self):
        qs = [QueuedRequest(request_id=f"r{i}", arrival_time=float(i), prompt_len=10, cached_len=0,
                            uncached_len=10) for i in range(3)]
        assert check_permutation(qs, tuple(reversed(qs)), "p") == qs[::-1]
        assert check_permutation(qs, iter(qs), "p") == qs
        with pytest.raises(PolicyContractError, match=r"^policy 'p': order\(\) returned a frozenset, "):
            check_permutation(qs, frozenset(qs), "p")


def test_a_dependency_that_fails_to_import_names_the_line(team, capsys):
    # Was: the same message without "(at FILE, line N)".
    code, _, err = run(capsys, "--policy", "team25.dep:Cls")
    assert code == 2
    assert error_line(err) == (
        f"fairsim: error: policy 'team25.dep:Cls': importing module 'team25.dep' failed: "
        f"ModuleNotFoundError: No module named 'not_installed_dependency_xyz' "
        f"(at {team / 'dep.py'}, line 2)")


class TestParamKinds:
    @pytest.mark.parametrize("param, shown", [
        ("w=1e400", "w=inf"), ("w=Infinity", "w=inf"), ("w=-Infinity", "w=-inf"), ("w=NaN", "w=nan"),
    ])
    def test_non_finite_float_refused(self, team, capsys, param, shown):
        # Was: 1e400 (JSON reads it as infinity), Infinity and NaN were accepted.
        code, _, err = run(capsys, "--policy", "team25.typed:Typed", "--param", param)
        assert code == 2
        assert error_line(err) == (
            f"fairsim: error: --param {shown}: policy 'team25.typed:Typed' takes a finite number "
            f"there (declared float)")

    @pytest.mark.parametrize("module, param, declared", [
        ("typed", "k=abc", "typing.Optional[int]"),
        ("typed", "j=abc", "int | None"),
        ("typed_text", "j=abc", "int | None"),
    ])
    def test_optional_int_refuses_text(self, team, capsys, module, param, declared):
        # Was: the string 'abc' reached the constructor.
        code, _, err = run(capsys, "--policy", f"team25.{module}:Typed", "--param", param)
        assert code == 2
        assert error_line(err) == (
            f"fairsim: error: --param {param.replace('=abc', '=')}'abc': policy "
            f"'team25.{module}:Typed' takes a whole number or null there (declared {declared})")

    def test_optional_bool_as_quoted_text(self, team, capsys):
        code, _, err = run(capsys, "--policy", "team25.typed_text:Typed", "--param", "flag=3")
        assert code == 2
        assert error_line(err) == (
            "fairsim: error: --param flag=3: policy 'team25.typed_text:Typed' takes true or false "
            "or null there (declared 'Optional[bool]')")

    @pytest.mark.parametrize("module, params, values", [
        ("typed", ["k=5", "j=null", "w=2.5"], {"k": 5, "j": None, "w": 2.5}),
        ("typed", ["k=null", "j=7"], {"k": None, "j": 7}),
        ("typed_text", ["j=4", "flag=true"], {"j": 4, "flag": True}),
    ])
    def test_optional_values_reach_the_class(self, team, module, params, values):
        from fairsim.options import parse_params
        from fairsim.policies import make_policy

        pol = make_policy(f"team25.{module}:Typed", **parse_params(params))
        assert {key: getattr(pol, key) for key in values} == values


class TestWholeNumbers:
    """A parameter annotated ``int`` takes whole numbers, as the shipped policies' integer
    parameters do (``klpm``'s ``k=2.5`` is refused); a default of ``1`` only says a number."""

    @pytest.mark.parametrize("param, shown, declared", [
        ("k=2.5", "k=2.5", "typing.Optional[int]"), ("j=3.0", "j=3.0", "int | None"),
    ])
    def test_int_annotation_refuses_a_fraction(self, team, capsys, param, shown, declared):
        # Was: 2.5 reached a parameter annotated Optional[int].
        code, _, err = run(capsys, "--policy", "team25.typed:Typed", "--param", param)
        assert code == 2
        assert error_line(err) == (
            f"fairsim: error: --param {shown}: policy 'team25.typed:Typed' takes a whole number "
            f"or null there (declared {declared})")

    def test_int_default_takes_a_fraction(self, team, capsys):
        (team / "weighted.py").write_text(
            "class Weighted:\n"
            "    def __init__(self, alpha=1):\n"
            "        self.alpha = alpha\n\n"
            "    def order(self, waiting, now):\n"
            "        return sorted(waiting, key=lambda q: q.arrival_time * self.alpha)\n")
        code, _, err = run(capsys, "--policy", "team25.weighted:Weighted", "--param", "alpha=2.5")
        assert code == 0, err
