"""A tool-and-agent Mooncake-format trace for the performance checks (not shipped).

Mooncake's FAST'25 "Tool and Agent" trace (``toolagent_trace.jsonl``, 23,608 requests in an hour,
mean prompt 8,596 tokens; ../shared/data/traces/README.md) could not be copied here. This
generator writes a trace of its shape, so ``fairsim bench`` can be checked against Dynamo on
agent traffic (docs/performance.md): 80 agent templates (system prompt and tools: a log-normal
prefix of about 3,000 tokens, popularity Zipf 1.1), each run a trajectory of 1-9 steps that
arrive 1-20 s apart (tool calls), each step's prompt its previous step's full blocks plus a
log-normal addition (about 1,500 tokens at the first step, 900 after), output about 140 tokens.
Trajectories start as a Poisson process at ``rate / 4.5`` per second for ``requests / rate``
seconds (longer where that gives fewer steps than ``requests``); the first ``requests`` steps by
time are written. Heavy prefix reuse: about 80 % of the
blocks repeat an earlier one (the public trace's is lower). The same arguments give the same
file, byte for byte.

    python -m experiments.synth_toolagent --out toolagent_like.jsonl

Rows (TRACES.md, Mooncake): ``timestamp`` (ms, an integer), ``input_length``,
``output_length``, ``hash_ids`` (one id per 512-token block, the last partial block's included;
fresh ids are consecutive integers).
"""

from __future__ import annotations

import json
import math
import random
import sys

from experiments import synth_cli

BLOCK = 512


def write(path: str, requests: int, rate: float, seed: int) -> None:
    """Write the trace (see the module docstring) to ``path``."""
    rng = random.Random(seed)
    next_id = 0

    def fresh(k: int) -> list[int]:
        nonlocal next_id
        ids = list(range(next_id, next_id + k))
        next_id += k
        return ids

    templates = [fresh(int(rng.lognormvariate(math.log(3000), 0.6)) // BLOCK) for _ in range(80)]
    weights = [1 / (i + 1) ** 1.1 for i in range(len(templates))]
    span = requests / rate
    steps: list[tuple[float, int, int, list[int]]] = []  # (arrival s, prompt, output, hash_ids)
    t = 0.0
    while len(steps) < requests * 1.3:
        t += rng.expovariate(rate / 4.5)
        if t > span and len(steps) >= requests:  # (past the span only while steps are short)
            break
        context = rng.choices(templates, weights)[0]
        at = t
        for step in range(rng.randint(1, 9)):
            total = len(context) * BLOCK + int(rng.lognormvariate(math.log(1500 if step == 0 else 900), 0.8))
            full = total // BLOCK
            ids = context + fresh(full - len(context)) + (fresh(1) if total % BLOCK else [])
            steps.append((at, total, max(1, int(rng.lognormvariate(math.log(140), 0.7))), ids))
            context = ids[:full]
            at += rng.uniform(1.0, 20.0)
    steps.sort(key=lambda s: s[0])
    with open(path, "w") as f:
        for at, prompt, output, ids in steps[:requests]:
            f.write(json.dumps({"timestamp": int(at * 1000), "input_length": prompt, "output_length": output,
                                "hash_ids": ids}) + "\n")


def main(argv: list[str] | None = None) -> int:
    return synth_cli.main("synth_toolagent", __doc__.splitlines()[0], write, argv, requests=23608,
                          rate=23608 / 3600, seed=5, rate_help="mean requests per second")


if __name__ == "__main__":
    sys.exit(main())
