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

import json
import random
import sys

from experiments import synth_cli


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


def main(argv: list[str] | None = None) -> int:
    return synth_cli.main("synth_bailian", __doc__.splitlines()[0], write, argv, requests=20000, rate=8.0, seed=2)


if __name__ == "__main__":
    sys.exit(main())
