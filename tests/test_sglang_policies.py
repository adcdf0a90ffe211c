"""SGLang's orderings (fairsim/policies/sglang.py) on hand-computed queues, their fast paths, and
the prefill-token counter of policy contract rule 5 (simulator side)."""

from __future__ import annotations

import random

import pytest

from fairsim.costmodel import DEFAULT_PROFILE, load_profile
from fairsim.policies import make_policy
from fairsim.policies.sglang import (HRRN, LOF, DFSWeight, DedupSortedOrder, KeptOrder,
                                     ShortestPrefillFirst, in_batch_deprioritized, _spf_key)
from fairsim.sim.config import EngineConfig
from fairsim.sim import simulate
from fairsim.types import QueuedRequest, Request


def q(rid, t, L, h=0, *, keys=(), bs=16, arr_p=0, out=1):
    return QueuedRequest(rid, t, L, h, max(1, L - h), 0, None, tuple(keys), bs if keys else 0,
                         None, arr_p, out)


def ids(order):
    return [r.request_id for r in order]


# -- hrrn -------------------------------------------------------------------------------------
def test_hrrn_ratio_of_waited_prefill_work_to_uncached_work():
    # P = 1000 prefill tokens so far. ratios: a (1000-0)/500 = 2, b (1000-600)/100 = 4,
    # c (1000-200)/800 = 1, d (1000-600)/200 = 2 (ties a on the ratio; a arrived first).
    p = HRRN()
    p.on_prefill_tokens(1000)
    w = [q("a", 0.0, 500, arr_p=0), q("b", 1.0, 100, arr_p=600), q("c", 0.5, 800, arr_p=200),
         q("d", 1.5, 200, arr_p=600)]
    assert ids(p.order(w, 2.0)) == ["b", "a", "d", "c"]


def test_hrrn_uncached_is_prompt_minus_hit_and_new_arrivals_have_ratio_zero():
    # a: 400 waited over 100 uncached (500 - 400 hit) = 4; b: 400 over 300 = 1.33; c just arrived
    # (arrival counter = P): ratio 0, behind the others whatever its size.
    p = HRRN()
    p.on_prefill_tokens(400)
    w = [q("c", 3.0, 2, arr_p=400), q("b", 1.0, 300, arr_p=0), q("a", 2.0, 500, h=400, arr_p=0)]
    assert ids(p.order(w, 3.0)) == ["a", "b", "c"]


def test_hrrn_deprioritises_a_shared_uncached_prefix():
    # x1, x2 share their first two 16-token blocks (32 tokens) and have no hit: x2 (later) goes
    # last although its ratio is the highest. y has its own prefix.
    p = HRRN()
    p.on_prefill_tokens(1000)
    w = [q("x1", 0.0, 500, keys=("A", "B", "C"), arr_p=0), q("x2", 1.0, 50, keys=("A", "B", "D"), arr_p=0),
         q("y", 2.0, 400, keys=("E", "F"), arr_p=0)]
    assert ids(p.order(w, 3.0)) == ["y", "x1", "x2"]
    assert ids(HRRN(sglang_dedup=False).order(w, 3.0)) == ["x1", "x2", "y"]  # all ratio 0 at P = 0


def test_hrrn_keeps_the_previous_order_above_128_waiting():
    p = HRRN()
    p.on_prefill_tokens(10_000)
    small = [q(f"r{i:03d}", float(i), 1000 - i) for i in range(128)]
    first = ids(p.order(small, 0.0))
    assert first == [f"r{i:03d}" for i in range(127, -1, -1)]  # shortest uncached first at equal wait
    # 129 waiting: no re-sort; the newcomer (highest ratio) goes to the back.
    p.on_prefill_tokens(20_000)
    newcomer = q("z", 200.0, 1, arr_p=0)
    assert ids(p.order(small + [newcomer], 0.0)) == first + ["z"]


# -- shortest-prefill-first -----------------------------------------------------------------
def test_shortest_prefill_first_orders_by_uncached_tokens_then_arrival():
    w = [q("a", 0.0, 900), q("b", 1.0, 1000, h=800), q("c", 2.0, 200), q("d", 3.0, 250, h=50)]
    # uncached: a 900, b 200, c 200, d 200 -> b, c, d by arrival, then a
    assert ids(ShortestPrefillFirst().order(w, 4.0)) == ["b", "c", "d", "a"]


def test_shortest_prefill_first_deprioritised_ones_last_and_sorted_by_uncached():
    w = [q("x1", 0.0, 900, keys=("A", "B")), q("x2", 1.0, 600, keys=("A", "B")),
         q("x3", 2.0, 100, keys=("A", "B")), q("y", 3.0, 800, keys=("C", "D"))]
    assert ids(ShortestPrefillFirst().order(w, 4.0)) == ["y", "x1", "x3", "x2"]


def test_in_batch_rule_skips_requests_with_a_hit_above_32_tokens():
    # x2 has 48 cached tokens: SGLang does not check it, so it is not de-prioritised.
    w = [q("x1", 0.0, 900, keys=("A", "B", "C")), q("x2", 1.0, 600, h=48, keys=("A", "B", "C")),
         q("x3", 2.0, 100, h=32, keys=("A", "B", "C"))]
    assert in_batch_deprioritized(w) == {"x3"}


# -- lof ------------------------------------------------------------------------------------
def test_lof_longest_requested_output_first():
    w = [q("a", 0.0, 10, out=5), q("b", 1.0, 10, out=300), q("c", 2.0, 10, out=5), q("d", 3.0, 10, out=40)]
    assert ids(LOF().order(w, 4.0)) == ["b", "d", "a", "c"]


# -- dfs-weight -------------------------------------------------------------------------------
def test_dfs_weight_heaviest_subtree_first_and_own_requests_after_children():
    # Tree of cached prefixes (16-token blocks): A has children AB (requests p, q2) and AC (r);
    # s sits at A itself; t at D; u and v have no hit (root).
    # weights: A = 4 (s, p, q2, r), D = 1; AB = 2, AC = 1.
    # walk: A -> AB (p, q2) -> AC (r) -> A's own (s) -> D (t) -> root's own (u, v)
    w = [q("u", 0.0, 100, keys=("X", "Y")), q("t", 1.0, 100, h=16, keys=("D", "E")),
         q("r", 2.0, 100, h=32, keys=("A", "C", "Z")), q("s", 3.0, 100, h=16, keys=("A", "Q")),
         q("p", 4.0, 100, h=32, keys=("A", "B", "P")), q("q2", 5.0, 100, h=32, keys=("A", "B", "R")),
         q("v", 6.0, 100, keys=("W",))]
    assert ids(DFSWeight().order(w, 7.0)) == ["p", "q2", "r", "s", "t", "u", "v"]


def test_dfs_weight_equal_weights_by_earliest_arrival_in_the_subtree():
    w = [q("b", 1.0, 100, h=16, keys=("B", "x")), q("a", 2.0, 100, h=16, keys=("A", "y")),
         q("a0", 0.5, 100, h=32, keys=("A", "z", "w"))]
    # A holds a0 and a (weight 2), B holds b (weight 1): A first; inside A, a0's node (Az) then a.
    assert ids(DFSWeight().order(w, 3.0)) == ["a0", "a", "b"]
    w2 = w[:2]  # A and B both weight 1: B's request arrived first
    assert ids(DFSWeight().order(w2, 3.0)) == ["b", "a"]


def _reference_dfs(waiting):
    """A literal transcription of SGLang's _dfs_weight_order over the cached-prefix trie."""
    children: dict[tuple, list[tuple]] = {(): []}
    at: dict[tuple, list] = {}
    for r in sorted(waiting, key=lambda r: (r.arrival_time, r.request_id)):
        path = tuple(r.block_keys[: r.cached_len // r.block_size]) if r.block_size else ()
        for d in range(1, len(path) + 1):
            if path[:d] not in children:
                children[path[:d]] = []
                children[path[:d - 1]].append(path[:d])
        at.setdefault(path, []).append(r)
    weight: dict[tuple, int] = {}

    def calc(node):
        weight[node] = len(at.get(node, ())) + sum(calc(c) for c in children[node])
        return weight[node]

    calc(())
    out = []

    def walk(node):
        for c in sorted(children[node], key=lambda c: -weight[c]):
            walk(c)
        out.extend(at.get(node, ()))

    walk(())
    return out


@pytest.mark.parametrize("seed", range(20))
def test_dfs_weight_matches_a_transcription_of_sglang_on_random_trees(seed):
    rng = random.Random(seed)
    w = []
    for i in range(rng.randint(1, 30)):
        keys = tuple(rng.choice("ABC") + str(d) for d in range(rng.randint(0, 4)))
        h = 16 * rng.randint(0, len(keys))
        w.append(q(f"r{i}", rng.choice([0.0, 1.0, 2.0, 3.0]), 16 * len(keys) + 5, h, keys=keys))
    assert ids(DFSWeight().order(w, 5.0)) == ids(_reference_dfs(w))


# -- fast paths against order() under random adds/removes/changes ---------------------------
def _random_queue_ops(seed, n_ops=400):
    rng = random.Random(seed)
    for i in range(n_ops):
        keys = tuple(rng.choice("AB") + str(d) for d in range(rng.randint(0, 3))) + (f"u{i}",)
        yield rng, q(f"r{i:04d}", float(i), 16 * len(keys) + 1, 16 * rng.randint(0, 2), keys=keys,
                     arr_p=rng.randint(0, 50) * 100, out=rng.randint(1, 9))


@pytest.mark.parametrize("make", [lambda: ShortestPrefillFirst(), lambda: DFSWeight(), lambda: LOF(),
                                  lambda: HRRN(), lambda: make_policy("lpm-sglang")])
@pytest.mark.parametrize("seed", range(4))
def test_fast_path_equals_order_under_churn(make, seed):
    ref, fast = make(), make()
    inc = fast.incremental_order()
    waiting: dict[str, QueuedRequest] = {}
    for step, (rng, new) in enumerate(_random_queue_ops(seed)):
        waiting[new.request_id] = new
        inc.add(new)
        if waiting and rng.random() < 0.3:  # a snapshot changed (another hit)
            old = waiting[rng.choice(sorted(waiting))]
            changed = old._replace(cached_len=16 * rng.randint(0, 2))
            changed = changed._replace(uncached_len=max(1, changed.prompt_len - changed.cached_len))
            waiting[old.request_id] = changed
            inc.add(changed)
        for p in (ref, fast):
            if hasattr(p, "on_prefill_tokens"):
                p.on_prefill_tokens(step * 100)
        want = ids(ref.order(list(waiting.values()), float(step)))
        assert ids(inc.iter_order(float(step))) == want
        # admit the first few of the order (the queue grows past 128 and shrinks again)
        for rid in want[: rng.choice([0, 0, 1, 3]) if step < 250 else 4]:
            del waiting[rid]
            inc.remove(rid)


def test_dedup_sorted_order_moves_the_next_of_a_group_forward_when_the_first_leaves():
    inc = DedupSortedOrder(_spf_key)
    for r in [q("x1", 0.0, 900, keys=("A", "B")), q("x2", 1.0, 600, keys=("A", "B")), q("y", 2.0, 800)]:
        inc.add(r)
    assert ids(inc.iter_order()) == ["y", "x1", "x2"]
    inc.remove("x1")
    assert ids(inc.iter_order()) == ["x2", "y"]


def test_kept_order_appends_new_arrivals_in_arrival_order_above_128():
    inc = KeptOrder(lambda w: sorted(w, key=lambda r: -r.prompt_len))
    for i in range(129):
        inc.add(q(f"r{i:03d}", float(i), 10 + i))
    assert ids(inc.iter_order())[:2] == ["r000", "r001"]  # 129 > 128: never sorted, arrival order
    inc.remove("r000")  # 128 left: sorted
    assert ids(inc.iter_order())[0] == "r128"


# -- the prefill-token counter (contract rule 5), in the simulator ------------------------------
class Recording:
    """FCFS that records the counter and each snapshot's arrival counter."""

    name = "recording"

    def __init__(self):
        self.totals = []
        self.arrivals = {}

    def on_prefill_tokens(self, total):
        self.totals.append(total)

    def order(self, waiting, now):
        for r in waiting:
            self.arrivals.setdefault(r.request_id, r.arrival_prefill_tokens)
        return sorted(waiting, key=lambda r: (r.arrival_time, r.request_id))


@pytest.mark.parametrize("mode", ["prefill-only", "colocated"])
def test_simulator_counts_prefill_tokens_of_every_step(mode):
    profile = load_profile(DEFAULT_PROFILE)
    config = EngineConfig(mode=mode, budget_tokens=512)
    # a: 1,200 tokens (three chunks), b arrives during a's prefill, c much later.
    reqs = [Request("a", 0.0, 1200, output_len=3), Request("b", 1e-6, 100, output_len=2),
            Request("c", 100.0, 50, output_len=1)]
    pol = Recording()
    res = simulate(reqs, pol, profile, config)
    steps = res.steps
    prefill = [t - d for t, d in zip(steps["tokens"], steps["decode_tokens"])]
    # b joined at the start of step 1, after step 0 computed 512 of a's tokens.
    assert pol.arrivals["a"] == 0
    assert pol.arrivals["b"] == 512
    # c joined after all prompt tokens of a and b (1,300) were computed; decodes do not count.
    assert pol.arrivals["c"] == 1300 == sum(prefill[:-1])
    assert pol.totals[-1] == 1300
