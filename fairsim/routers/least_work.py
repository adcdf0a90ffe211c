"""Least outstanding work: the instance with the fewest uncached prompt tokens waiting or running.

Outstanding work of an instance = the prompt tokens of the requests routed to it and not finished,
less the prefix each had cached there when routed (``InstanceView.outstanding_tokens``). Ours:
counted when routed and dropped when the request finishes (a router's own bookkeeping, as
SGLang's and Dynamo's load counters are), not as chunks are computed. Ties: the lowest index.
Source of the idea: least-load routing (SGLang's shortest-queue fallback, llm-d's queue scorer),
here counted in tokens, as the issue specifies.
"""

from __future__ import annotations

from collections.abc import Sequence

from fairsim.routers.base import InstanceView, Router, RouteRequest, lowest


class LeastWork(Router):
    name = "least-work"
    view = "exact"  # only to count a routed request's uncached tokens
    source = "least outstanding work (uncached tokens), cf. SGLang's shortest-queue fallback"

    def choose(self, req: RouteRequest, instances: Sequence[InstanceView], now: float) -> int:
        return lowest([inst.outstanding_tokens for inst in instances])
