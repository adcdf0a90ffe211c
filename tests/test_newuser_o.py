"""Found by a new user's pass over fleets and disaggregated deployments (docs/fleets.md)."""

from __future__ import annotations

import pytest

from fairsim.cli import main

TRACE = "fairsim/traces/data/conversation_window.jsonl"


def _sweep_spec(tmp_path, engine: str):
    spec = tmp_path / "s.toml"
    spec.write_text(f'[[traces]]\npath = "{TRACE}"\nmax_requests = 20\n[[policies]]\nname = "fcfs"\n'
                    f'[engine]\n{engine}\n')
    return spec


@pytest.mark.parametrize("engine, where, name, used", [
    ('instances = 2\nrouter = "round-robin"\nrouter_params = {dynamo-kv = {overlap_weight = 2}}',
     "engine.router_params", "dynamo-kv", "round-robin"),
    # no router key: the fleet routes round-robin, as run's --instances 2 does
    ('instances = 2\nrouter_params = {dynamo-kv = {overlap_weight = 2}}',
     "engine.router_params", "dynamo-kv", "round-robin"),
    ('mode = "disaggregated"\nrouter_params = {llm-d = {kv_weight = 1}}',
     "engine.router_params", "llm-d", "round-robin"),
    ('instances = 2\nrouter = ["dynamo-kv", "llm-d"]\n'
     'router_params = [{dynamo-kv = {overlap_weight = 1}}, {sglang-cache-aware = {cache_threshold = 0.2}}]',
     "engine.router_params[1]", "sglang-cache-aware", "dynamo-kv, llm-d"),
])
def test_sweep_refuses_router_params_of_a_router_no_run_uses(tmp_path, capsys, engine, where, name, used):
    # Was: the table was dropped unseen and the runs went ahead without it (fairsim run refuses
    # --instances 2 --router-param overlap_weight=2: "router 'round-robin' takes no parameters").
    spec = _sweep_spec(tmp_path, engine)
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert (f"{spec}: {where}: router_params.{name}: no run of this spec uses router '{name}' "
            f"(its runs use {used}), so these parameters would be ignored") in err


def test_sweep_keeps_router_params_of_a_router_some_run_uses(tmp_path, capsys):
    spec = _sweep_spec(tmp_path, 'instances = [1, 2]\nrouter = ["round-robin", "dynamo-kv"]\n'
                                 'router_params = [{dynamo-kv = {overlap_weight = 1}}, {dynamo-kv = {overlap_weight = 4}}]')
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    assert "6 runs; 0 done" in capsys.readouterr().out


def test_run_json_keeps_the_fleet_beside_engine_as_commands_md_says(tmp_path):
    # commands.md said a fleet "adds its keys" to run.json's `engine`; they are top-level keys.
    import json
    from pathlib import Path

    out = tmp_path / "out"
    assert main(["run", "--trace", TRACE, "--max-requests", "20", "--policy", "fcfs", "--instances", "2",
                 "--router", "least-work", "--out", str(out)]) == 0
    info = json.loads((out / "run.json").read_text())
    assert (info["instances"], info["router"], info["router_params"]) == (2, "least-work", {})
    assert not {"instances", "router", "router_params"} & set(info["engine"])
    doc = Path(__file__).resolve().parents[1].joinpath("docs", "commands.md").read_text()
    assert "deployment adds its keys)" not in doc
    assert "beside it a fleet's `instances`, `router` and `router_params`" in doc
