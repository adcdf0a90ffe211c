"""Hook robustness in a real engine: a failing policy keeps vLLM's order and loses nothing;
policies that need more than an order are refused."""

from __future__ import annotations

import os
import sys

import pytest

pytestmark = pytest.mark.live

from fairsim.live.engine import ENGINE_ENV  # noqa: E402  (no vLLM import)

for _k, _v in ENGINE_ENV.items():  # in-process core, small KV space, one bound OpenMP thread
    os.environ.setdefault(_k, _v)

from fairsim.live.engine import LiveConfig, live_scheduler, make_llm  # noqa: E402
from fairsim.live.prompts import block_tokens  # noqa: E402
from fairsim.live.scheduler import build_policy, read_settings  # noqa: E402
from fairsim.policies import registry  # noqa: E402


class _Broken:
    """A policy that raises on every call (a bug in a policy must not stop serving)."""

    name = "broken"

    def order(self, waiting, now):
        raise ZeroDivisionError("policy bug")


class _Skipper:
    name = "skipper"
    skips_misfits = True

    def order(self, waiting, now):
        return list(waiting)


class _AddFails:
    """FCFS whose fast path raises on its third ``add`` (a bug in a team's incremental order)."""
    name = "add-fails"

    def order(self, waiting, now):
        return sorted(waiting, key=lambda q: (q.arrival_time, q.request_id))

    def incremental_order(self):
        from fairsim.policies.incremental import ArrivalOrder

        class Failing(ArrivalOrder):
            adds = 0

            def add(self, q):
                Failing.adds += 1
                if Failing.adds == 3:
                    raise RuntimeError("broken add")
                super().add(q)
        return Failing()


def _six_requests(policy):
    """A tiny engine whose hook runs ``policy``, with six 300-token requests arriving 1 s apart:
    ``(llm, engine, scheduler, request ids)``."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    llm = make_llm(LiveConfig(policy="fcfs", kv_blocks=64, max_num_seqs=4, budget_tokens=512))
    engine = llm.llm_engine
    sched = live_scheduler(llm)
    sched.fairsim_policy = policy
    params = SamplingParams(max_tokens=1, detokenize=False)
    ids = [engine.add_request(f"r{i}", TokensPrompt(prompt_token_ids=block_tokens(f"r{i}", 300)),
                              params, arrival_time=float(i)) for i in range(6)]
    return llm, engine, sched, ids


class TestIncrementalAddFailure:
    def test_new_requests_are_kept_when_add_raises(self):
        # Found in review: requests not yet in the hook's held set when add() raised were
        # dropped from vLLM's waiting queue and never scheduled.
        llm, engine, sched, _ = _six_requests(_AddFails())
        try:
            finished, steps = [], 0
            while engine.has_unfinished_requests() and steps < 100:
                finished += [o.request_id for o in engine.step() if o.finished]
                steps += 1
            assert sorted(finished) == sorted(f"r{i}" for i in range(6))  # none lost
            assert sched.fairsim_policy_errors == 1
        finally:
            del llm
            import gc

            gc.collect()


class TestPolicyFailure:
    """The policy raises every step: each request is still served exactly once, in FCFS order."""

    def test_serves_everything_in_vllm_order(self):
        llm, engine, sched, ids = _six_requests(_Broken())
        try:
            finished = []
            first = {}
            step = 0
            while engine.has_unfinished_requests():
                finished += [o.request_id for o in engine.step() if o.finished]
                for rid, _, _ in sched.fairsim_last_batch:
                    first.setdefault(rid, step)
                step += 1
            assert sorted(finished) == sorted(f"r{i}" for i in range(6))  # none lost or duplicated
            assert sched.fairsim_policy_errors > 0
            # vLLM's FCFS order kept: first-scheduled steps never decrease with arrival.
            steps = [first[i] for i in ids]
            assert steps == sorted(steps)
        finally:
            del llm
            import gc

            gc.collect()  # tear this engine down before the next test builds one


class _BadOrder:
    """FCFS whose order() breaks the permutation (as in tests/test_policy_contract.py) and which
    records on_admitted calls."""

    def __init__(self, how: str) -> None:
        self.name = f"bad-{how}"
        self.how = how
        self.orders: list[tuple[float, list]] = []
        self.admitted: list[tuple[float, list]] = []

    def order(self, waiting, now):
        self.orders.append((now, list(waiting)))
        out = sorted(waiting, key=lambda q: (q.arrival_time, q.request_id))
        if len(out) >= 2:
            if self.how == "duplicate":
                out[1] = out[0]
            elif self.how == "drop":
                out.pop()
            elif self.how == "add":
                out.append(out[0]._replace(request_id="intruder"))
        return out

    def on_admitted(self, admitted, now):
        self.admitted.append((now, list(admitted)))


class TestContract:
    """The hook checks order() with the simulator's check_permutation: same message, logged, and
    vLLM's order kept; on_admitted gets the snapshots order() was given, at the same now."""

    @pytest.mark.parametrize("how, message", [
        ("duplicate", r"policy 'bad-duplicate': order\(\) must return a permutation of the \d+ "
                      r"waiting requests it was given, got \d+ entries: duplicate 'r\d[^']*'; missing"),
        ("drop", r"policy 'bad-drop': order\(\) must return .* entries: missing 'r\d[^']*'"),
        ("add", r"policy 'bad-add': order\(\) must return .* entries: foreign 'intruder' "
                r"\(not one of the snapshots"),
    ])
    def test_broken_order_logged_with_the_simulator_message(self, how, message):
        import logging
        import re

        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        records: list[logging.LogRecord] = []

        class _Keep(logging.Handler):
            def emit(self, record):
                records.append(record)

        handler = _Keep(level=logging.ERROR)
        hook_logger = logging.getLogger("fairsim.live")
        hook_logger.addHandler(handler)
        # The hook rate-limits identical messages per process (fairsim.live.ops.RateLimitFilter);
        # an earlier case of this test logged the same template, so start this engine afresh.
        from fairsim.live.ops import RateLimitFilter

        for f in [f for f in hook_logger.filters if isinstance(f, RateLimitFilter)]:
            hook_logger.removeFilter(f)
        llm = make_llm(LiveConfig(policy="fcfs", kv_blocks=64, max_num_seqs=4, budget_tokens=512))
        try:
            engine = llm.llm_engine
            sched = live_scheduler(llm)
            policy = sched.fairsim_policy = _BadOrder(how)
            sched._fairsim_on_admitted = policy.on_admitted
            params = SamplingParams(max_tokens=1, detokenize=False)
            ids = [engine.add_request(f"r{i}", TokensPrompt(prompt_token_ids=block_tokens(f"r{i}", 300)),
                                      params, arrival_time=float(i)) for i in range(6)]
            finished = []
            while engine.has_unfinished_requests():
                finished += [o.request_id for o in engine.step() if o.finished]
            assert sorted(finished) == sorted(f"r{i}" for i in range(6))  # none lost or duplicated
            assert sched.fairsim_policy_errors > 0
            texts = [r.getMessage() for r in records]
            assert any(re.search(message, t) for t in texts), texts
            assert not any(r.exc_info for r in records)  # the message, no traceback
            # on_admitted: the very snapshots given to order() in the same step, same now.
            assert sorted(q.request_id for _, adm in policy.admitted for q in adm) == sorted(ids)
            for now, adm in policy.admitted:
                given = {id(q) for t, snaps in policy.orders if t == now for q in snaps}
                assert {id(q) for q in adm} <= given
        finally:
            logging.getLogger("fairsim.live").removeHandler(handler)
            del llm
            import gc

            gc.collect()


class TestRefusal:
    """Policies whose behaviour needs more than an order are refused with a clear message."""

    def test_skips_misfits_refused(self, monkeypatch):
        monkeypatch.setitem(registry.POLICIES, "skipper", lambda profile, **p: _Skipper())
        with pytest.raises(ValueError, match="skips_misfits=True: it changes more than the queue order"):
            build_policy({"policy": "skipper"})

    def test_eviction_hook_named_by_its_class(self):
        with pytest.raises(ValueError, match=r"'peek' has eviction_hook=ProtectWaitingHits: it changes"):
            build_policy({"policy": "peek"})

    def test_hook_policies_are_the_registered_ones_it_accepts(self):
        from fairsim.live.settings import hook_policies

        names = hook_policies()
        # Every registered policy but the generic k-LPM entry (klpm4's twin) and the two refused.
        assert names == [n for n in registry.policy_names() if n not in ("klpm", "peek", "preble")]
        assert "fairway-deadline" in names and "dlpm" in names

    def test_order_only_policies_accepted(self):
        for name in ("fcfs", "lpm", "fairway", "drr", "vtc", "dlpm", "fairway-carry", "fairway-plus", "fairway-patience"):
            assert build_policy({"policy": name}).name == name

    def test_settings(self):
        assert read_settings({"fairsim": {"policy": "lpm"}}) == {"policy": "lpm"}
        with pytest.raises(ValueError, match="unknown fairsim settings"):
            read_settings({"fairsim": {"polcy": "lpm"}})


def _serve_misses_and_hits(engine, after_step=lambda: None) -> list[str]:
    """Add eight requests (misses of 300 tokens and hits on a shared 256-token document, 1 s
    apart) and step ``engine`` until all finish, calling ``after_step()`` after each step; the
    finished request ids."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(max_tokens=1, detokenize=False)
    doc = block_tokens("doc", 256)
    for i in range(8):
        toks = block_tokens(f"m{i}", 300) if i % 2 else doc + block_tokens(f"q{i}", 40)
        engine.add_request(f"r{i}", TokensPrompt(prompt_token_ids=toks), params, arrival_time=float(i))
    finished = []
    while engine.has_unfinished_requests():
        finished += [o.request_id for o in engine.step() if o.finished]
        after_step()
    return finished


def test_fairway_deadline_orders_live():
    """fairway-deadline only orders (no admission feedback): in a real engine it serves every
    request once, never fails, and fixes one deadline per request at its first sight."""
    llm = make_llm(LiveConfig(policy="fairway-deadline", kv_blocks=64, max_num_seqs=4, budget_tokens=512))
    try:
        engine = llm.llm_engine
        sched = live_scheduler(llm)
        policy = sched.fairsim_policy
        assert policy.name == "fairway-deadline"
        assert sched._fairsim_inc is not None  # the hook reads its fast path (deadline_fast.py)
        first: dict[str, float] = {}

        def check_deadlines():
            for rid, d in policy.deadline.items():
                assert first.setdefault(rid, d) == d  # fixed at first sight

        finished = _serve_misses_and_hits(engine, check_deadlines)
        assert sorted(finished) == sorted(f"r{i}" for i in range(8))
        assert sched.fairsim_policy_errors == 0
        assert sorted(r.split("-")[0] for r in first) == sorted(f"r{i}" for i in range(8))
        assert policy.horizon_s > 0
    finally:
        del llm
        import gc

        gc.collect()


@pytest.mark.parametrize("name", ["drr", "vtc", "dlpm", "fairway-carry", "fairway-plus", "fairway-patience"])
def test_credit_policies_order_live(name):
    """The credit-carrying policies only order: in a real engine they serve every request once,
    never fail, and get their admission feedback (``on_admitted``) every step that admits."""
    llm = make_llm(LiveConfig(policy=name, kv_blocks=64, max_num_seqs=4, budget_tokens=512))
    try:
        engine = llm.llm_engine
        sched = live_scheduler(llm)
        assert sched.fairsim_policy.name == name
        calls = []
        inner = sched._fairsim_on_admitted
        sched._fairsim_on_admitted = lambda admitted, now: (calls.append([a.request_id for a in admitted]),
                                                           inner(admitted, now))
        finished = _serve_misses_and_hits(engine)
        assert sorted(finished) == sorted(f"r{i}" for i in range(8))
        assert sched.fairsim_policy_errors == 0
        # vLLM appends a suffix to each request id
        assert sorted(r.split("-")[0] for c in calls for r in c) == sorted(f"r{i}" for i in range(8))
        if name == "vtc":  # no tenant in vLLM: each request its own client, charged its c > 0
            assert len(sched.fairsim_policy.counter) == 8
            assert all(v >= 1 for v in sched.fairsim_policy.counter.values())
    finally:
        del llm
        import gc

        gc.collect()


def test_hits_equal_vllm_lookup():
    """Every step of an engine that evicts: the hit the hook gives each waiting request (cached
    by ``HitCache``, found by ``HitCache.lookup``) equals vLLM's own lookup at that moment
    (``coordinator.find_longest_cache_hit``, what ``get_computed_blocks`` uses)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    llm = make_llm(LiveConfig(policy="klpm", kv_blocks=10, max_num_seqs=2, budget_tokens=512,
                              max_model_len=1024))
    try:
        engine = llm.llm_engine
        sched = live_scheduler(llm)
        assert sched.fairsim_hits.enabled
        coordinator = sched.kv_cache_manager.coordinator
        params = SamplingParams(max_tokens=1, detokenize=False)
        docs = [block_tokens(f"doc{j}", 128 * (1 + j % 3)) for j in range(7)]
        for i in range(40):
            tail = block_tokens(f"t{i}", 10 + 37 * (i % 5))
            engine.add_request(f"h{i}", TokensPrompt(prompt_token_ids=docs[i % 7] + tail), params,
                               arrival_time=float(i))
        inner = sched.fairsim_reorder
        compared = []
        last: dict[str, int] = {}
        lowered = 0  # a waiting request's hit went down: its blocks were evicted

        def reorder():
            nonlocal lowered
            out = inner()
            for q in sched._fairsim_snapshots.values():
                r = q.handle
                vllm_h = coordinator.find_longest_cache_hit(r.block_hashes, r.num_tokens - 1)[1]
                assert q.cached_len == vllm_h == sched.fairsim_hits.lookup(r), r.request_id
                compared.append(vllm_h)
                lowered += vllm_h < last.get(r.request_id, 0)
                last[r.request_id] = vllm_h
            return out

        sched.fairsim_reorder = reorder
        while engine.has_unfinished_requests():
            engine.step()
        # Hits of every size were compared, the cache evicted (a doc's blocks came and went).
        assert len(compared) > 100 and {0, 128, 256} <= set(compared) and lowered > 0
        assert sched.fairsim_hits.lookups < len(compared)
    finally:
        del llm
        import gc

        gc.collect()


def test_lookup_right_after_reset_prefix_cache():
    """Between ``reset_prefix_cache`` (vLLM puts a new hash map in place) and the hook's next
    refresh, the hit is read from the new map: 0, as vLLM's lookup says, not the old 256."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    llm = make_llm(LiveConfig(policy="lpm", kv_blocks=40, max_num_seqs=2, budget_tokens=512,
                              max_model_len=1024))
    try:
        engine = llm.llm_engine
        sched = live_scheduler(llm)
        params = SamplingParams(max_tokens=1, detokenize=False)
        prompt = block_tokens("doc", 256) + block_tokens("tail", 20)
        llm.generate([TokensPrompt(prompt_token_ids=prompt)], params, use_tqdm=False)
        engine.add_request("before", TokensPrompt(prompt_token_ids=prompt), params, arrival_time=1.0)
        r = next(v for k, v in sched.requests.items() if k.startswith("before"))
        assert sched.fairsim_cached_tokens(r) == 256  # both doc blocks cached
        engine.abort_request([r.request_id], internal=True)
        assert engine.reset_prefix_cache()
        engine.add_request("again", TokensPrompt(prompt_token_ids=prompt), params, arrival_time=2.0)
        r = next(v for k, v in sched.requests.items() if k.startswith("again"))
        coordinator = sched.kv_cache_manager.coordinator
        assert coordinator.find_longest_cache_hit(r.block_hashes, r.num_tokens - 1)[1] == 0
        assert sched.fairsim_hits.lookup(r) == 0 and sched.fairsim_cached_tokens(r) == 0
        while engine.has_unfinished_requests():
            engine.step()
    finally:
        del llm
        import gc

        gc.collect()


def test_hook_overhead_stops_at_a_swallowed_ctrl_c():
    """A SIGINT that a finaliser swallowed only sets ``fairsim.interrupt.REQUESTED``: the next
    engine step stops the measurement, after the rows already handed over."""
    from fairsim import interrupt
    from fairsim.live.overhead import measure_overhead

    seen = []

    def row_then_ctrl_c(row):
        seen.append(row["policy"])
        interrupt.REQUESTED = True

    try:
        with pytest.raises(KeyboardInterrupt):
            measure_overhead(["fcfs", "lpm"], [8], repeats=1, steps=2, on_row=row_then_ctrl_c)
    finally:
        interrupt.REQUESTED = False
    assert seen == ["fcfs"]


def test_hook_overhead_of_a_failing_policy_exits_1(capsys, tmp_path, monkeypatch):
    """A policy whose ``order()`` always raises: the hook keeps vLLM's order, and hook-overhead
    prints the row but says it times that fallback, exit 1 (a policy's error)."""
    from fairsim.cli import main

    (tmp_path / "failpol.py").write_text(
        "from fairsim.policies.fcfs import FCFS\n"
        "class Always(FCFS):\n"
        "    name = 'always'\n"
        "    def order(self, waiting, now):\n"
        "        raise RuntimeError('always')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        code = main(["hook-overhead", "--policies", "failpol:Always", "--sizes", "8", "--steps", "2"])
    finally:
        sys.modules.pop("failpol", None)  # not left for other tests
    out, err = capsys.readouterr()
    assert code == 1
    assert out.splitlines()[1].startswith("failpol:Always")  # the row is printed
    assert ("fairsim: hook-overhead: a policy failed in the hook, which kept vLLM's order, so its row "
            "times that fallback, not the policy: failpol:Always in ") in err


def test_hook_overhead_rows():
    """``fairsim hook-overhead``'s measurement on a real engine: every column present, the
    p90 not below the median, steps that admitted and looked up hits (LPM reads hits)."""
    from fairsim.live.overhead import measure_overhead

    seen = []
    (row,) = measure_overhead(["lpm"], [24], repeats=2, steps=6, on_row=seen.append)
    assert seen == [row]  # handed over as soon as measured (the command prints it then)
    assert row["policy_errors"] == 0
    assert row["policy"] == "lpm" and row["waiting"] == 24
    assert 0 < row["changed_s"] <= row["changed_p90_s"] < row["step_s"] * 10
    assert row["admitted_per_step"] > 0 and row["arrived_per_step"] > 0
    assert row["lookups_per_step"] > 0 and row["reorder_cold_s"] > 0
