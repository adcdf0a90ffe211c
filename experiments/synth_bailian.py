"""A Qwen-Bailian-format trace for the performance checks at 16-token hash blocks (not shipped).

docs/performance.md measures fairsim against Dynamo's replay on a trace of that format (the
public files are not in ``../shared``): many short prompts, three in ten a follow-up turn that
extends an earlier turn's prompt (its ``hash_ids`` begin with the parent's full blocks, so the
follow-up can hit the parent's cached blocks), Poisson arrivals. The same arguments give the
same file, byte for byte.

    python -m experiments.synth_bailian --requests 20000 --rate 8 --seed 2 --out bailian20k_r8.jsonl

Fields (TRACES.md): ``chat_id``, ``parent_chat_id`` (-1 for a first turn), ``timestamp`` (s, ms
precision), ``input_length`` (first turns 50-2,000 tokens; a follow-up its parent's plus
20-600), ``output_length`` (10-500), ``type`` ("text"), ``turn`` (1 or 2), ``hash_ids`` (one id
per full 16-token block; fresh ids are consecutive integers, as the files' remapped ids are).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
from pathlib import Path

from fairsim.io import plural


def write(path: str, requests: int, rate: float, seed: int) -> None:
    """Write the trace (see the module docstring) to ``path``."""
    rng = random.Random(seed)
    t = 0.0
    next_id = 0
    chats: list[tuple[int, list[int], int]] = []
    with open(path, "w") as f:
        for i in range(requests):
            t += rng.expovariate(rate)
            if chats and rng.random() < 0.3:
                parent, parent_ids, parent_len = rng.choice(chats[-200:])
                length = parent_len + rng.randint(20, 600)
                ids = list(parent_ids[: parent_len // 16])
                while len(ids) < length // 16:
                    ids.append(next_id)
                    next_id += 1
                turn = 2
            else:
                parent = -1
                length = rng.randint(50, 2000)
                ids = list(range(next_id, next_id + length // 16))
                next_id += length // 16
                turn = 1
            rec = {"chat_id": i, "parent_chat_id": parent, "timestamp": round(t, 3), "input_length": length,
                   "output_length": rng.randint(10, 500), "type": "text", "turn": turn, "hash_ids": ids}
            chats.append((i, ids, length))
            f.write(json.dumps(rec) + "\n")


MAX_REQUESTS = 10_000_000
MIN_RATE, MAX_RATE = 1e-3, 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="synth_bailian", description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000, help=f"requests, 1 to {MAX_REQUESTS:,} (default 20000)")
    parser.add_argument("--rate", type=float, default=8.0, help="mean arrivals per second, 0.001 to 1e6 (default 8)")
    parser.add_argument("--seed", type=int, default=2, help="random seed (default 2)")
    parser.add_argument("--out", required=True, help="the JSONL file to write (its folder must exist)")
    args = parser.parse_args(argv)
    # The project's error contract: one line naming the option, exit 2, before any work.
    if not 1 <= args.requests <= MAX_REQUESTS:
        return _fail(f"--requests {args.requests}: need 1 to {MAX_REQUESTS:,}")
    if not (math.isfinite(args.rate) and MIN_RATE <= args.rate <= MAX_RATE):
        return _fail(f"--rate {args.rate:g}: need {MIN_RATE:g} to {MAX_RATE:g} arrivals per second")
    out = Path(args.out)
    if not args.out or out.is_dir():
        return _fail(f"--out {args.out!r}: need a file name, not a folder")
    if not out.parent.is_dir():
        return _fail(f"--out {args.out}: the folder {out.parent} does not exist")
    # Written beside it and renamed at the end: an error or a Ctrl-C leaves no half-written file.
    part = out.with_name(out.name + ".part")
    try:
        write(str(part), args.requests, args.rate, args.seed)
        os.replace(part, out)
    except OSError as exc:
        part.unlink(missing_ok=True)
        return _fail(f"--out {args.out}: cannot write it: {exc.strerror or exc}")
    except KeyboardInterrupt:
        part.unlink(missing_ok=True)
        print("synth_bailian: interrupted; nothing written", file=sys.stderr)
        return 130
    print(f"wrote {args.out}: {plural(args.requests, 'request')} at {args.rate:g}/s (seed {args.seed})")
    return 0


def _fail(message: str) -> int:
    print(f"synth_bailian: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
