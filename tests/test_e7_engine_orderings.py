"""E7 on its tiny plan: the table's shape and invariants that hold for any simulator output."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from experiments import e7_engine_orderings as e7
from fairsim.policies import policy_names


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("e7")
    assert e7.main(["--tiny", "--out", str(out)]) == 0
    return out


def test_every_policy_on_every_case_and_subset(tiny):
    table = pd.read_parquet(tiny / "table.parquet")
    # four tiny cases, the flood with its misses subset: 5 (case, subset) pairs x every policy
    pairs = {(c.name, s) for c in e7.tiny_cases() for s in ["all", *c.subsets]}
    assert set(zip(table["case"], table["subset"])) == pairs
    assert len(table) == len(pairs) * len(policy_names())
    for _, g in table.groupby(["case", "subset"]):
        assert sorted(g["policy"]) == sorted(policy_names())
    assert set(table.loc[table["case"] == "agent/colocated", "mode"]) == {"colocated"}


def test_ratios_are_to_fcfs(tiny):
    table = pd.read_parquet(tiny / "table.parquet")
    fcfs = table[table["policy"] == "fcfs"]
    assert (fcfs[["p50_x", "p99_x", "max_x"]] == 1.0).all().all()
    assert (fcfs["beyond_fcfs_worst"] == 0).all()  # nobody waits longer than FCFS's own worst
    ref = fcfs.set_index(["case", "subset"])
    for r in table.itertuples():
        assert math.isclose(r.p99_x, r.p99_s / ref.loc[(r.case, r.subset), "p99_s"])
        assert r.p50_s <= r.p99_s <= r.max_s
        assert r.starved == (r.max_s > 3 * r.p99_s)
        assert 0.0 <= r.hit_rate <= 1.0


def test_rows_match_the_requests(tiny):
    table = pd.read_parquet(tiny / "table.parquet")
    req = pd.read_parquet(tiny / "requests.parquet")
    misses = req[(req["case"] == "flood") & (req["klass"] == "miss") & (req["policy"] == "lpm")]
    row = table[(table["case"] == "flood") & (table["subset"] == "misses") & (table["policy"] == "lpm")].iloc[0]
    assert row["requests"] == len(misses) == 4  # the tiny flood has four misses
    assert row["max_s"] == misses["ttft_s"].max()
    assert row["p50_s"] == pytest.approx(np.percentile(misses["ttft_s"], 50))


def test_class_table_and_outputs(tiny):
    classes = pd.read_parquet(tiny / "classes.parquet")
    assert set(classes["class"]) == {"reuse", "flood", "agent"}
    assert len(classes) == 3 * len(policy_names())
    fcfs = classes[classes["policy"] == "fcfs"]
    assert (fcfs[["p50_x", "p99_x", "max_x"]] == 1.0).all().all()
    assert classes.loc[classes["class"] == "agent", "cases"].eq(2).all()
    md = (tiny / "table.md").read_text()
    assert "## agent sessions (2 cases)" in md and "### flood [misses]" in md
    assert (tiny / "e7_orderings.png").stat().st_size > 0
    steps = pd.read_parquet(tiny / "steps-agent.parquet")
    assert set(steps["policy"]) == set(e7.STEP_POLICIES)


def test_unknown_policy_or_case_is_refused():
    with pytest.raises(SystemExit, match="--policies: unknown nope"):
        e7.main(["--tiny", "--policies", "fcfs,nope"])
    with pytest.raises(SystemExit, match="--cases: unknown nope"):
        e7.main(["--tiny", "--cases", "nope"])


def test_fairway_losses_tables(tiny):
    from experiments import e7_fairway_losses as losses

    assert losses.main(["--results", str(tiny)]) == 0
    kinds = pd.read_parquet(tiny / "agent_kinds.parquet")
    for _, g in kinds.groupby(["case", "policy"]):
        assert set(g["kind"]) <= {"all", "first", "later", "subagent"}
        assert g.loc[g["kind"] == "all", "requests"].item() == g.loc[g["kind"] != "all", "requests"].sum()
    by_wait = pd.read_parquet(tiny / "agent_later_by_wait.parquet")
    assert np.allclose(by_wait.groupby(["case", "policy"])["share"].sum(), 1.0)
    assert "## Agent sessions: later turns by queueing delay" in (tiny / "fairway_losses.md").read_text()


def test_ideal_cached_is_the_longest_earlier_sent_prefix():
    req = pd.DataFrame({"request_id": ["a", "b", "c"], "released_s": [0.0, 1.0, 2.0],
                        "prompt_tokens": [1024, 1536, 1024]})
    blocks = {"a": ("x", "y"), "b": ("x", "y", "z"), "c": ("x", "q")}
    # a: nothing sent before; b: a's two blocks; c: only x (q never seen)
    assert e7.ideal_cached(req, blocks, 512).tolist() == [0, 1024, 512]
    # capped at prompt - 1: a 1,024-token prompt whose two blocks were all seen hits 1,023
    again = pd.concat([req, pd.DataFrame({"request_id": ["d"], "released_s": [3.0], "prompt_tokens": [1024]})])
    assert e7.ideal_cached(again.reset_index(drop=True), {**blocks, "d": ("x", "y")}, 512).tolist()[-1] == 1023
