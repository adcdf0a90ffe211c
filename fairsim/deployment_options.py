"""The options that choose a deployment other than one engine: a fleet (``--instances``,
``--router``, ``--router-param``) and ``--mode disaggregated``'s.

Kept apart from ``fairsim.cli_fleet`` and ``fairsim.cli_disagg``, which hold what runs such a
deployment: every command's parser adds these options, and a run on one engine
(``one_engine``) imports neither module (start-up time).
"""

from __future__ import annotations

import argparse

FLEET_HELP = {
    "instances": "engines in the fleet (data-parallel replicas, each with its own KV cache and its own "
                 "ordering-policy object), behind --router; 1 with no --router: the single engine",
    "router": "which instance serves each request (docs/fleets.md): round-robin, least-work, session-affinity, "
              "dynamo-kv, llm-d, sglang-cache-aware; default round-robin when --instances > 1",
    "router_param": "a router parameter (repeatable), e.g. overlap_weight=2 or temperature=0.5 for dynamo-kv",
}


def add_fleet_options(p: argparse.ArgumentParser) -> None:
    """``--instances``, ``--router`` and ``--router-param`` (``run`` and ``compare``)."""
    from fairsim.io import count_arg
    from fairsim.routers import ROUTERS

    p.add_argument("--instances", type=count_arg, default=1, metavar="N", help=FLEET_HELP["instances"])
    p.add_argument("--router", choices=tuple(ROUTERS), default=None, help=FLEET_HELP["router"])
    p.add_argument("--router-param", action="append", default=[], metavar="KEY=VALUE",
                   help=FLEET_HELP["router_param"])


DISAGG_HELP = {
    "prefill_instances": "--mode disaggregated: prefill engines, behind --router (default round-robin); each runs "
                         "the ordering policy (default 1)",
    "decode_instances": "--mode disaggregated: decode engines; a request's KV moves to the one with the fewest "
                        "active KV blocks when its prefill ends (default 1)",
    "kv_link_gbps": "--mode disaggregated: KV link bandwidth per GPU, Gbit/s (default 400: one 400 Gb/s "
                    "InfiniBand NDR port per GPU, as in NVIDIA DGX H100/H200)",
    "kv_bytes_per_token": "--mode disaggregated: KV bytes per token per GPU (default: the profile's "
                          "kv_capacity.kv_bytes_per_token, 2 x layers x kv_heads x head_dim x dtype bytes / TP)",
    "decode_kv_blocks": "--mode disaggregated: each decode engine's KV cache in blocks (of the run's block size); "
                        "default: the prefill side's (--kv-blocks/--kv-tokens/--kv-fraction or the profile's). "
                        "Given, a prefill engine need only hold each prompt",
}

DISAGG_OPTIONS = (("prefill_instances", "--prefill-instances"), ("decode_instances", "--decode-instances"),
            ("kv_link_gbps", "--kv-link-gbps"), ("kv_bytes_per_token", "--kv-bytes-per-token"),
            ("decode_kv_blocks", "--decode-kv-blocks"))
"""``--mode disaggregated``'s own options: ``(dest, option)``."""


def add_disagg_options(p: argparse.ArgumentParser) -> None:
    """Add ``disaggregated`` to ``--mode`` and the options of the mode (``run``, ``compare``)."""
    from fairsim.io import count_arg

    for action in p._actions:
        if action.dest == "mode":
            action.choices = (*action.choices, "disaggregated")
            action.help += "; disaggregated: prefill and decode on separate engines, the KV moving between them"
    p.add_argument("--prefill-instances", type=count_arg, default=None, metavar="P",
                   help=DISAGG_HELP["prefill_instances"])
    p.add_argument("--decode-instances", type=count_arg, default=None, metavar="D",
                   help=DISAGG_HELP["decode_instances"])
    p.add_argument("--kv-link-gbps", type=float, default=None, metavar="GBPS", help=DISAGG_HELP["kv_link_gbps"])
    p.add_argument("--kv-bytes-per-token", type=float, default=None, metavar="BYTES",
                   help=DISAGG_HELP["kv_bytes_per_token"])
    p.add_argument("--decode-kv-blocks", type=count_arg, default=None, metavar="N",
                   help=DISAGG_HELP["decode_kv_blocks"])



def one_engine(args: argparse.Namespace) -> bool:
    """True when the options ask for one engine: no ``--mode disaggregated`` nor any of its
    options, ``--instances 1``, no ``--router`` and no ``--router-param``.

    Then ``fairsim.cli_disagg.disagg_spec`` and ``fairsim.cli_fleet.fleet_spec`` return ``None``
    without an error; in every other case the caller asks them (they check the options).
    """
    return (getattr(args, "mode", None) != "disaggregated"
            and all(getattr(args, dest, None) is None for dest, _ in DISAGG_OPTIONS)
            and getattr(args, "instances", 1) == 1 and getattr(args, "router", None) is None
            and not getattr(args, "router_param", []))
