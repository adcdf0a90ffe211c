"""Routers of a fleet of engines (``--instances N``): which instance serves each request.

``fairsim.routers.base`` holds the contract and what a router sees; ``registry`` the names.
"""

from fairsim.routers.base import InstanceView, Router, RouteRequest
from fairsim.routers.registry import DEFAULT_ROUTER, ROUTERS, make_router, missing_input

__all__ = ["DEFAULT_ROUTER", "InstanceView", "ROUTERS", "RouteRequest", "Router", "make_router", "missing_input"]
