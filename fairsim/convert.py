"""``fairsim convert IN OUT``: any supported trace to the canonical Mooncake-style JSONL."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fairsim.io import check_writable_file, file_arg, path_arg
from fairsim.traces import load_trace
from fairsim.traces.canonical import write_canonical
from fairsim.traces.formats import FORMATS
from fairsim.traces.formats.mooncake import sidecar_path


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``convert`` command."""
    p = sub.add_parser(
        "convert", help="write a trace of any format as canonical Mooncake-style JSONL",
        description="Read IN (any supported format, detected from its content) and write OUT as "
                    "Mooncake-style JSONL plus session fields and labels, with OUT.meta.json "
                    "recording the hash block size and the source.")
    p.add_argument("input", type=path_arg, metavar="IN", help="trace file or folder")
    p.add_argument("output", type=file_arg, metavar="OUT", help="output .jsonl (gzip when it ends with .gz)")
    p.add_argument("--trace-format", default="auto", choices=("auto", *FORMATS),
                   help="format of IN (default: auto, from the content)")
    p.add_argument("--hash-block-size", type=int, default=None, metavar="TOKENS",
                   help="tokens per hash id of IN when given out of band (Mooncake-like files)")
    p.add_argument("--block-size", type=int, default=None, metavar="TOKENS",
                   help="hash block to write traces with exact segments (RAGPulse) at (default 16)")
    p.add_argument("--skip-bad", action="store_true", help="skip bad records of IN, counting them")
    p.add_argument("--trace-part", type=int, default=None, metavar="N",
                   help="RAGPulse: convert part N (1-based, a week) of an IN whose time axis restarts")


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same path once resolved, or (both existing) the
    same file by device and inode, as a hard link is."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def cmd_convert(args: argparse.Namespace) -> int:
    """Run ``fairsim convert``; returns the exit status.

    Raises:
        ValueError: OUT is IN or its sidecar, a bad block size, no valid request.
        OutputError: OUT is a folder or cannot be written (checked before IN is read).
        TraceFormatError: A bad record of IN (unless ``--skip-bad``).
    """
    if args.block_size is not None and args.block_size < 1:
        raise ValueError(f"--block-size {args.block_size}: need >= 1 token")
    if _same_file(args.output, args.input) or _same_file(args.output, sidecar_path(args.input)):
        raise ValueError(f"convert: OUT {args.output} would overwrite IN")
    if args.output.name.endswith(".meta.json"):  # (a trace there is later read as FILE's sidecar)
        raise ValueError(f"convert: OUT {args.output} ends in .meta.json, the name of the sidecar that convert "
                         f"writes beside a trace ({args.output.name[:-len('.meta.json')]}'s); choose another name")
    parent = args.output.parent
    if not parent.is_dir():
        why = "is not a folder" if parent.exists() else "does not exist"
        raise ValueError(f"convert: {parent} (the folder of OUT {args.output}) {why}")
    check_writable_file(args.output, "convert: OUT")  # a folder, or not writable: before reading IN
    trace = load_trace(args.input, args.trace_format, skip_bad=args.skip_bad,
                       hash_block_size=args.hash_block_size, part=args.trace_part)
    skipped = trace.skipped_summary()
    if skipped:
        print(f"fairsim: {skipped}", file=sys.stderr)
    if not trace.requests:
        raise ValueError(f"{trace.source}: no valid requests in the trace" + (f" ({skipped})" if skipped else ""))
    for warning in trace.warnings:
        print(f"fairsim: warning: {warning}", file=sys.stderr)
    meta = write_canonical(trace, args.output, block_size=args.block_size)
    print(f"converted {meta['requests']} requests of {trace.source} ({trace.format}) to {args.output} "
          f"({meta['hash_block_size']}-token hash blocks); metadata in {sidecar_path(args.output)}")
    return 0
