"""Session affinity: every turn of a session goes where its first turn went.

Source: llm-d's session-affinity scorer (gateway-api-inference-extension
``pkg/epp/scheduling/framework/plugins/scorer/session_affinity.go``: a response carries the pod
that served it, and the next request of the session scores that pod 1, the others 0). Ours: a
session's first turn (and a request without a session) goes to the instance with the least
outstanding work (``least_work``), ties to the lowest index. Needs ``session_id`` in the trace.
"""

from __future__ import annotations

from collections.abc import Sequence

from fairsim.routers.base import InstanceView, Router, RouteRequest, lowest


class SessionAffinity(Router):
    name = "session-affinity"
    needs = ("sessions",)
    source = "llm-d session-affinity scorer"

    def __init__(self, num_instances: int, **kw) -> None:
        super().__init__(num_instances, **kw)
        self._home: dict[str, int] = {}

    def choose(self, req: RouteRequest, instances: Sequence[InstanceView], now: float) -> int:
        session = req.request.session_id
        k = self._home.get(session) if session is not None else None
        if k is None:
            k = lowest([inst.outstanding_tokens for inst in instances])
            if session is not None:
                self._home[session] = k
        return k
