"""The table of registered policies (name, parameters with defaults, one-line rule) for the docs.

``python -m fairsim.policies.catalog`` prints it as Markdown. The names come from the registry and
the parameters and defaults from the policy classes' constructors (the same walk as
``accepted_params``), so the table cannot drift from the code; only the one-line rules and the
parameters a named variant fixes are written here, and ``tests/test_docs.py`` checks both against
the registry (a rule for every name, every fixed parameter refused by ``make_policy``) and checks
that README.md and docs/policies.md carry this table unchanged.
"""

from __future__ import annotations

import inspect
from typing import Any

from fairsim.policies.fairway import Fairway
from fairsim.policies.registry import _CLASSES, accepted_params, policy_names

# One line per registered name: what decides the order (full specifications: docs/policies.md).
RULES: dict[str, str] = {
    "fcfs": "Oldest first (vLLM's default); the cache affects cost, never order.",
    "lpm": "Longest cached prefix `h` first (SGLang's `lpm`), ties by arrival; the switches add "
           "SGLang's no-resort above 128 waiting and its in-batch de-duplication.",
    "klpm": "Every k-th admitted request is the oldest, the others longest prefix first (Dexter "
            "et al., NeurIPS 2025); k = 1 is FCFS.",
    "klpm4": "`klpm` with k = 4.",
    "klpm8": "`klpm` with k = 8.",
    "ragcache": "Highest reuse ratio `h / c` first (RAGCache, Jin et al.); `pgdsf=true` also "
                "evicts by PGDSF priority (simulator only).",
    "preble": "Preble's single-GPU heuristic: ten hit-ratio groups served in turn from the top, "
              "at most (g + 1) x 10 per step, misfits skipped (simulator only).",
    "peek": "Most prefill time saved by the cache (`T_idle(L)` minus the time of `c` tokens on "
            "`h` cached) first; `protect=true` evicts last "
            "the blocks the head of the queue would hit (simulator only).",
    "fairway": "Fast lane by `h / c + wait / SLO`, Fair lane by arrival, merged by weighted work "
               "charges: at most `fair_weight / fast_weight` x the oldest request's work (+ one "
               "request) goes ahead of it in a step.",
    "fairway-abswait": "Fairway with `SLO = slo_floor` for every request (wait in seconds).",
    "fairway-nofair": "Fairway's Fast lane alone.",
    "fairway-carry": "Fairway whose protection of the oldest request persists across steps: the "
                     "work admitted ahead of it accumulates until it is admitted.",
    "fairway-plus": "`fairway-carry` for persistent overload: the Fast ledger is not pre-charged, "
                    "so the head of a long queue alternates between the lanes.",
    "fairway-patience": "Fairway's order until the oldest request has waited past its SLO, then "
                        "`fairway-carry`'s carried charge.",
    "fairway-deadline": "`fairway-plus`'s merge until a request is due for the deadline set once "
                        "from the backlog's FCFS drain estimate; due requests go first, in "
                        "deadline order.",
    "drr": "Deficit round robin over clients in uncached tokens (Shreedhar & Varghese; charged "
           "at order time): a visit adds a quantum, a request goes when its charge fits.",
    "drr-dynamo": "The deficit round robin of Dynamo's router queue (`policy_queue.rs`): cost fixed "
                  "when first seen, fixed class order, earlier credit spent before a new quantum.",
    "vtc": "Virtual Token Counter (Sheng et al., OSDI'24): the backlogged client with the fewest "
           "tokens served goes first; a client emptied by admissions is lifted when it returns.",
    "dlpm": "Deficit LPM (Cao et al.): LPM order among clients with credit; all refilled by a "
            "quantum when none has any; an emptied client's deficit resets to 0.",
    "suf": "Fewest uncached tokens `c` first (TensorRT-LLM's `shortest_uncached_first`); a request "
           "that waited `starvation_iterations` admitting passes goes to the front.",
    "lpm-aging": "LPM by `h + N x passes waited` (SGLang's `--lpm-aging-tokens-per-pass N`).",
    "sjf-aging": "Fewest uncached tokens `c - a x wait` first (SGLang's `sjf`, "
                 "`--sjf-aging-tokens-per-s a`).",
    "lpm-sglang": "`lpm` as SGLang runs it: no re-sort above 128 waiting, in-batch "
                  "de-prioritisation of requests sharing an uncached prefix.",
    "hrrn": "SGLang's highest response ratio next: most prefill tokens the engine computed "
            "while the request waited, per uncached token, first; SGLang's de-prioritisation and "
            "no re-sort above 128 waiting.",
    "shortest-prefill-first": "SGLang's: fewest uncached tokens `c` first, requests sharing an "
                              "uncached prefix with an earlier one de-prioritised.",
    "dfs-weight": "SGLang's: depth-first walk of the waiting requests' cached-prefix tree, "
                  "heaviest subtree first, a node's own requests after its subtrees.",
    "lof": "SGLang's longest output first: largest requested output (the trace's output "
           "length; vLLM's `max_tokens` live) first.",
}

# Parameters a named variant fixes (``registry._check_fixed`` refuses to override them).
FIXED: dict[str, dict[str, Any]] = {
    "klpm4": {"k": 4},
    "klpm8": {"k": 8},
    "fairway-abswait": {"wait_mode": "absolute"},
    "fairway-nofair": {"fair_lane": False},
    "fairway-plus": {"fast_first": True},
    "lpm-sglang": {"sglang_sort_limit": True, "sglang_dedup": True},
}

# What a default of None means, where the constructor computes the value.
NONE_MEANS: dict[str, str] = {
    "wait_cap": "none (no cap)",
    "starvation_iterations": "none (no guard)",
    "slack": "1 + fair_weight / fast_weight",
}


def param_defaults(name: str) -> dict[str, Any]:
    """Each accepted parameter of policy ``name`` with its constructor default, in ``accepted_params`` order."""
    defaults: dict[str, Any] = {}
    for klass in _CLASSES[name].__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        for p in inspect.signature(init).parameters.values():
            if p.default is not inspect.Parameter.empty:
                defaults.setdefault(p.name, p.default)
    return {p: defaults[p] for p in accepted_params(name)}


def _show(key: str, value: Any) -> str:
    if value is None:
        return f"`{key}` = {NONE_MEANS[key]}"
    return f"`{key}={str(value).lower() if isinstance(value, bool) else value}`"


def _params_cell(name: str) -> str:
    params = param_defaults(name)
    fixed = FIXED.get(name, {})
    shown = [_show(k, v) for k, v in params.items() if k not in fixed]
    if issubclass(_CLASSES[name], Fairway) and name != "fairway":
        own = [_show(k, v) for k, v in params.items()
               if k not in fixed and k not in param_defaults("fairway")]
        shown = ["Fairway's"] + own
    fixes = [f"fixes {_show(k, v)}" for k, v in fixed.items()]
    return ", ".join(shown + fixes) or "none"


def markdown_table() -> str:
    """Every registered policy as a Markdown table: name, parameters (defaults), rule."""
    lines = ["| policy | parameters (defaults) | rule |", "|---|---|---|"]
    for name in policy_names():
        lines.append(f"| `{name}` | {_params_cell(name)} | {RULES[name]} |")
    return "\n".join(lines) + "\n"


def search_space(name: str) -> tuple[dict[str, Any], str | None]:
    """The parameters ``fairsim tune`` searches for policy ``name``, from the ``search_space`` its
    class declares (``fairsim.policies.space``), without those the name fixes; and a note when the
    class declares none (then nothing is searched).

    Raises:
        ValueError: An unknown policy, or a declaration naming a parameter the policy does not
            accept or an empty range.
    """
    from fairsim.policies.registry import POLICIES, _CLASSES, accepted_params
    from fairsim.policies.space import space_of
    from fairsim.policies.user import is_user_spec, load_user_class, user_params

    if is_user_spec(name):
        cls = load_user_class(name)
        return space_of(name, cls, user_params(cls), {})
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; known policies: {', '.join(POLICIES)}, or "
                         f"package.module:Class for your own class")
    return space_of(name, _CLASSES[name], accepted_params(name), FIXED.get(name, {}))


if __name__ == "__main__":
    print(markdown_table(), end="")
