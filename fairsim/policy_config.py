"""A policy and its parameters as a file (``--policy-config FILE``), as ``fairsim tune`` writes it.

The file is the JSON object ``{"policy": NAME, "params": {KEY: VALUE, ...}}``: exactly the
``policy`` and ``params`` settings of the live hook (``fairsim.live.settings``), so the same
file serves ``fairsim run``, ``compare`` and ``accept`` (``--policy-config FILE``) and vLLM
(``additional_config={"fairsim": <the file's object>}``, or the setting ``policy_config: FILE``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

KEYS = ("policy", "params")


class _RepeatedKey(Exception):
    """A key given twice in one JSON object of the file (its name in ``args[0]``)."""


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's dict, refusing a key given twice: ``json`` keeps the last silently, so
    ``{"policy": "fairway", "policy": "lpm"}`` would run LPM with no word said (as profiles do,
    ``fairsim.costmodel``)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _RepeatedKey(key)
        out[key] = value
    return out


def read_policy_config(path: str | Path, option: str = "--policy-config") -> tuple[str, dict[str, Any]]:
    """``(policy name, params)`` from a policy-config file.

    The policy and parameters are checked later by ``make_policy`` (as for ``--policy``/``--param``).

    Raises:
        ValueError: The file cannot be read, is not UTF-8 or not JSON, is not an object with a string
            ``policy`` and an object ``params``, or has another key (naming ``option`` and the file).
    """
    where = f"{option} {path}"
    if not str(path).strip():
        raise ValueError(f"{option} {str(path)!r}: empty path (an unset shell variable?); give the file "
                         "fairsim tune wrote (policy-config.json)")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{where}: cannot read the file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{where}: not UTF-8 text (a binary file?): {exc.reason} at byte {exc.start}; "
                         f"expected the JSON file fairsim tune writes") from None
    try:
        data = json.loads(text, object_pairs_hook=_no_repeated_keys)
    except _RepeatedKey as exc:
        raise ValueError(f"{where}: key {exc.args[0]!r} given twice in one object (JSON keeps the last "
                         f"without a word); give it once") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: line {exc.lineno}: not valid JSON: {exc.msg} (column {exc.colno})") from None
    except ValueError:  # a whole number past Python's int digit limit (4,300 digits)
        raise ValueError(f"{where}: a whole number of more digits than Python reads (at most "
                         f"{sys.get_int_max_str_digits():,})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a JSON object {{\"policy\": NAME, \"params\": {{...}}}}")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; expected {', '.join(KEYS)}")
    policy, params = data.get("policy"), data.get("params", {})
    if not isinstance(policy, str) or not policy:
        raise ValueError(f"{where}: 'policy': need a policy name, got {policy!r}")
    if not isinstance(params, dict):
        raise ValueError(f"{where}: 'params': need an object of KEY: VALUE, got {params!r}")
    return policy, params


def policy_config_text(policy: str, params: dict[str, Any]) -> str:
    """The file's text for ``policy`` with ``params`` (keys sorted, one per line)."""
    return json.dumps({"policy": policy, "params": params}, indent=2, sort_keys=True) + "\n"


def apply_policy_config(args: Any, command: str) -> None:
    """Fold ``args.policy_config`` into the options of ``run``, ``compare`` or ``accept``.

    ``run``/``accept``: the file's policy becomes ``--policy``; ``compare``: it is added to
    ``--policies`` where missing. Its parameters are added as ``POLICY.KEY=VALUE`` ``--param``
    items (scoped, so other compared policies keep their defaults).

    Raises:
        ValueError: As ``read_policy_config``; or a ``--param`` for the same policy and key as the
            file (which one would win is not obvious), or ``--policy`` naming another policy.
    """
    path = getattr(args, "policy_config", None)
    if path is None:
        return
    from fairsim.options import param_scope, parse_params

    policy, params = read_policy_config(path)
    given = parse_params(args.param)
    for key in given:
        scope = param_scope(key)
        if key.rpartition(".")[2] in params and scope in (None, policy):
            raise ValueError(f"--param {key}: --policy-config {path} sets {key.rpartition('.')[2]} of "
                             f"policy {policy!r}; give it in one place")
    if command == "compare":
        # ``all`` leaves out the generic klpm (klpm4's twin) and a class of your own: the file's
        # policy is added to it as to a list, else its parameters would go to a policy not run.
        from fairsim.policies.registry import policy_names

        names = policy_names(include_generic=False) if args.policies == "all" else \
            [s.strip() for s in args.policies.split(",")]
        if policy not in names:
            args.policies = ",".join([*names, policy])
    else:
        if getattr(args, "policy", None) not in (None, policy):
            raise ValueError(f"--policy {args.policy}: --policy-config {path} names policy {policy!r}; "
                             f"give one of them")
        args.policy = policy
    args.param_typed = list(args.param)  # the command line's own (accept's baselines take only these)
    args.param = [*args.param, *(f"{policy}.{k}={json.dumps(v)}" for k, v in params.items())]
    args.config_policy = policy  # so a parameter the policy refuses names the file (check_policies)

