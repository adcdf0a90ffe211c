"""The policy contract (fairsim/policies/base.py) in the simulator: permutation check and the
snapshots handed to on_admitted."""

from __future__ import annotations

import pytest

from fairsim.errors import PolicyContractError
from fairsim.policies import make_policy
from fairsim.policies.base import arrival_key, check_permutation
from fairsim.sim import EngineConfig, simulate
from tests.utils import constant_profile, make_queued, make_request

PROFILE = constant_profile(step_s=1.0)


class _Bad:
    """FCFS, except that order() breaks the permutation in one way once 2+ requests wait."""

    def __init__(self, how: str) -> None:
        self.name = f"bad-{how}"
        self.how = how

    def order(self, waiting, now):
        out = sorted(waiting, key=arrival_key)
        if len(out) >= 2:
            if self.how == "duplicate":
                out[1] = out[0]
            elif self.how == "drop":
                out.pop()
            elif self.how == "add":
                out.append(make_queued("intruder", 0, 4))
        return out


# The message the live hook logs is the same (tests/test_live_hook.py::TestContract).
EXPECTED = {
    "duplicate": r"policy 'bad-duplicate': order\(\) must return a permutation of the 2 waiting "
                 r"requests it was given, got 2 entries: duplicate 'B'; missing 'C'",
    "drop": r"policy 'bad-drop': .* of the 2 waiting requests it was given, got 1 entries: missing 'C'$",
    "add": r"policy 'bad-add': .* got 3 entries: foreign 'intruder' \(not one of the snapshots",
}


class TestCheckPermutation:
    """check_permutation on hand-built snapshots."""

    W = [make_queued("a", 0, 4), make_queued("b", 4, 4), make_queued("c", 8, 4)]

    def test_permutation_passes_and_is_a_list(self):
        out = check_permutation(self.W, reversed(self.W), "p")
        assert out == self.W[::-1] and isinstance(out, list)

    def test_equal_but_foreign_object_refused(self):
        # A copy with the same fields is not one of the snapshots the policy was given.
        copy = [self.W[0], self.W[1], self.W[2]._replace()]
        with pytest.raises(PolicyContractError, match=r"missing 'c'; foreign 'c'"):
            check_permutation(self.W, copy, "p")

    def test_not_iterable(self):
        with pytest.raises(PolicyContractError, match="order\\(\\) returned NoneType"):
            check_permutation(self.W, None, "p")

    def test_empty(self):
        assert check_permutation([], [], "p") == []

    def test_long_lists_are_cut(self):
        w = [make_queued(f"r{i}", 0, 4) for i in range(10)]
        with pytest.raises(PolicyContractError, match=r"missing 'r0', 'r1', 'r2' and 7 more"):
            check_permutation(w, [], "p")


class TestSimulatorRefusesBrokenOrders:
    """A broken order stops the run with PolicyContractError (not an error from inside SimPy)."""

    # A runs alone in step 0 (budget 4); B and C wait together at step 1.
    REQS = [make_request("A", 0.0, 4), make_request("B", 0.1, 4), make_request("C", 0.2, 4)]
    CFG = EngineConfig(budget_tokens=4, block_size=4, kv_blocks=20)

    @pytest.mark.parametrize("how", sorted(EXPECTED))
    def test_broken(self, how):
        with pytest.raises(PolicyContractError, match=EXPECTED[how]):
            simulate(self.REQS, _Bad(how), PROFILE, self.CFG)


class _Recorder:
    """FCFS that records every order() input and on_admitted() call."""

    name = "recorder"

    def __init__(self) -> None:
        self.orders: list[tuple[float, list]] = []
        self.admitted: list[tuple[float, list]] = []

    def order(self, waiting, now):
        self.orders.append((now, list(waiting)))
        return sorted(waiting, key=arrival_key)

    def on_admitted(self, admitted, now):
        self.admitted.append((now, list(admitted)))


class TestOnAdmittedSnapshots:
    """on_admitted gets the start-of-step snapshots given to order(), at the same now."""

    def test_start_of_step_snapshots(self):
        # W runs in step 0 alone (budget 8); H and M wait together from step 1 on.
        reqs = [make_request("W", 0.0, 8, [1, 2]), make_request("H", 0.5, 9, [1, 2]),
                make_request("M", 0.6, 9, [7, 8])]
        rec = _Recorder()
        simulate(reqs, rec, PROFILE, EngineConfig(budget_tokens=8, block_size=4, kv_blocks=20))
        assert len(rec.orders) >= 1
        order_snaps = {id(q) for _, snaps in rec.orders for q in snaps}
        for now, admitted in rec.admitted:
            # The very objects handed to order() in the step with the same now.
            given = {id(q) for t, snaps in rec.orders if t == now for q in snaps}
            assert {id(q) for q in admitted} <= given <= order_snaps
        ids = [q.request_id for _, adm in rec.admitted for q in adm]
        assert sorted(ids) == ["H", "M", "W"]

    def test_snapshot_not_refreshed_after_admission(self):
        # A (8 tokens, blocks 1,2) and B (same blocks) arrive together; FCFS admits A then B in
        # the same step with budget 16. At the start of the step nothing is cached, so B's
        # snapshot says h = 0 although A's blocks became hittable during admission (and B did
        # hit them). The old simulator rebuilt B's snapshot after admission (h = 4).
        reqs = [make_request("A", 0.0, 8, [1, 2]), make_request("B", 0.0, 8, [1, 2])]
        rec = _Recorder()
        res = simulate(reqs, rec, PROFILE, EngineConfig(budget_tokens=16, block_size=4, kv_blocks=20))
        (now, admitted), = rec.admitted
        assert now == 0.0 and [q.request_id for q in admitted] == ["A", "B"]
        assert [q.cached_len for q in admitted] == [0, 0]
        assert res.requests.set_index("request_id").loc["B", "cached_tokens"] == 4

    def test_klpm_turns_count_admissions(self):
        reqs = [make_request(f"r{i}", 0.1 * i, 4) for i in range(6)]
        policy = make_policy("klpm4")
        simulate(reqs, policy, PROFILE, EngineConfig(budget_tokens=4, block_size=4, kv_blocks=20))
        assert policy.turn == 6
