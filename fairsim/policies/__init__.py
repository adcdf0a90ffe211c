"""Pure orderings of the waiting queue (no simpy, no vllm, no simulator imports)."""

from fairsim.policies.aging import LPMAging, ShortestUncachedFirst, SJFAging
from fairsim.policies.base import Policy, arrival_key
from fairsim.policies.dlpm import DLPM
from fairsim.policies.drr import DRR
from fairsim.policies.drr_dynamo import DRRDynamo
from fairsim.policies.fairway import Fairway
from fairsim.policies.fairway_carry import FairwayCarry
from fairsim.policies.fairway_deadline import FairwayDeadline
from fairsim.policies.fairway_patience import FairwayPatience
from fairsim.policies.fcfs import FCFS
from fairsim.policies.klpm import KLPM
from fairsim.policies.lpm import LPM
from fairsim.policies.peek import PEEK
from fairsim.policies.preble import Preble
from fairsim.policies.ragcache import RAGCache
from fairsim.policies.vtc import VTC
from fairsim.policies.registry import POLICIES, make_policy, policy_names

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
