"""Policy registry: build a policy by its registered name.

A plain dict of factories (vLLM ``create_request_queue`` style); nothing registers itself at import
time. Each factory takes the cost-model profile (policies that need ``T_idle`` read it) and the
policy's keyword parameters.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from importlib import import_module
from typing import Any

from fairsim.policies.base import Policy, param_text
from fairsim.policies.user import is_user_spec, make_user_policy

#: The module (in ``fairsim.policies``) of each policy class the registry builds. A class is
#: imported when a policy that uses it is first built, not at start-up: a run builds one or a few
#: policies, and importing (compiling) every policy module was a measurable part of every
#: ``fairsim run``'s start. ``fairsim.policies`` gives the classes by name the same way.
CLASS_MODULES: dict[str, str] = {
    "LPMAging": "aging", "ShortestUncachedFirst": "aging", "SJFAging": "aging", "DLPM": "dlpm",
    "DRR": "drr", "DRRDynamo": "drr_dynamo", "Fairway": "fairway", "FairwayCarry": "fairway_carry",
    "FairwayDeadline": "fairway_deadline", "FairwayPatience": "fairway_patience", "FCFS": "fcfs",
    "KLPM": "klpm", "LPM": "lpm", "PEEK": "peek", "Preble": "preble", "RAGCache": "ragcache",
    "HRRN": "sglang", "LOF": "sglang", "DFSWeight": "sglang", "ShortestPrefillFirst": "sglang",
    "VTC": "vtc",
}


def policy_class(name: str) -> type:
    """The policy class called ``name`` (a key of ``CLASS_MODULES``), importing its module."""
    return getattr(import_module(f"fairsim.policies.{CLASS_MODULES[name]}"), name)


def _needs_profile(name: str, profile: Any) -> Any:
    if profile is None:
        raise ValueError(f"policy {name!r} needs a cost-model profile (for T_idle); pass profile=")
    return profile


def _check_fixed(name: str, generic: str, fixed: dict[str, Any], params: dict[str, Any]) -> None:
    """A named variant's defining parameters cannot be overridden (the name would then lie)."""
    clash = sorted(set(fixed) & set(params))
    if clash:
        given = ", ".join(f"{k}={param_text(params[k])}" for k in clash)
        if all(type(params[k]) is type(fixed[k]) and params[k] == fixed[k] for k in clash):
            raise ValueError(f"policy {name!r} fixes {given} already; leave out "
                             f"{', '.join(f'--param {k}' for k in clash)}")
        raise ValueError(f"policy {name!r} fixes {', '.join(f'{k}={param_text(fixed[k])}' for k in clash)}; "
                         f"to run {given}, use policy {generic!r} with --param")


def _fairway(name: str, cls: str = "Fairway", generic: str = "fairway",
             **defaults: Any) -> Callable[..., Policy]:
    def build(profile: Any, **params: Any) -> Policy:
        _check_fixed(name, generic, defaults, params)
        policy = policy_class(cls)(_needs_profile(name, profile).idle_prefill_time, **{**defaults, **params})
        policy.name = name
        return policy

    return build


def _no_params(cls_name: str) -> Callable[..., Policy]:
    def build(profile: Any, **params: Any) -> Policy:
        cls = policy_class(cls_name)
        if params:
            raise ValueError(f"policy {cls.name!r} takes no parameters, got {sorted(params)}")
        return cls()

    return build


def _named(name: str, build: Callable[..., Policy]) -> Callable[..., Policy]:
    """Wrap ``build(profile, **params)`` so the instance carries its registered ``name``."""
    def factory(profile: Any, **params: Any) -> Policy:
        policy = build(profile, **params)
        policy.name = name
        return policy

    return factory


def _klpm(name: str, **defaults: Any) -> Callable[..., Policy]:
    def build(profile: Any, **params: Any) -> Policy:
        _check_fixed(name, "klpm", defaults, params)
        return policy_class("KLPM")(**{**defaults, **params})

    return _named(name, build)


def _plain(cls_name: str) -> Callable[..., Policy]:
    """A factory passing the parameters to the class as they are."""
    return lambda profile, **params: policy_class(cls_name)(**params)


def _lpm_sglang(profile: Any, **params: Any) -> Policy:
    fixed = {"sglang_sort_limit": True, "sglang_dedup": True}
    _check_fixed("lpm-sglang", "lpm", fixed, params)
    return policy_class("LPM")(**fixed, **params)


def _ragcache(profile: Any, **params: Any) -> Policy:
    cls = policy_class("RAGCache")
    if params.get("pgdsf"):
        return cls(_needs_profile("ragcache", profile).prefill_time, **params)
    return cls(**params)


def _peek(profile: Any, **params: Any) -> Policy:
    profile = _needs_profile("peek", profile)
    # T_idle(L) for PEEK's saving comes from the same step model as T(c | h) (= T(L | 0)), not
    # from the measured/interpolated table: otherwise the table's interpolation error gives cold
    # requests a length-dependent "saving" and orders them by it instead of by arrival.
    # PrefillTimes: the profile's prefill_time, same floats, O(1) per call (PEEK asks it per snapshot).
    from fairsim.costmodel import PrefillTimes

    prefill_time = PrefillTimes(profile).prefill_time
    return policy_class("PEEK")(prefill_time, prefill_time, **params)


POLICIES: dict[str, Callable[..., Policy]] = {
    "fcfs": _no_params("FCFS"),
    "lpm": _named("lpm", _plain("LPM")),
    "klpm": _klpm("klpm"),
    "klpm4": _klpm("klpm4", k=4),
    "klpm8": _klpm("klpm8", k=8),
    "ragcache": _named("ragcache", _ragcache),
    "preble": _no_params("Preble"),
    "peek": _named("peek", _peek),
    "fairway": _fairway("fairway"),
    "fairway-abswait": _fairway("fairway-abswait", wait_mode="absolute"),
    "fairway-nofair": _fairway("fairway-nofair", fair_lane=False),
    "fairway-carry": _fairway("fairway-carry", "FairwayCarry", "fairway-carry"),
    "fairway-plus": _fairway("fairway-plus", "FairwayCarry", "fairway-carry", fast_first=True),
    "fairway-patience": _fairway("fairway-patience", "FairwayPatience", "fairway-patience"),
    "fairway-deadline": _fairway("fairway-deadline", "FairwayDeadline", "fairway-deadline"),
    "drr": _named("drr", _plain("DRR")),
    "drr-dynamo": _named("drr-dynamo", _plain("DRRDynamo")),
    "vtc": _named("vtc", _plain("VTC")),
    "dlpm": _named("dlpm", _plain("DLPM")),
    # Orderings the serving engines ship (fairsim/policies/aging.py; docs/policies.md).
    "suf": _named("suf", _plain("ShortestUncachedFirst")),
    "lpm-aging": _named("lpm-aging", _plain("LPMAging")),
    "sjf-aging": _named("sjf-aging", _plain("SJFAging")),
    # SGLang's orderings (fairsim/policies/sglang.py; docs/policies.md "SGLang's orderings").
    "lpm-sglang": _named("lpm-sglang", _lpm_sglang),
    "hrrn": _named("hrrn", _plain("HRRN")),
    "shortest-prefill-first": _named("shortest-prefill-first",
                                     _plain("ShortestPrefillFirst")),
    "dfs-weight": _no_params("DFSWeight"),
    "lof": _no_params("LOF"),
}


# Generic entries kept for custom parameters but left out of "all" (klpm = klpm4 by default).
GENERIC = frozenset({"klpm"})


def policy_names(include_generic: bool = True) -> list[str]:
    """Registered policy names, in registry order.

    Args:
        include_generic: False leaves out generic entries that duplicate a named variant with
            default parameters (``klpm``, same as ``klpm4``); ``compare --policies all`` uses False.
    """
    return [n for n in POLICIES if include_generic or n not in GENERIC]


def make_policy(name: str, profile: Any = None, /, **params: Any) -> Policy:
    """Build a fresh policy instance by registered name.

    Args:
        name: A registered name (see ``policy_names()``), or ``package.module:Class`` for a
            user's own policy class (``fairsim.policies.user``).
        profile: A ``fairsim.costmodel.Profile``; required by policies that use ``T_idle``.
        **params: Policy keyword parameters (e.g. ``fast_weight=8`` for Fairway).

    Returns:
        A new policy object (policies with state never share it between runs).

    Raises:
        ValueError: Unknown name (the message lists the known names), a missing profile, or a
            parameter the policy rejects.
    """
    if "profile" in params:  # positional-only above, so a --param profile=... lands here
        raise ValueError(f"policy {name!r}: 'profile' comes from --profile, not from --param")
    if is_user_spec(name):  # a team's own class, package.module:Class (fairsim/policies/user.py)
        return make_user_policy(name, profile, **params)
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known policies: {', '.join(POLICIES)}, or "
                         f"package.module:Class for your own class") from None
    try:
        return factory(profile, **params)
    except OverflowError:  # a whole number beyond the float range (JSON reads 1 and 400 zeros as one)
        huge = [k for k, v in params.items() if _beyond_float(v)]
        if not huge:
            raise
        raise ValueError(f"--param {huge[0]}={param_text(params[huge[0]])}: beyond the float range "
                         f"(±{sys.float_info.max:.3g}) in which policy {name!r} reads it") from None
    except TypeError as exc:  # unknown keyword parameter
        accepted = accepted_params(name)
        raise ValueError(
            f"policy {name!r}: bad parameters {params}; accepted: {', '.join(accepted) or 'none'}"
        ) from exc


def _beyond_float(value: Any) -> bool:
    """``value`` is a whole number (not a bool) too large for a float: the shipped policies'
    range checks convert it and raise ``OverflowError``."""
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) > sys.float_info.max


class _ClassByName(Mapping):
    """Policy name -> its class, the class's module imported on first access (``policy_class``)."""

    def __init__(self, names: dict[str, str]) -> None:
        self._names = names

    def __getitem__(self, name: str) -> type:
        return policy_class(self._names[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


# The class behind each name, for listing accepted parameters in error messages.
_CLASSES: Mapping[str, type] = _ClassByName({
    "fcfs": "FCFS", "lpm": "LPM", "klpm": "KLPM", "klpm4": "KLPM", "klpm8": "KLPM", "ragcache": "RAGCache",
    "preble": "Preble", "peek": "PEEK", "fairway": "Fairway", "fairway-abswait": "Fairway",
    "fairway-nofair": "Fairway", "fairway-carry": "FairwayCarry", "fairway-plus": "FairwayCarry",
    "fairway-patience": "FairwayPatience", "fairway-deadline": "FairwayDeadline",
    "drr": "DRR", "drr-dynamo": "DRRDynamo", "vtc": "VTC", "dlpm": "DLPM",
    "suf": "ShortestUncachedFirst", "lpm-aging": "LPMAging", "sjf-aging": "SJFAging",
    "lpm-sglang": "LPM", "hrrn": "HRRN", "shortest-prefill-first": "ShortestPrefillFirst",
    "dfs-weight": "DFSWeight", "lof": "LOF",
})
_FROM_PROFILE = {"idle_prefill_time", "prefill_time"}  # supplied by the registry, not the user


def accepted_params(name: str) -> list[str]:
    """Keyword parameters a user may pass to policy ``name`` (empty if none or unknown)."""
    if name not in _CLASSES:
        return []
    import inspect  # (not at import: ``inspect`` costs a run's start-up about 4 %; record.py)

    cls = _CLASSES[name]
    out: list[str] = []
    for klass in cls.__mro__:  # a subclass passing **kwargs on (FairwayCarry) accepts its base's
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        sig = inspect.signature(init)
        out += [p for p in sig.parameters if p not in ("self", *_FROM_PROFILE, *out)
                and sig.parameters[p].kind in (inspect.Parameter.KEYWORD_ONLY,
                                               inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
            break
    return out

