"""Small factories for tests (vLLM ``tests/v1/core/utils.py`` style)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

from fairsim.costmodel import Profile
from fairsim.types import QueuedRequest, Request


def make_queued(rid: str, h: int, c: int, arrival: float = 0.0, prompt_len: int | None = None) -> QueuedRequest:
    """A waiting-request snapshot with cached ``h`` and uncached ``c`` tokens."""
    return QueuedRequest(rid, arrival, prompt_len if prompt_len is not None else h + c, h, c, 0, None)


def make_request(rid: str, arrival: float, prompt_len: int, hashes=(), block: int = 4,
                 **labels) -> Request:
    """A request with prefix hashes of ``block``-token blocks."""
    return Request(rid, arrival, prompt_len, tuple(hashes), block, 1, dict(labels))


def constant_profile(step_s: float = 1.0, per_token_s: float = 0.0) -> Profile:
    """Step time = ``step_s + per_token_s * tokens``; T_idle from the same model."""
    return Profile("const", "prior", step_s, per_token_s, 0.0, 0.0, (1, 1_000_000),
                   (step_s, step_s * 1e6), budget_tokens=2048)


def infinite_cache_hits(requests, block):
    """Leading engine blocks of each request (in list order) already cached by earlier ones:
    an infinite cache, no eviction (``fairsim.sim.keys.block_keys`` at ``block``)."""
    from fairsim.sim.keys import block_keys

    seen, out = set(), []
    for r in requests:
        keys = block_keys(r, block)
        hit = 0
        for k in keys:
            if k not in seen:
                break
            hit += 1
        out.append(hit)
        seen.update(keys)
    return out


def change_hits(rng, waiting: dict, order, max_changed: int, new_hit=None) -> None:
    """As the engine after cache events: give up to ``max_changed`` random waiting requests a new
    hit (``new_hit(rng, q)`` tokens, default uniform in ``0..L-1``) and feed each new snapshot to
    the incremental ``order`` (``add``)."""
    for rid in rng.sample(sorted(waiting), k=min(len(waiting), rng.randint(0, max_changed))):
        q = waiting[rid]
        h = new_hit(rng, q) if new_hit is not None else rng.randint(0, q.prompt_len - 1)
        q = waiting[rid] = q._replace(cached_len=h, uncached_len=max(1, q.prompt_len - h))
        order.add(q)


def admit(waiting: dict, order, admitted) -> None:
    """As the engine after a step: the admitted requests leave ``waiting`` and the ``order``."""
    for q in admitted:
        del waiting[q.request_id]
        order.remove(q.request_id)


def read_prefix(rng, inc, expected: list[str], now: float) -> tuple[list, int]:
    """As the engine's admission loop: read ``inc``'s order at ``now`` up to ``k + 1`` items (``k``
    random, at most 4: the ``k`` admitted and the first misfit), each checked against the
    reference order's ids ``expected``. Returns the items read and ``k``."""
    it = inc.iter_order(now)
    k = rng.randint(0, min(4, len(expected)))
    got = [next(it) for _ in range(min(len(expected), k + 1))]
    assert [q.request_id for q in got] == expected[:len(got)]
    return got, k


def admit_both(ref, fast, inc, waiting: dict, ids: list[str], now: float) -> None:
    """The requests ``ids`` were admitted: both policies hear it (``on_admitted``), and they leave
    ``waiting`` and the fast path's order ``inc``."""
    admitted = [waiting[rid] for rid in ids]
    if admitted:
        ref.on_admitted(admitted, now)
        fast.on_admitted(admitted, now)
    admit(waiting, inc, admitted)


def assert_same_credit_state(name: str, ref, fast) -> None:
    """The reference and the fast-path policy ended in the same credit state."""
    if name == "drr":
        assert (ref.deficit, ref.cursor) == (fast.deficit, fast.cursor)
    elif name == "drr-dynamo":
        assert (ref.deficit, ref.cursor, ref.position) == (fast.deficit, fast.cursor, fast.position)
    elif name == "dlpm":
        assert ref.deficit == fast.deficit
    else:
        assert ref.counter == fast.counter


def shared_prefix_requests(rng, counts=(60, 120)) -> list[Request]:
    """Requests in 1-3 groups sharing leading 512-token blocks (2-6 blocks, the last one unique),
    exponential gaps at mixed rates and output lengths 1/300/1500: shared blocks cached, evicted
    and preempted again and again in a small colocated cache (lazy hits, fast orders)."""
    reqs, t = [], 0.0
    groups = rng.choice([1, 2, 3])
    for i in range(rng.choice(counts)):
        t += rng.expovariate(rng.choice([5.0, 20.0, 80.0]))
        g, nb = rng.randrange(groups), rng.choice([2, 4, 6])
        reqs.append(Request(f"r{i:03d}", t, nb * 512 + rng.choice([1, 100]),
                            tuple([g * 1000 + j for j in range(nb - 1)] + [10**6 + i]), 512,
                            output_len=rng.choice([1, 300, 1500])))
    return reqs


def random_arrivals(rng, t: float, step: int, n: int, num_clients: int, known: dict,
                    inc, block: int = 0) -> float:
    """A step's new waiting snapshots for the credit-order properties, put in ``known`` (request
    id -> snapshot) and added to the fast path's order ``inc``: ``0..n`` of them every third
    step, else ``0..2``; prompts of 2-6,000 tokens with a random hit, arrivals after ``t`` (s),
    clients ``("tenant", i)`` of ``num_clients`` (none when 0); ids unique against ``known``.
    ``block`` > 0: each prompt has ``L // block`` block keys of ``block`` tokens and its hit is a
    whole number of them, so ``max_hit`` (``fairsim.policies.fast_lane``) is below ``L - 1``.
    Returns the last arrival time (``t`` if none)."""
    out = []
    for _ in range(rng.randint(0, n) if step % 3 == 0 else rng.randint(0, 2)):
        t += rng.random()
        L = rng.randint(2, 6_000)
        client = ("tenant", rng.randrange(num_clients)) if num_clients else None
        rid = f"r{step}-{len(known) + len(out)}-{rng.randrange(10**6)}"
        if block:
            keys = tuple(range(L // block))
            h = rng.randint(0, min(len(keys), (L - 1) // block)) * block
            out.append(QueuedRequest(rid, t, L, h, max(1, L - h), 0, None, keys, block, client=client))
        else:
            h = rng.randint(0, L - 1)
            out.append(QueuedRequest(rid, t, L, h, max(1, L - h), 0, None, client=client))
    for q in out:
        known[q.request_id] = q
        inc.add(q)
    return t


def credit_pair(name: str, quantum: int, profile: Profile):
    """``(reference, fast, fast's incremental order)`` of a credit policy (DRR/DRR-Dynamo/DLPM: ``quantum``
    tokens; VTC: ``input_weight = quantum / 1000``): two fresh instances, the second's fast path."""
    from fairsim.policies import make_policy

    params = {"quantum": quantum} if name in ("drr", "drr-dynamo", "dlpm") else {"input_weight": quantum / 1000}
    fast = make_policy(name, profile, **params)
    return make_policy(name, profile, **params), fast, fast.incremental_order()


def same_as_reference(requests, policy: str, profile: Profile, config, reference: dict,
                      tables: tuple[str, ...] = ("requests", "steps"), **kw):
    """Simulate ``requests`` under ``policy`` with the engine's defaults and with the reference
    options ``reference`` (e.g. ``{"fast_chunks": False}``); assert ``tables`` are identical
    (exact floats); return the default run's ``SimResult``."""
    import pandas as pd

    from fairsim.policies import make_policy
    from fairsim.sim import simulate

    fast = simulate(requests, make_policy(policy, profile), profile, config, **kw)
    ref = simulate(requests, make_policy(policy, profile), profile, config, **reference, **kw)
    for name in tables:
        pd.testing.assert_frame_equal(getattr(fast, name), getattr(ref, name), check_exact=True)
    return fast


def write_failing_policy(folder, module: str) -> str:
    """Write ``folder/module.py`` with a team policy (FCFS) whose ``order()`` raises
    ``ValueError('boom')`` once the clock passes 5 s; return its ``--policy`` name
    (``module:Boom``). The caller puts ``folder`` on ``sys.path`` (and ``PYTHONPATH`` for child
    processes) and drops ``module`` from ``sys.modules`` afterwards."""
    (folder / f"{module}.py").write_text(
        "from fairsim.policies.fcfs import FCFS\n"
        "class Boom(FCFS):\n"
        "    name = 'boom'\n"
        "    def order(self, waiting, now):\n"
        "        if now > 5.0:\n"
        "            raise ValueError('boom')\n"
        "        return super().order(waiting, now)\n")
    return f"{module}:Boom"


def ctrl_c_when(argv: list[str], ready: Callable[[], bool], cwd: Any, env: dict[str, str] | None = None,
                wait_s: float = 240.0) -> subprocess.CompletedProcess:
    """Run ``argv`` (a ``fairsim`` command line) as a user would, send it Ctrl-C (SIGINT) once
    ``ready()`` holds, and return its exit status, stdout and stderr (text). Fails the test if the
    command exits, or ``wait_s`` pass, before ``ready()``."""
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # A shell's background job inherits SIGINT ignored, and Python then installs no
        # KeyboardInterrupt handler: restore the default so the child sees Ctrl-C as a user would.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + wait_s
    while not ready():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def rag_preempting(profile: Profile):
    """160 requests of the ``rag`` scenario (seed 2) with outputs of 1-700 tokens on a colocated
    engine of 4 longest prompts' KV and 16 sequences: a trace whose decodes preempt (the colocated
    fast paths' comparisons with the step-by-step engine use it)."""
    import dataclasses

    from fairsim.scenarios import build_scenario
    from fairsim.sim import EngineConfig

    rag = build_scenario("rag", profile, seed=2)
    longest = max(r.prompt_len for r in rag.requests)
    reqs = [dataclasses.replace(r, output_len=1 + (i * 53) % 700) for i, r in enumerate(rag.requests[:160])]
    return reqs, EngineConfig(kv_tokens=4 * longest, mode="colocated", max_num_seqs=16)


def compiled_twin_or_skip(name: str) -> Any:
    """The compiled twin ``name`` (``fairsim.compiled.compiled_twin``) for a test module that
    compares it with its Python reference. Skips the module where the twin is not in use (no C
    compiler, or ``FAIRSIM_PURE_PYTHON=1``); fails it where a compiler is present but the twin does
    not import (an install that did not build it: reinstall)."""
    import os
    import shutil
    import sysconfig

    import pytest

    from fairsim.compiled import PURE_PYTHON_ENV, compiled_twin

    twin = compiled_twin(name)
    if twin is not None:
        return twin
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None or os.environ.get(PURE_PYTHON_ENV) == "1":
        pytest.skip(f"{name} is not in use (no C compiler, or {PURE_PYTHON_ENV}=1)", allow_module_level=True)
    pytest.fail(f"a C compiler is present ({cc}) but {name} does not import: reinstall (pip install -e .) "
                "to build it", pytrace=False)


@contextlib.contextmanager
def pure_python():
    """Run the block with ``FAIRSIM_PURE_PYTHON=1`` (the Python references instead of the compiled
    twins), restoring the variable after; for hypothesis tests, where ``monkeypatch`` (a
    function-scoped fixture) is not reset between examples."""
    from fairsim.compiled import PURE_PYTHON_ENV

    old = os.environ.get(PURE_PYTHON_ENV)
    os.environ[PURE_PYTHON_ENV] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ[PURE_PYTHON_ENV]
        else:
            os.environ[PURE_PYTHON_ENV] = old


def read_outcome(read: Callable[..., Any], path: Any, **kwargs: Any) -> tuple:
    """What the trace reader ``read`` gives for ``path``: every field of every request and of the
    trace, or the error (type and message), for comparing a compiled reader with its reference."""
    from fairsim.errors import TraceFormatError

    try:
        trace = read(path, **kwargs)
    except (TraceFormatError, ValueError) as exc:
        return ("error", type(exc).__name__, str(exc))
    # every field of Request (a field added later is compared too; one left unset raises here)
    requests = [tuple(repr(getattr(r, name)) for name in Request.__slots__) for r in trace.requests]
    return ("trace", requests, [str(e) for e in trace.skipped], trace.warnings, trace.absolute_time,
            trace.hash_block_size, trace.locations, trace.name, trace.format, trace.source)


def read_both_ways(read: Callable[..., Any], path: Any, **kwargs: Any) -> tuple[tuple, tuple]:
    """``(compiled, reference)``: ``read_outcome`` with the compiled twins, then with
    ``FAIRSIM_PURE_PYTHON=1``."""
    compiled = read_outcome(read, path, **kwargs)
    with pure_python():
        reference = read_outcome(read, path, **kwargs)
    return compiled, reference


def timed_walls(monkeypatch, log: Any, walls: list[float]) -> list[list[str]]:
    """Make every whole process bench times (``fairsim.timed._timed``, and ``fairsim.bench``'s
    reference to it) still run but report the next of ``walls`` (seconds) as its wall time. A
    ``fairsim run`` child's start is appended to the file ``log`` as a line with its policy's
    name (a fake peer logs its own). Returns the commands timed, in order."""
    import fairsim.bench
    import fairsim.timed

    real = fairsim.timed._timed
    it = iter(walls)
    cmds: list[list[str]] = []

    def timed(cmd: list[str]) -> tuple:
        cmds.append(list(cmd))
        if "--policy" in cmd:
            with open(log, "a") as f:
                f.write(cmd[cmd.index("--policy") + 1] + "\n")
        _, peak, code, out, err = real(cmd)
        return next(it), peak, code, out, err

    monkeypatch.setattr(fairsim.timed, "_timed", timed)
    monkeypatch.setattr(fairsim.bench, "_timed", timed)
    return cmds
