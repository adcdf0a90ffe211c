"""The live hook's settings (vLLM's ``additional_config``) and the policy they name, without vLLM.

Kept apart from ``fairsim.live.scheduler`` (which imports vLLM) so commands can check a policy
name, its parameters and the profile before they start an engine.
"""

from __future__ import annotations

import json
import os
from typing import Any

from fairsim.costmodel import DEFAULT_PROFILE, load_profile
from fairsim.policies import make_policy, policy_names
from fairsim.policies.user import is_user_spec

#: Policy attributes that change more than the order; the hook refuses such policies.
UNSUPPORTED_CAPABILITIES = ("skips_misfits", "admission_limit", "eviction_hook")
#: Key of fairsim's settings inside vLLM's ``additional_config``.
CONFIG_KEY = "fairsim"
#: Keys of fairsim's settings (``record``: a trace file to write, ``fairsim.live.recorder``;
#: ``policy_config``: a file holding ``policy`` and ``params``, ``fairsim.policy_config``).
SETTINGS = ("policy", "params", "profile", "record", "policy_config")


def read_settings(additional_config: Any) -> dict[str, Any]:
    """fairsim's settings from vLLM's ``additional_config``.

    Accepts ``{"fairsim": {...}}`` (preferred) or the same keys at the top level. Keys:
    ``policy`` (registered name, default ``"fcfs"``), ``params`` (dict of policy parameters),
    ``profile`` (shipped profile name or JSON path; default the shipped prior), ``record``
    (a path: write every request to this trace file, ``fairsim.live.recorder``),
    ``policy_config`` (a path: a file of ``fairsim tune``, ``fairsim.policy_config``, whose
    ``policy`` and ``params`` are used; returned in their place).

    Raises:
        ValueError: ``additional_config`` or its ``fairsim`` entry is not a dict, an unknown key,
            ``policy``, ``profile`` or ``policy_config`` not a non-empty string (``profile``: or
            null), ``params`` not a dict, a ``record`` path that cannot be written (named), or
            ``policy_config`` together with ``policy`` or ``params``, or a bad file.
    """
    cfg = additional_config or {}
    if not isinstance(cfg, dict):
        raise ValueError(f"additional_config must be a dict, got {type(cfg).__name__}")
    settings = cfg.get(CONFIG_KEY, cfg)
    if not isinstance(settings, dict):
        raise ValueError(f"additional_config[{CONFIG_KEY!r}] must be a dict, got {settings!r}")
    if CONFIG_KEY not in cfg:
        settings = {k: v for k, v in settings.items() if k in SETTINGS}
    unknown = set(settings) - set(SETTINGS)
    if unknown:
        raise ValueError(f"unknown fairsim settings {sorted(unknown)}; known: {', '.join(SETTINGS)}")
    for key, what in (("policy", "a policy name"), ("policy_config", "a file path"),
                      ("profile", "a shipped profile name or a file path (null: the default)")):
        if key not in settings or (key == "profile" and settings[key] is None):
            continue
        value = settings[key]
        if not (isinstance(value, str) and value or key != "policy" and isinstance(value, os.PathLike)):
            try:  # as the JSON of --additional-config spells it
                shown = json.dumps(value)
            except (TypeError, ValueError):
                shown = repr(value)
            raise ValueError(f"fairsim setting {key!r}: need {what}, got {shown}")
    record = settings.get("record")
    if record is not None and (not isinstance(record, str) or not record):
        raise ValueError(f"fairsim setting 'record': need a file path, got {record!r}")
    if record is not None:
        from fairsim.io import check_writable_file

        check_writable_file(record, "fairsim setting 'record'")  # before the engine starts
    params = settings.get("params")
    if params is not None and not isinstance(params, dict):
        raise ValueError(f"fairsim setting 'params': need an object of policy parameters "
                         f"({{\"name\": value}}), got {params!r}")
    config = settings.get("policy_config")
    if config is not None:
        from fairsim.policy_config import read_policy_config

        both = sorted({"policy", "params"} & set(settings))
        if both:
            raise ValueError(f"fairsim setting 'policy_config' names the policy and its parameters; "
                             f"leave out {', '.join(both)}")
        policy, params = read_policy_config(config, "fairsim setting 'policy_config'")
        settings = {**{k: v for k, v in settings.items() if k != "policy_config"},
                    "policy": policy, "params": params}
    return settings


def build_policy(settings: dict[str, Any]) -> Any:
    """Build the policy named in ``settings`` and refuse one the hook cannot honour.

    Raises:
        ValueError: Unknown policy or parameter, or a policy with a capability in
            ``UNSUPPORTED_CAPABILITIES`` (the message names it).
    """
    name = settings.get("policy", "fcfs")
    params = settings.get("params") or {}
    profile = load_profile(settings.get("profile") or DEFAULT_PROFILE)
    if not is_user_spec(name) and name not in policy_names():
        # The hook's own list: the registry's would name Preble and PEEK, which it refuses.
        raise ValueError(f"unknown policy {name!r}; the vLLM hook accepts: {', '.join(hook_policies())}, "
                         f"or package.module:Class for your own class")
    policy = make_policy(name, profile, **params)
    for attr in UNSUPPORTED_CAPABILITIES:
        value = getattr(policy, attr, None)
        if value is not None and value is not False:
            shown = value if isinstance(value, (bool, int, float)) else type(value).__name__
            raise ValueError(
                f"policy {name!r} has {attr}={shown}: it changes more than the queue order "
                f"(admission or eviction), which the vLLM hook does not implement. Run it in the "
                f"simulator (fairsim run), or choose an order-only policy."
            )
    return policy


def hook_policies() -> list[str]:
    """The registered policies the hook accepts (``build_policy`` with default parameters), in
    registry order, without the generic entries that repeat a named variant (``policy_names``)."""
    names = []
    for name in policy_names(include_generic=False):
        try:
            build_policy({"policy": name})
        except ValueError:
            continue  # changes more than the order (PEEK's eviction hook, Preble's admission)
        names.append(name)
    return names
