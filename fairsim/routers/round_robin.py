"""Round robin: the i-th request released goes to instance ``i mod N``.

Source: the round-robin mode of Dynamo (``--router-mode round-robin``) and SGLang's router
(``--policy round_robin``). Sees no state.
"""

from __future__ import annotations

from collections.abc import Sequence

from fairsim.routers.base import InstanceView, Router, RouteRequest


class RoundRobin(Router):
    name = "round-robin"
    source = "Dynamo --router-mode round-robin; SGLang router --policy round_robin"

    def __init__(self, num_instances: int, **kw) -> None:
        super().__init__(num_instances, **kw)
        self._next = 0

    def choose(self, req: RouteRequest, instances: Sequence[InstanceView], now: float) -> int:
        k = self._next
        self._next = (k + 1) % self.num_instances
        return k
