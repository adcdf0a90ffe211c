"""DRR, VTC and DLPM: hand-computed orders, state carried across steps, and their guarantees."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from fairsim.policies import DLPM, DRR, VTC, make_policy
from fairsim.policies.clients import client_key, client_of_request, client_of_vllm
from fairsim.types import QueuedRequest, Request


def q(rid: str, c: int, client: str | None, arrival: float, h: int = 0) -> QueuedRequest:
    return QueuedRequest(rid, arrival, h + c, h, c, 0, None, (), 0, client)


def ids(order):
    return [r.request_id for r in order]


class TestClients:
    def test_label_order(self):
        r = Request("r", 0.0, 10, labels={"tenant": "t", "doc_id": 3}, session_id="s")
        assert client_of_request(r) == ("tenant", "t")
        r = Request("r", 0.0, 10, labels={"doc_id": 3}, session_id="s")
        assert client_of_request(r) == ("session", "s")
        assert client_of_request(Request("r", 0.0, 10, labels={"doc_id": 3})) == ("doc", 3)
        assert client_of_request(Request("r", 0.0, 10)) is None

    def test_vllm_cache_salt(self):
        class R:
            cache_salt = "acme"
        assert client_of_vllm(R()) == ("tenant", "acme")
        R.cache_salt = None
        assert client_of_vllm(R()) is None

    def test_no_client_is_own_class(self):
        assert client_key(q("x", 5, None, 0.0)) == ("request", "x")
        assert client_key(q("x", 5, "a", 0.0)) == "a"


class TestDRR:
    def test_hand_computed_two_steps(self):
        p = DRR(quantum=100)
        a1, a2 = q("A1", 60, "a", 0.0), q("A2", 60, "a", 1.0)
        b1, c1 = q("B1", 150, "b", 2.0), q("C1", 30, "c", 3.0)
        # Ring a, b, c. a: +100, A1 (40 left), A2=60 > 40. b: 100 < 150. c: C1, empties.
        # a: 140, A2, empties. b: 200, B1.
        assert ids(p.order([b1, a2, c1, a1], 0.0)) == ["A1", "C1", "A2", "B1"]
        p.on_admitted([a1], 0.0)
        assert p.deficit == {"a": 40.0}
        # A2 (60) > 40 ended a's visit: the cursor is on b.
        assert p.cursor == {"pos": "b", "credited": False}
        d1 = q("D1", 10, "d", 4.0)
        # d (new) joins at the end of the round, before the cursor's b: ring a, d, b, c.
        # b: 100 < 150, c: C1, a: 140 A2, d: D1, b: 200 B1.
        assert ids(p.order([a2, b1, c1, d1], 1.0)) == ["C1", "A2", "D1", "B1"]
        assert p.ring == ["a", "d", "b", "c"]
        p.on_admitted([c1, a2], 1.0)
        # c and a emptied (deficits reset); the cursor is on d, not yet credited.
        assert p.deficit == {"a": 0.0, "b": 100.0, "c": 0.0}
        assert p.cursor == {"pos": "d", "credited": False}
        # a and c leave: ring d, b. d: +100, D1; b: 200, B1.
        assert ids(p.order([d1, b1], 2.0)) == ["D1", "B1"]
        assert p.ring == ["d", "b"] and p.deficit == {"b": 100.0}

    def test_a_returning_client_joins_behind_those_waiting(self):
        """DRR's active list: a client that gets a request (new, or back after its queue
        emptied) is visited after every client already waiting in the round, whatever the
        cursor's place in the ring (Shreedhar & Varghese: appended to the list's tail)."""
        p = DRR(quantum=100)
        a = [q("A1", 100, "a", 0.0), q("A2", 100, "a", 0.1), q("A3", 100, "a", 0.2)]
        b1 = q("B1", 100, "b", 0.01)
        c = [q("C1", 100, "c", 0.02), q("C2", 100, "c", 0.12), q("C3", 100, "c", 0.22)]
        # Ring a, b, c (by oldest request); each visit serves one 100-token request.
        assert ids(p.order([*a, b1, *c], 0.0)) == ["A1", "B1", "C1", "A2", "C2", "A3", "C3"]
        p.on_admitted([a[0]], 0.0)
        assert ids(p.order([*a[1:], b1, *c], 1.0)) == ["B1", "C1", "A2", "C2", "A3", "C3"]
        p.on_admitted([b1], 1.0)  # b empties: it leaves; the cursor moves on to c
        assert p.cursor["pos"] == "c"
        b2 = q("B2", 100, "b", 1.5)
        # Active list c, a (the cursor's c first); b comes back at its tail: C1 A2 B2 C2 A3 C3.
        assert ids(p.order([*a[1:], b2, *c], 2.0)) == ["C1", "A2", "B2", "C2", "A3", "C3"]
        assert p.ring == ["a", "b", "c"]

    def test_nothing_admitted_keeps_state(self):
        p = DRR(quantum=100)
        w = [q("A1", 60, "a", 0.0), q("B1", 60, "b", 1.0)]
        first = ids(p.order(w, 0.0))
        p.on_admitted([], 0.0)
        assert ids(p.order(w, 1.0)) == first and p.deficit == {}

    def test_long_request_waits_rounds(self):
        p = DRR(quantum=100)
        long = q("L", 450, "l", 0.0)
        shorts = [q(f"S{i}", 100, "s", 1.0 + i) for i in range(6)]
        # l needs 5 visits (500 >= 450); s serves one per visit meanwhile: S0..S3 first, then L.
        assert ids(p.order([long] + shorts, 0.0)) == ["S0", "S1", "S2", "S3", "L", "S4", "S5"]

    @given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 500)), min_size=1, max_size=25))
    def test_permutation_and_fair_share(self, reqs):
        w = [q(f"r{i}", c, k, float(i)) for i, (k, c) in enumerate(reqs)]
        order = DRR(quantum=128).order(w, 0.0)
        assert sorted(ids(order)) == sorted(ids(w))
        # DRR's guarantee: at any prefix, two classes still backlogged were served within
        # quantum + max charge of each other.
        served = dict.fromkeys("abc", 0)
        left = {k: sum(c for kk, c in reqs if kk == k) for k in "abc"}
        for r in order:
            served[r.client] += r.uncached_len
            left[r.client] -= r.uncached_len
            back = [k for k in "abc" if left[k] > 0]
            for x in back:
                for y in back:
                    assert served[x] - served[y] <= 128 + 500

    def test_bad_quantum(self):
        with pytest.raises(ValueError, match="quantum"):
            DRR(quantum=0)
        with pytest.raises(ValueError, match="quantum"):
            make_policy("drr", quantum="x")


class TestVTC:
    def test_hand_computed_with_lift(self):
        p = VTC()
        a1, a2, b1 = q("A1", 100, "a", 0.0), q("A2", 100, "a", 1.0), q("B1", 50, "b", 2.0)
        # Counters 0, 0: tie -> oldest request (A1); a then at 100 > b's 0: B1, then A2.
        assert ids(p.order([a1, a2, b1], 0.0)) == ["A1", "B1", "A2"]
        p.on_admitted([a1, b1], 0.0)
        assert p.counter == {"a": 100.0, "b": 50.0}
        c1 = q("C1", 10, "c", 3.0)
        # b left (last_left 50); c is new: lifted to min over a (stayed) = 100. Tie -> A2 first.
        assert ids(p.order([a2, c1], 1.0)) == ["A2", "C1"]
        assert p.counter["c"] == 100.0
        p.on_admitted([a2], 1.0)
        b2 = q("B2", 10, "b", 4.0)
        # b returns: lifted from 50 to min over c (stayed) = 100; tie with c -> C1 (older).
        assert ids(p.order([c1, b2], 2.0)) == ["C1", "B2"]
        assert p.counter["b"] == 100.0

    def test_lift_from_last_left_when_queue_empty(self):
        p = VTC()
        a1 = q("A1", 300, "a", 0.0)
        p.order([a1], 0.0)
        p.on_admitted([a1], 0.0)
        p.order([], 1.0)  # a leaves: last_left = 300
        b1 = q("B1", 5, "b", 2.0)
        p.order([b1], 2.0)
        assert p.counter["b"] == 300.0

    def test_charge_taken_at_order_time(self):
        p = VTC()
        a1 = q("A1", 300, "a", 0.0)
        p.order([a1], 0.0)
        # After admission the engine may report c ~ 1 (its own blocks now cached).
        p.on_admitted([a1._replace(cached_len=299, uncached_len=1)], 0.0)
        assert p.counter["a"] == 300.0


class TestDLPM:
    def test_hand_computed_two_steps(self):
        p = DLPM(quantum=100)
        a1, a2 = q("A1", 80, "a", 0.0, h=500), q("A2", 80, "a", 1.0, h=400)
        a3, b1 = q("A3", 80, "a", 1.5, h=300), q("B1", 50, "b", 2.0, h=0)
        # LPM: A1 A2 A3 B1. Refill a=b=100. A1 (a 20), A2 (a -60), A3 skipped, B1 (b 50).
        # Refill a -> 40: A3.
        assert ids(p.order([b1, a3, a2, a1], 0.0)) == ["A1", "A2", "B1", "A3"]
        p.on_admitted([a1], 0.0)
        assert p.deficit == {"a": 20.0, "b": 100.0}
        # A2 (a -60), A3 skipped, B1 (b 50); refill a -> 40: A3.
        assert ids(p.order([a2, a3, b1], 1.0)) == ["A2", "B1", "A3"]

    def test_several_quanta_at_once(self):
        p = DLPM(quantum=100)
        a1 = q("A1", 350, "a", 0.0, h=10)
        b1, b2 = q("B1", 350, "b", 1.0, h=5), q("B2", 10, "b", 2.0, h=0)
        # Refill 100: A1 (a -250), B1 (b -250). Then one refill of 3 quanta: b = 50 -> B2.
        assert ids(p.order([a1, b1, b2], 0.0)) == ["A1", "B1", "B2"]
        p.on_admitted([a1, b1, b2], 0.0)
        # Both queues emptied: both clients left, their deficits (-250, 40) reset.
        assert p.deficit == {"a": 0.0, "b": 0.0}

    def test_idle_client_reset(self):
        p = DLPM(quantum=100)
        a1 = q("A1", 350, "a", 0.0)
        p.order([a1], 0.0)
        p.on_admitted([a1], 0.0)
        assert p.deficit == {"a": 0.0}  # its queue emptied: -250 reset
        p.order([q("B1", 1, "b", 1.0)], 1.0)
        assert "a" not in p.deficit


@pytest.mark.parametrize("name", ["drr", "vtc", "dlpm"])
@given(st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.integers(1, 5000), st.integers(0, 5000)),
                max_size=20))
def test_permutation(name, reqs):
    w = [q(f"r{i}", c, k, float(i % 3), h=h) for i, (k, c, h) in enumerate(reqs)]
    p = make_policy(name)
    order = p.order(w, 10.0)
    assert sorted(ids(order)) == sorted(ids(w))
    p.on_admitted(order[: len(order) // 2], 10.0)
    assert sorted(ids(p.order(w[len(order) // 2:], 11.0))) == sorted(ids(w[len(order) // 2:]))
