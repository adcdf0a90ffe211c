"""The command line shared by the generated-trace scripts (``synth_bailian``, ``synth_toolagent``).

Each script gives a ``write(path, requests, rate, seed)`` and its defaults; this module checks the
options, writes the file beside its name and renames it at the end (an error or a Ctrl-C leaves
no half-written file), and follows the project's error contract: a bad option is one line naming
it and exit 2, before any work.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

from fairsim.errors import OutputError
from fairsim.io import file_target, plural

MAX_REQUESTS = 10_000_000
MIN_RATE, MAX_RATE = 1e-3, 1e6


def main(prog: str, description: str, write: Callable[[str, int, float, int], None], argv: list[str] | None,
         *, requests: int, rate: float, seed: int, rate_help: str = "mean arrivals per second") -> int:
    """Parse ``argv`` and run ``write(out, requests, rate, seed)``.

    Returns:
        0 when the file is written, 2 for a bad option or a write error, 130 on Ctrl-C.
    """
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--requests", type=int, default=requests,
                        help=f"requests, 1 to {MAX_REQUESTS:,} (default {requests})")
    parser.add_argument("--rate", type=float, default=rate,
                        help=f"{rate_help}, {MIN_RATE:g} to {MAX_RATE:g} (default {rate:g})")
    parser.add_argument("--seed", type=int, default=seed, help=f"random seed (default {seed})")
    parser.add_argument("--out", required=True, help="the JSONL file to write (its folder must exist)")
    args = parser.parse_args(argv)

    def fail(message: str) -> int:
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 2

    if not 1 <= args.requests <= MAX_REQUESTS:
        return fail(f"--requests {args.requests}: need 1 to {MAX_REQUESTS:,}")
    if not (math.isfinite(args.rate) and MIN_RATE <= args.rate <= MAX_RATE):
        return fail(f"--rate {args.rate:g}: need {MIN_RATE:g} to {MAX_RATE:g} arrivals per second")
    if not args.out or Path(args.out).is_dir():
        return fail(f"--out {args.out!r}: need a file name, not a folder")
    try:
        out = file_target(args.out, "--out")  # (a link: its target is written, the link kept)
    except OutputError as exc:
        return fail(str(exc))
    if not out.parent.is_dir():
        return fail(f"--out {args.out}: the folder {out.parent} does not exist")
    part = out.with_name(out.name + ".part")
    try:
        write(str(part), args.requests, args.rate, args.seed)
        os.replace(part, out)
    except OSError as exc:
        part.unlink(missing_ok=True)
        return fail(f"--out {args.out}: cannot write it: {exc.strerror or exc}")
    except KeyboardInterrupt:
        part.unlink(missing_ok=True)
        print(f"{prog}: interrupted; nothing written", file=sys.stderr)
        return 130
    print(f"wrote {args.out}: {plural(args.requests, 'request')} at {args.rate:g}/s (seed {args.seed})")
    return 0
