"""The ``fairsim sweep`` command-line options (kept apart from ``command`` so that building the
``fairsim`` parser imports no pandas: start-up time)."""

from __future__ import annotations

from typing import Any

from fairsim.io import file_arg, path_arg

EXECUTORS = ("local", "ray")


def add_parser(sub: Any) -> None:
    """Register ``fairsim sweep`` on the CLI's subparsers."""
    p = sub.add_parser("sweep", help="run a grid of policies x parameters x seeds x scenarios/traces")
    p.add_argument("spec", type=file_arg, help="sweep spec (.toml, .yaml or .yml)")
    p.add_argument("--out", type=path_arg, default=None,
                   help="output folder (default: the spec's 'out', else results/sweep-SPECNAME)")
    p.add_argument("--executor", choices=EXECUTORS, default="local",
                   help="where runs go: local processes (default) or Ray tasks")
    p.add_argument("--address", default=None, help="Ray cluster address (with --executor ray)")
    p.add_argument("--workers", type=int, default=None,
                   help="local processes, or CPUs of a Ray started here (default: all cores)")
    p.add_argument("--dry-run", action="store_true",
                   help="validate the spec, list the runs (id, status, parameters) and exit")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
