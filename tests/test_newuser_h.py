"""What new-user pass H (choosing and configuring policies) found, each checked by hand."""

from __future__ import annotations

import json

import pytest

from fairsim.cli import main

# JSON reads a whole number of any length exactly: 1 followed by 400 zeros is no float.
BIG = "1" + "0" * 400


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _policy_module(tmp_path, monkeypatch, name, body):
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}:P"


@pytest.mark.parametrize("policy, key", [
    ("fairway", "fast_weight"), ("fairway", "slo_floor"), ("drr", "quantum"),
    ("lpm-aging", "aging_tokens_per_pass"), ("sjf-aging", "aging_tokens_per_s"),
])
def test_a_whole_number_beyond_the_float_range_is_bad_input(capsys, policy, key):
    # Was: "internal error (a bug in fairsim)": OverflowError from the policy's range check, exit 1.
    code, out, err = run_cli(capsys, "run", "--policy", policy, "--param", f"{key}={BIG}", "--max-requests", "5")
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1] == (
        f"fairsim: error: --param {key}=<a whole number of 401 digits>: beyond the float range "
        f"(±1.8e+308) in which policy {policy!r} reads it")


def test_a_whole_number_beyond_the_float_range_for_a_users_float_parameter(tmp_path, monkeypatch, capsys):
    spec = _policy_module(tmp_path, monkeypatch, "bigfloat", (
        "class P:\n"
        "    def __init__(self, w: float = 1.0):\n"
        "        self.w = w\n"
        "    def order(self, waiting, now):\n"
        "        return list(waiting)\n"))
    code, _, err = run_cli(capsys, "run", "--policy", spec, "--param", f"w={BIG}", "--max-requests", "5")
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "fairsim: error: --param w=<a whole number of 401 digits>: policy 'bigfloat:P' takes a "
        "finite number there (declared float)")


def test_a_huge_whole_number_where_one_is_meant_still_runs(capsys):
    # klpm's k is a count: k -> infinity is LPM, so a huge k stays accepted, as before.
    code, out, _ = run_cli(capsys, "compare", "--policies", "lpm,klpm", "--param", f"klpm.k={BIG}",
                           "--max-requests", "60", "--format", "json")
    assert code == 0
    rows = json.loads(out)
    assert rows["klpm"]["ttft_p50_s"] == rows["lpm"]["ttft_p50_s"]
    assert rows["klpm"]["ttft_max_s"] == rows["lpm"]["ttft_max_s"]


def test_a_whole_number_past_pythons_digit_limit_names_the_option_or_file(tmp_path, capsys):
    # Was: "fairsim: error: Exceeds the limit (4300 digits) for integer string conversion: ...;
    # use sys.set_int_max_str_digits() to increase the limit", naming neither --param nor the file.
    huge = "1" + "0" * 5000
    code, _, err = run_cli(capsys, "run", "--policy", "klpm", "--param", f"k={huge}", "--max-requests", "5")
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "fairsim: error: --param k=<5001 characters>: a whole number of more digits than Python reads "
        "(at most 4,300)")
    config = tmp_path / "pc.json"
    config.write_text('{"policy": "klpm", "params": {"k": ' + huge + "}}")
    code, _, err = run_cli(capsys, "run", "--policy-config", config, "--max-requests", "5")
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        f"fairsim: error: --policy-config {config}: a whole number of more digits than Python reads "
        "(at most 4,300)")


@pytest.mark.parametrize("argv, says", [
    # Was: "fixes fair_lane=False; to run fair_lane=False, use policy 'fairway' with --param", a
    # spelling --param reads as the string 'False' and refuses.
    (["--policy", "fairway-nofair", "--param", "fair_lane=true"],
     "policy 'fairway-nofair' fixes fair_lane=false; to run fair_lane=true, use policy 'fairway' with --param"),
    (["--policy", "lpm-sglang", "--param", "sglang_dedup=false"],
     "policy 'lpm-sglang' fixes sglang_dedup=true; to run sglang_dedup=false, use policy 'lpm' with --param"),
    # The value it fixes anyway: say so, rather than send the user to another policy for it.
    (["--policy", "fairway-nofair", "--param", "fair_lane=false"],
     "policy 'fairway-nofair' fixes fair_lane=false already; leave out --param fair_lane"),
    (["--policy", "klpm4", "--param", "k=4"], "policy 'klpm4' fixes k=4 already; leave out --param k"),
    (["--policy", "klpm", "--param", "k=true"], "--param (k=true) of policy 'klpm': "),
    (["--policy", "fairway-carry", "--param", "wait_cap=true"], "--param (wait_cap=true) of policy 'fairway-carry': "),
])
def test_refusals_spell_values_as_param_reads_them(capsys, argv, says):
    code, _, err = run_cli(capsys, "run", *argv, "--max-requests", "5")
    assert code == 2
    assert err.strip().splitlines()[-1].startswith(f"fairsim: error: {says}"), err


def test_a_users_parameter_refusal_spells_true_as_typed(tmp_path, monkeypatch, capsys):
    spec = _policy_module(tmp_path, monkeypatch, "intparam", (
        "class P:\n"
        "    def __init__(self, k: int = 3):\n"
        "        self.k = k\n"
        "    def order(self, waiting, now):\n"
        "        return list(waiting)\n"))
    code, _, err = run_cli(capsys, "run", "--policy", spec, "--param", "k=true", "--max-requests", "5")
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "fairsim: error: --param k=true: policy 'intparam:P' takes a whole number there (declared int)")


def test_an_async_order_is_a_broken_contract_without_a_never_awaited_warning(tmp_path, monkeypatch, capsys, recwarn):
    # Was: the right message, followed on stderr by "fairsim/cli.py:296: RuntimeWarning: coroutine
    # 'P.order' was never awaited" and a tracemalloc hint.
    import gc
    import warnings

    spec = _policy_module(tmp_path, monkeypatch, "asyncorder", (
        "class P:\n"
        "    async def order(self, waiting, now):\n"
        "        return list(waiting)\n"))
    warnings.simplefilter("always")
    code, _, err = run_cli(capsys, "run", "--policy", spec, "--max-requests", "5")
    gc.collect()
    assert code == 1
    assert ("policy 'asyncorder:P': order() returned coroutine, not a list of the waiting requests "
            "(order is an async def; the engines call it as a plain function)") in err
    assert [str(w.message) for w in recwarn if issubclass(w.category, RuntimeWarning)] == []


@pytest.mark.parametrize("body, says, status", [
    # Was: exit 0, the popped request left out of that step's order unnoticed (the check compared
    # the order with the list the policy had just shortened).
    ("        if len(waiting) > 1:\n            waiting.pop()\n        return waiting\n",
     "order() must return a permutation of the 3 waiting requests it was given, got 2 entries: missing 'rag-00003'", 1),
    # Was: "internal error (a bug in fairsim)": EngineInvariantError, nothing scheduled.
    ("        waiting.clear()\n        return waiting\n",
     "order() must return a permutation of the 1 waiting requests it was given, got 0 entries: missing 'rag-00000'", 1),
])
def test_a_policy_that_shortens_the_list_it_was_given_breaks_the_contract(tmp_path, monkeypatch, capsys, body, says, status):
    name = "shorten_" + ("pop" if "pop" in body else "clear")
    spec = _policy_module(tmp_path, monkeypatch, name, "class P:\n    def order(self, waiting, now):\n" + body)
    code, _, err = run_cli(capsys, "run", "--policy", spec, "--max-requests", "50")
    assert code == status and "policy contract broken" in err and says in err, err


def test_a_policy_that_sorts_the_list_it_was_given_in_place_still_runs(tmp_path, monkeypatch, capsys):
    # Sorting in place and returning that list is a permutation: as before, the same results as
    # returning a sorted copy.
    in_place = _policy_module(tmp_path, monkeypatch, "inplace", (
        "class P:\n    def order(self, waiting, now):\n"
        "        waiting.sort(key=lambda r: (r.uncached_len, r.arrival_time, r.request_id))\n"
        "        return waiting\n"))
    copied = _policy_module(tmp_path, monkeypatch, "copied", (
        "class P:\n    def order(self, waiting, now):\n"
        "        return sorted(waiting, key=lambda r: (r.uncached_len, r.arrival_time, r.request_id))\n"))
    code, out, _ = run_cli(capsys, "compare", "--policies", f"fcfs,{in_place},{copied}",
                           "--max-requests", "200", "--format", "json")
    assert code == 0
    rows = json.loads(out)
    assert rows[in_place]["ttft_p50_s"] == rows[copied]["ttft_p50_s"]
    assert rows[in_place]["ttft_max_s"] == rows[copied]["ttft_max_s"]
    assert rows[in_place]["ttft_p50_s"] < rows["fcfs"]["ttft_p50_s"]  # (the order did apply)


@pytest.mark.parametrize("body, says", [
    # Was: "policy contract broken: order() returned generator, not a list of the waiting
    # requests": the TypeError raised in the generator's body was taken for a wrong return type.
    ("    def order(self, waiting, now):\n        yield from waiting\n        None + 1\n",
     "error in policy '{spec}' (P): TypeError: unsupported operand type(s) for +: 'NoneType' and 'int' "
     "(at {path}, line 4)"),
    # Was: "internal error (a bug in fairsim, please report it): RuntimeError: iter boom".
    ("    class It:\n        def __iter__(self):\n            raise RuntimeError('iter boom')\n"
     "    def order(self, waiting, now):\n        return self.It()\n",
     "error in policy '{spec}' (P): RuntimeError: iter boom (at {path}, line 4)"),
])
def test_an_error_raised_while_iterating_the_returned_order_is_the_policys(tmp_path, monkeypatch, capsys, body, says):
    name = "iterfail_" + ("gen" if "yield" in body else "iter")
    spec = _policy_module(tmp_path, monkeypatch, name, "class P:\n" + body)
    code, _, err = run_cli(capsys, "run", "--policy", spec, "--max-requests", "20")
    assert code == 1
    assert f"fairsim: {says.format(spec=spec, path=tmp_path / (name + '.py'))}" in err, err
    assert "internal error" not in err and "policy contract broken" not in err
