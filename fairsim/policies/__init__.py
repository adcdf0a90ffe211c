"""Pure orderings of the waiting queue (no simpy, no vllm, no simulator imports).

The policy classes are importable from here by name; each one's module is imported on first use."""

from fairsim.policies.base import Policy, arrival_key
from fairsim.policies.registry import CLASS_MODULES, POLICIES, make_policy, policy_class, policy_names


def __getattr__(name: str) -> type:
    """The policy classes by name (``from fairsim.policies import Fairway``), each module imported
    on first use (``fairsim.policies.registry.CLASS_MODULES``: start-up time)."""
    if name in CLASS_MODULES:
        return policy_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DLPM",
    "DRR",
    "DRRDynamo",
    "FCFS",
    "VTC",
    "FairwayCarry",
    "FairwayDeadline",
    "FairwayPatience",
    "KLPM",
    "LPMAging",
    "LPM",
    "PEEK",
    "POLICIES",
    "Fairway",
    "Policy",
    "Preble",
    "RAGCache",
    "SJFAging",
    "ShortestUncachedFirst",
    "arrival_key",
    "make_policy",
    "policy_names",
]
