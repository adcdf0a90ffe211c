"""Pure orderings of the waiting queue (no simpy, no vllm, no simulator imports)."""

from fairsim.policies.base import Policy, arrival_key
from fairsim.policies.fairway import Fairway
from fairsim.policies.fcfs import FCFS
from fairsim.policies.lpm import LPM
from fairsim.policies.registry import POLICIES, make_policy, policy_names

__all__ = [
    "FCFS",
    "LPM",
    "POLICIES",
    "Fairway",
    "Policy",
    "arrival_key",
    "make_policy",
    "policy_names",
]
