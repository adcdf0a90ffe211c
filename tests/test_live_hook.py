"""Hook robustness in a real engine: a failing policy keeps vLLM's order and loses nothing;
policies that need more than an order are refused."""

from __future__ import annotations

import os

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


class TestPolicyFailure:
    """The policy raises every step: each request is still served exactly once, in FCFS order."""

    def test_serves_everything_in_vllm_order(self):
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        llm = make_llm(LiveConfig(policy="fcfs", kv_blocks=64, max_num_seqs=4, budget_tokens=512))
        try:
            engine = llm.llm_engine
            sched = live_scheduler(llm)
            sched.fairsim_policy = _Broken()
            params = SamplingParams(max_tokens=1, detokenize=False)
            ids = [engine.add_request(f"r{i}", TokensPrompt(prompt_token_ids=block_tokens(f"r{i}", 300)),
                                      params, arrival_time=float(i)) for i in range(6)]
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


class TestRefusal:
    """Policies whose behaviour needs more than an order are refused with a clear message."""

    def test_skips_misfits_refused(self, monkeypatch):
        monkeypatch.setitem(registry.POLICIES, "skipper", lambda profile, **p: _Skipper())
        with pytest.raises(ValueError, match="skips_misfits=True: it changes more than the queue order"):
            build_policy({"policy": "skipper"})

    def test_order_only_policies_accepted(self):
        for name in ("fcfs", "lpm", "fairway", "drr", "vtc", "dlpm", "fairway-carry", "fairway-plus"):
            assert build_policy({"policy": name}).name == name

    def test_settings(self):
        assert read_settings({"fairsim": {"policy": "lpm"}}) == {"policy": "lpm"}
        with pytest.raises(ValueError, match="unknown fairsim settings"):
            read_settings({"fairsim": {"polcy": "lpm"}})


@pytest.mark.parametrize("name", ["drr", "vtc", "dlpm", "fairway-carry", "fairway-plus"])
def test_credit_policies_order_live(name):
    """The credit-carrying policies only order: in a real engine they serve every request once,
    never fail, and get their admission feedback (``on_admitted``) every step that admits."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    llm = make_llm(LiveConfig(policy=name, kv_blocks=64, max_num_seqs=4, budget_tokens=512))
    try:
        engine = llm.llm_engine
        sched = live_scheduler(llm)
        assert sched.fairsim_policy.name == name
        calls = []
        inner = sched._fairsim_on_admitted
        sched._fairsim_on_admitted = lambda admitted, now: (calls.append([a.request_id for a in admitted]),
                                                           inner(admitted, now))
        params = SamplingParams(max_tokens=1, detokenize=False)
        doc = block_tokens("doc", 256)
        for i in range(8):  # misses of 300 tokens and hits on a shared 256-token document
            toks = block_tokens(f"m{i}", 300) if i % 2 else doc + block_tokens(f"q{i}", 40)
            engine.add_request(f"r{i}", TokensPrompt(prompt_token_ids=toks), params, arrival_time=float(i))
        finished = []
        while engine.has_unfinished_requests():
            finished += [o.request_id for o in engine.step() if o.finished]
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
