"""Policy registry: build a policy by its registered name.

A plain dict of factories (vLLM ``create_request_queue`` style); nothing registers itself at import
time. Each factory takes the cost-model profile (policies that need ``T_idle`` read it) and the
policy's keyword parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fairsim.policies.base import Policy
from fairsim.policies.fairway import Fairway
from fairsim.policies.fcfs import FCFS
from fairsim.policies.lpm import LPM


def _needs_profile(name: str, profile: Any) -> Any:
    if profile is None:
        raise ValueError(f"policy {name!r} needs a cost-model profile (for T_idle); pass profile=")
    return profile


def _fairway(name: str, **defaults: Any) -> Callable[..., Policy]:
    def build(profile: Any, **params: Any) -> Policy:
        policy = Fairway(_needs_profile(name, profile).idle_prefill_time, **{**defaults, **params})
        policy.name = name
        return policy

    return build


def _no_params(cls: type) -> Callable[..., Policy]:
    def build(profile: Any, **params: Any) -> Policy:
        if params:
            raise ValueError(f"policy {cls.name!r} takes no parameters, got {sorted(params)}")
        return cls()

    return build


POLICIES: dict[str, Callable[..., Policy]] = {
    "fcfs": _no_params(FCFS),
    "lpm": _no_params(LPM),
    "fairway": _fairway("fairway"),
    "fairway-abswait": _fairway("fairway-abswait", wait_mode="absolute"),
    "fairway-nofair": _fairway("fairway-nofair", fair_lane=False),
}


def policy_names() -> list[str]:
    """All registered policy names, in registry order."""
    return list(POLICIES)


def make_policy(name: str, profile: Any = None, **params: Any) -> Policy:
    """Build a fresh policy instance by registered name.

    Args:
        name: A registered name (see ``policy_names()``).
        profile: A ``fairsim.costmodel.Profile``; required by policies that use ``T_idle``.
        **params: Policy keyword parameters (e.g. ``fast_weight=8`` for Fairway).

    Returns:
        A new policy object (policies with state never share it between runs).

    Raises:
        ValueError: Unknown name (the message lists the known names), a missing profile, or a
            parameter the policy rejects.
    """
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known policies: {', '.join(POLICIES)}") from None
    try:
        return factory(profile, **params)
    except TypeError as exc:  # unknown keyword parameter
        raise ValueError(f"policy {name!r}: bad parameters {params}: {exc}") from exc
