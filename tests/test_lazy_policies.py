"""The policy registry imports a policy's module only when that policy is built (start-up time),
and the classes stay importable by name from ``fairsim.policies``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import fairsim.policies as policies
from fairsim.costmodel import load_profile
from fairsim.policies.registry import _CLASSES, CLASS_MODULES, POLICIES, accepted_params, make_policy

ROOT = Path(__file__).resolve().parents[1]


def test_building_fcfs_imports_no_other_policy_module():
    code = ("import sys; import fairsim.cli; from fairsim.policies import make_policy; make_policy('fcfs'); "
            "print(sorted(m.rpartition('.')[2] for m in sys.modules if m.startswith('fairsim.policies.')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = set(eval(out.stdout))
    assert "fcfs" in loaded
    assert not loaded & (set(CLASS_MODULES.values()) - {"fcfs"}), loaded


def test_every_registered_policy_builds_and_names_its_class():
    profile = load_profile("a6000-llama3.1-8b-vllm-prior")
    for name in POLICIES:
        policy = make_policy(name, profile)
        assert isinstance(policy, _CLASSES[name]), name
    assert accepted_params("fairway-plus")[:1] == accepted_params("fairway-carry")[:1]


def test_classes_by_name():
    from fairsim.policies import FairwayDeadline, LPM

    assert LPM is policies.LPM and LPM.__module__ == "fairsim.policies.lpm"
    assert FairwayDeadline.__name__ == "FairwayDeadline"
    assert sorted(policies.__all__) == sorted(set(policies.__all__))
    for name in policies.__all__:
        assert getattr(policies, name) is not None
    try:
        policies.NoSuchPolicy  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchPolicy" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
