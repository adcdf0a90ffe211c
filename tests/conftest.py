"""Shared fixtures and hypothesis profiles.

Profiles: ``dev`` (default, quick) and ``ci`` (more examples; selected with
``HYPOTHESIS_PROFILE=ci``, and by default when ``CI`` is set, as in ``.ci/run``). ``derandomize`` keeps CI runs reproducible.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=100, deadline=None)
# CI: more examples, derandomized so a red CI run is reproducible locally.
settings.register_profile("ci", max_examples=300, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
# CI (CI=true) runs the "ci" profile unless HYPOTHESIS_PROFILE says otherwise.
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
