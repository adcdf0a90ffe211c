"""What newuser-r's pass (determinism, compiled against pure Python) found, each checked by hand."""

from __future__ import annotations

import json

import pytest

from fairsim.cli import main


def run_json(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _tenant_trace(path, tenants):
    rows = []
    for i, tenant in enumerate(tenants):
        ids = [0, 1] if i % 2 else [100 + i, 200 + i]
        rows.append({"timestamp": i // 3, "input_length": 1000, "output_length": 3, "hash_ids": ids, "tenant": tenant})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("kind", ["object", "list"])
def test_a_tenant_label_that_is_a_json_object_or_list_is_a_client(tmp_path, capsys, kind):
    # Was: "internal error (a bug in fairsim ...): TypeError: unhashable type: 'dict'" (or 'list')
    # from DRR, DRR-Dynamo, VTC and DLPM, on either path: the label became the client as is.
    # Now equal values are one client: the same runs as with a string per value.
    a, b = ({"team": 1}, {"team": 2}) if kind == "object" else ([1], [2])
    pattern = [a, b, a, a, b, a, b, b, a, a, b, a]
    made = _tenant_trace(tmp_path / "made.jsonl", pattern)
    named = _tenant_trace(tmp_path / "named.jsonl", ["A" if t == a else "B" for t in pattern])
    policies = "drr,drr-dynamo,vtc,dlpm"
    results = []
    for trace in (made, named):
        code, out, err = run_json(capsys, "compare", "--policies", policies, "--trace", trace,
                                  "--time-scale", "0.01", "--format", "json")
        assert code == 0, err
        rows = json.loads(out)
        results.append({p: (rows[p]["ttft_p50_s"], rows[p]["ttft_p99_s"], rows[p]["ttft_max_s"])
                        for p in policies.split(",")})
    assert results[0] == results[1]


def test_a_list_tenant_and_an_object_tenant_are_not_one_client():
    from fairsim.policies.clients import client_of_request
    from fairsim.types import Request

    as_list = Request("a", 0.0, 10, labels={"tenant": [["k", 1]]})
    as_object = Request("b", 0.0, 10, labels={"tenant": [{"k": 1}]})
    same = Request("c", 0.0, 10, labels={"tenant": [{"k": 1}]})
    assert client_of_request(as_list) != client_of_request(as_object)
    assert client_of_request(as_object) == client_of_request(same)
    assert hash(client_of_request(as_object)) == hash(client_of_request(same))
