"""``simulate``: one replay of a trace under a policy, on the step-by-step ``Engine`` or, for
colocated runs, its decode fast path ``DecodeFastEngine``. Kept apart from both engine modules
so that the fast path can subclass ``Engine`` (``fairsim.sim.decode_fast`` imports
``fairsim.sim.engine``) while the choice between them imports both from above."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fairsim.costmodel import Profile
from fairsim.gcpause import collect_before_run, paused
from fairsim.policies.base import Policy
from fairsim.sim.config import EngineConfig
from fairsim.sim.engine import Engine
from fairsim.sim.result import SimResult
from fairsim.types import Request


def simulate(
    requests: Sequence[Request],
    policy: Policy,
    profile: Profile,
    config: EngineConfig = EngineConfig(),
    progress: Callable[[int], Any] | None = None,
    *,
    replay: str | None = None,
    think_scale: float = 1.0,
    fast_order: bool = True,
    fast_decode: bool = True,
    fast_chunks: bool = True,
    name: str | None = None,
) -> SimResult:
    """Replay ``requests`` through the engine under ``policy``; see ``Engine``.

    ``name``: what the policy is called in errors and in ``SimResult.policy`` (the CLI passes
    the name the user gave, e.g. ``team.mod:Class``); default its ``name`` attribute, else its
    class name (``fairsim.policies.failure.policy_name``).

    ``fast_decode`` (colocated mode): keep running decodes in aggregate and run pure decode
    steps in a tight loop (``fairsim.sim.decode_fast.DecodeFastEngine``; same tables as the
    step-by-step ``Engine``, which ``fast_decode=False`` runs). ``fast_chunks`` (prefill-only):
    see ``Engine``.

    Raises:
        PolicyError: An exception escaped the policy's ``order()``/``on_admitted()``/
            ``on_prefill_tokens()``, its ``incremental_order()`` or the methods of a fast path or
            an eviction hook of its own (a class outside fairsim) (``fairsim.policies.failure``;
            the original is its ``__cause__``).
        PolicyContractError: The policy broke its contract (``fairsim/policies/base.py``).
    """
    collect_before_run(len(requests))  # (earlier runs' state, in this process)
    cls = Engine
    if fast_decode and config.mode == "colocated":
        from fairsim.sim.decode_fast import DecodeFastEngine as cls
    # Per-request state: long-lived, no garbage cycles; frozen until run() unfreezes at its end
    # (fairsim/gcpause.py).
    engine = None
    try:  # (building the engine too: it calls a policy's eviction hook, bind() and attach())
        with paused(freeze=True):
            engine = cls(requests, policy, profile, config, progress, replay=replay,
                         think_scale=think_scale, fast_order=fast_order, fast_chunks=fast_chunks, name=name)
        return engine.run()
    except (Exception, SystemExit) as exc:  # SystemExit: a policy's sys.exit() is its failure
        from fairsim.policies.failure import policy_failure

        found = policy_failure(exc, policy, name, getattr(engine, "_inc", None))
        if found is None:
            raise
        raise found[0] from found[1]
