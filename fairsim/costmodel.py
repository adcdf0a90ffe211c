"""Step-time cost model and idle prefill time ``T_idle(L)``.

Form (COSTMODEL.md; the parametric form of Preble's fitted equations, BLIS, AIConfigurator)::

    step_time = a + b * sum(n_i) + k * sum(n_i * (k_i + n_i / 2)) + d * len(batch)

for a step that computes ``n_i`` new tokens on top of ``k_i`` tokens already in request ``i``'s KV
cache. ``a`` per-step overhead (s), ``b`` per new token (s/token), ``k`` attention per (new token x
context token) pair (s/pair), ``d`` per request in the step (s/request).

Colocated mode (decode on the same engine) adds the decode terms and a memory-bound floor
(COSTMODEL.md "Decode, memory-bound steps and KV capacity")::

    step_time = max(min_step_s, a + b*sum(n_i) + k*sum(n_i*(k_i + n_i/2)) + d*len(batch)
                                + f*decodes + e*sum_decoding(ctx_j))

``f`` per decoding sequence (s/sequence: sampling, per-sequence kernels), ``e`` per context token a
decoding sequence's attention reads from KV memory (s/token; memory-bound, so not covered by
``k``), ``min_step_s`` the time to read the weights once (``weights_bytes / memory_bandwidth``): no
step is faster. All three default to 0. The colocated form is used in colocated mode only (for
every step there, decoding or not); prefill-only mode keeps the paper's form above unchanged, so
its results do not depend on a profile's decode terms.

``T_idle(L)`` is stored as a measured table (prompt tokens -> seconds) and interpolated linearly,
which keeps it monotone when the table is. Beyond the last table point it follows the cost model's
chunked-prefill estimate, scaled to meet the table's last point.

Profiles are JSON files (schema version 1); the shipped ones live in ``fairsim/profiles/`` and load
by their file stem, any other by path. The loader (``profile_from_dict``) refuses NaN/inf, nulls,
non-numbers and booleans where numbers belong, negative coefficients, a malformed or non-monotone
``T_idle`` table, and a table that disagrees with the profile's own coefficients by more than
``IDLE_TABLE_TOLERANCE`` (see ``check_idle_consistency``). Keys::


    schema_version   1
    name, kind       profile name; "prior" or "measured"
    coefficients     {"a_s", "b_s_per_token", "k_s_per_pair", "d_s_per_request"}
    budget_tokens    step budget the idle table was measured at (default 2048)
    idle_prefill     {"prompt_tokens": [...], "seconds": [...]}
    kv_capacity      optional; the engine's KV cache memory (``fairsim.kvcapacity``):
                     {"device_memory_gib": GiB, "gpu_memory_utilization": fraction (vLLM's
                      default: 0.92 in vLLM 0.32, 0.9 before), "weights_gib": GiB,
                      "activation_reserve_gib": GiB, "kv_bytes_per_token": bytes
                      (2 x layers x kv_heads x head_dim x dtype bytes / TP)}
                     -> ``Profile.kv_capacity_tokens`` =
                     floor((memory x utilisation - weights - reserve) / kv_bytes_per_token)
    max_model_len    optional; vLLM ``max_model_len`` in tokens: a longer prompt is rejected
    metadata         free-form provenance

A profile without ``kv_capacity`` (or ``max_model_len``) has ``kv_capacity_tokens`` (or
``max_model_len``) ``None``; the CLI then sizes the cache as a fraction of the trace and says so.
"""

from __future__ import annotations

import json
import math
import sys
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairsim.errors import ProfileError
from fairsim.kvcapacity import KVCapacity, kv_capacity_from_dict
from fairsim.record import field, record

if TYPE_CHECKING:  # numpy is imported where arrays are made: not at every run's start-up
    import numpy as np

SCHEMA_VERSION = 1
DECODE_KEYS = ("e_s_per_decode_ctx_token", "f_s_per_decode", "min_step_s")
"""Optional coefficients of the colocated (decode) form; 0 when a profile omits them."""
PROFILE_DIR = Path(__file__).parent / "profiles"
DEFAULT_PROFILE = "a6000-llama3.1-8b-vllm-prior"
MAX_TOKENS = 2**31 - 1
"""Largest token count a profile may give (``idle_prefill.prompt_tokens``, ``budget_tokens``,
``max_model_len``): vLLM keeps token positions and a step's token offsets in int32 (the bound of
``--budget`` and ``--max-model-len``). Beyond it the loader's own check of the ``T_idle`` table
(a step per chunk of each length) would run for hours instead of refusing."""

IDLE_TABLE_TOLERANCE = 0.25
"""Largest accepted relative gap ``|T_idle(L) - prefill_time(L)| / prefill_time(L)`` at any table
point, where ``prefill_time`` is the cost model's chunked cold prefill at the profile's budget.

Why 0.25: a measured table and a fit of step times disagree by measurement error plus model error.
On the shipped CPU profile (``cpu-tiny-llama-vllm-measured``, a noisy shared 2-core machine) every
point above 128 tokens is within 6 % of the fit (see ``IDLE_TABLE_SLACK_S`` for the rest); 25 % leaves
room for a noisier machine, while a gap beyond it means Fairway's patience (``T_idle``) and the
simulator's step times describe different engines (a table from another device, budget or
model), which would silently skew results. A prior built from the model (``model_idle_table``)
agrees to rounding. A profile may state a wider bound of its own with the top-level key
``idle_table_tolerance`` (a number > 0); ``fairsim calibrate --force`` writes it when the measured
table exceeds 0.25."""

IDLE_TABLE_SLACK_S = 0.005
"""Absolute slack of the ``T_idle`` consistency check, seconds: a point passes when its gap is at
most ``max(tolerance x prefill_time(L), IDLE_TABLE_SLACK_S)``. Why: a measured ``T_idle`` is the
TTFT of a request alone, which includes a few milliseconds of per-request engine work outside the
timed steps (input and output processing); on the CPU profile re-measured with decode the
128-token point is 3.7 ms against a modelled 1.9 ms while every longer point is within 6 %. 5 ms is
below every ``T_idle`` of a GPU-served 8B model (tens of ms), so it only forgives tiny prompts."""


def interp(x: float, xp: Sequence[float], fp: Sequence[float]) -> float:
    """``numpy.interp(x, xp, fp)`` for one ``x`` with ``xp[0] <= x <= xp[-1]``, in plain floats.

    The same operations in the same order as numpy's C loop (``arr_interp`` in
    ``numpy/_core/src/multiarray/compiled_base.c``): ``fp[j]`` where ``x == xp[j]``, else
    ``slope * (x - xp[j]) + fp[j]`` with ``slope = (fp[j+1] - fp[j]) / (xp[j+1] - xp[j])``, so the
    float is the one ``np.interp`` gives (``tests/test_costmodel.py`` compares the two over the
    table range of every shipped profile), at a fraction of a NumPy call's cost. Outside
    ``[xp[0], xp[-1]]`` its value means nothing (``np.interp`` clamps there): callers check.

    Args:
        x: The point (tokens).
        xp: Strictly increasing knots (tokens).
        fp: Values at the knots (seconds).

    Returns:
        The interpolated value, a float (seconds).
    """
    j = bisect_right(xp, x) - 1
    if j == len(xp) - 1 or xp[j] == x:
        return float(fp[j])
    x0, x1, y0, y1 = float(xp[j]), float(xp[j + 1]), float(fp[j]), float(fp[j + 1])
    slope = (y1 - y0) / (x1 - x0)
    out = slope * (float(x) - x0) + y0
    if out != out:  # NaN one way: numpy tries the other end, then a flat segment
        out = slope * (float(x) - x1) + y1
        if out != out and y0 == y1:
            out = y0
    return out


@record(frozen=True, slots=True)
class Profile:
    """A fitted (or prior) cost model for one device, model and engine.

    Attributes:
        name: Profile name.
        kind: ``"prior"`` (built from public figures) or ``"measured"`` (fitted by calibration).
        a_s: Per-step overhead, seconds (>= 0).
        b_s_per_token: Per new token, seconds/token (>= 0).
        k_s_per_pair: Per (new token x context token) pair, seconds/pair (>= 0).
        d_s_per_request: Per request in the step, seconds/request (>= 0).
        idle_prompt_tokens: ``T_idle`` table lengths, tokens, strictly increasing, shape (m,).
        idle_seconds: ``T_idle`` table values, seconds, non-decreasing, shape (m,).
        budget_tokens: Step token budget the table was measured at (chunk size of a cold prefill).
        e_s_per_decode_ctx_token: Per context token read by a decoding sequence, s/token (>= 0).
        f_s_per_decode: Per decoding sequence in the step, s/sequence (>= 0).
        min_step_s: Floor of every step, seconds (>= 0): reading the weights once.
        metadata: Free-form provenance (device, model, sources, fit error, raw measurements).
        kv_capacity: The engine's KV memory figures (``KVCapacity``), or None when unknown.
        max_model_len: vLLM ``max_model_len``, tokens (a prompt of this length or longer is
            rejected, since it leaves no room for one output token), or None when unknown.

    Raises:
        ProfileError: On a negative coefficient, a malformed ``T_idle`` table or
            ``max_model_len < 2``.
    """

    name: str
    kind: str
    a_s: float
    b_s_per_token: float
    k_s_per_pair: float
    d_s_per_request: float
    idle_prompt_tokens: tuple[int, ...]
    idle_seconds: tuple[float, ...]
    budget_tokens: int = 2048
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    kv_capacity: KVCapacity | None = None
    max_model_len: int | None = None
    e_s_per_decode_ctx_token: float = 0.0
    f_s_per_decode: float = 0.0
    min_step_s: float = 0.0
    _idle_memo: dict[int, float] = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)
    # The T_idle table's knots, values and segment slopes as floats (``_idle_time``), set once.
    _idle_segments: tuple = field(default=(), init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        for key in ("a_s", "b_s_per_token", "k_s_per_pair", "d_s_per_request") + DECODE_KEYS:
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ProfileError(f"profile {self.name!r}: coefficient {key}={value!r} must be a finite number >= 0")
        x, y = self.idle_prompt_tokens, self.idle_seconds
        if len(x) < 2 or len(x) != len(y):
            raise ProfileError(
                f"profile {self.name!r}: idle table needs >= 2 points of equal length, "
                f"got {len(x)} lengths and {len(y)} times"
            )
        if any(b <= a for a, b in zip(x, x[1:])) or x[0] < 1:
            raise ProfileError(f"profile {self.name!r}: idle prompt_tokens must be >= 1 and strictly increasing")
        if any(b < a for a, b in zip(y, y[1:])) or y[0] < 0:
            raise ProfileError(f"profile {self.name!r}: idle seconds must be >= 0 and non-decreasing")
        if self.budget_tokens < 1:
            raise ProfileError(f"profile {self.name!r}: budget_tokens={self.budget_tokens} must be >= 1")
        if self.a_s == self.b_s_per_token == self.k_s_per_pair == 0:
            raise ProfileError(f"profile {self.name!r}: a_s, b_s_per_token and k_s_per_pair are all 0: "
                               f"steps would take no time")
        if self.max_model_len is not None and (isinstance(self.max_model_len, bool) or self.max_model_len < 2):
            raise ProfileError(f"profile {self.name!r}: max_model_len={self.max_model_len!r} must be an integer >= 2")
        xs, ys = tuple(map(float, x)), tuple(map(float, y))
        # interp's slope of each segment, the same float operations (``_idle_time``).
        slopes = tuple((y1 - y0) / (x1 - x0) for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:]))
        object.__setattr__(self, "_idle_segments", (xs, ys, slopes))

    @property
    def kv_capacity_tokens(self) -> int | None:
        """KV cache capacity in tokens from ``kv_capacity`` (``KVCapacity.tokens``), or None."""
        return None if self.kv_capacity is None else self.kv_capacity.tokens

    # -- step time -------------------------------------------------------------------------------
    def step_time_from_sums(self, new_tokens: int, pair_sum: float, num_requests: int) -> float:
        """Step time (s) from pre-aggregated sums (the simulator's hot path).

        Args:
            new_tokens: ``sum(n_i)``, tokens computed in the step.
            pair_sum: ``sum(n_i * (k_i + n_i / 2))``, (new x context) token pairs.
            num_requests: Requests in the step.
        """
        return (
            self.a_s
            + self.b_s_per_token * new_tokens
            + self.k_s_per_pair * pair_sum
            + self.d_s_per_request * num_requests
        )

    def step_time_colocated(self, new_tokens: int, pair_sum: float, num_requests: int,
                            decodes: int, decode_ctx: int) -> float:
        """Step time (s) in colocated mode (the module docstring's colocated form, with the floor).

        Args:
            new_tokens, pair_sum, num_requests: As ``step_time_from_sums``, over the whole batch
                (a decoding sequence counts 1 new token on top of its context).
            decodes: Decoding sequences in the step (one generated token each).
            decode_ctx: Sum of their context tokens (tokens already in KV).
        """
        t = (
            self.a_s
            + self.b_s_per_token * new_tokens
            + self.k_s_per_pair * pair_sum
            + self.d_s_per_request * num_requests
            + self.f_s_per_decode * decodes
            + self.e_s_per_decode_ctx_token * decode_ctx
        )
        return t if t >= self.min_step_s else self.min_step_s

    def step_times_colocated(self, new_tokens: Any, pair_sum: Any, num_requests: Any,
                             decodes: Any, decode_ctx: Any) -> np.ndarray:
        """``step_time_colocated`` of many steps at once (s, float64 array of the arguments' shape).

        Arguments as ``step_time_colocated``, each a scalar or an array (broadcast). The same
        IEEE operations in the same order, so each entry equals the scalar method's float
        exactly (``tests/test_decode_fast.py`` checks it); keep the two in step. Used by the
        colocated engine's decode loop (``fairsim.sim.decode_fast``).
        """
        import numpy as np

        t = (
            self.a_s
            + self.b_s_per_token * new_tokens
            + self.k_s_per_pair * np.asarray(pair_sum, dtype=np.float64)
            + self.d_s_per_request * num_requests
            + self.f_s_per_decode * decodes
            + self.e_s_per_decode_ctx_token * np.asarray(decode_ctx, dtype=np.float64)
        )
        return np.where(t >= self.min_step_s, t, self.min_step_s)

    def step_time(self, batch: Iterable[tuple[int, int]]) -> float:
        """Time of one engine step, in seconds.

        Args:
            batch: ``(new_tokens, context_tokens)`` per scheduled request: ``n_i`` tokens computed
                this step on top of ``k_i`` tokens already in its KV cache.
        """
        n_sum = 0
        pairs = 0.0
        count = 0
        for n, k in batch:
            n_sum += n
            pairs += n * (k + n / 2)
            count += 1
        return self.step_time_from_sums(n_sum, pairs, count)

    def prefill_time(self, new_tokens: int, cached_tokens: int = 0, budget: int | None = None) -> float:
        """``T(c | h)``: seconds to compute ``new_tokens`` on top of ``cached_tokens``, alone.

        The prompt is chunked by ``budget`` (default: the profile's ``budget_tokens``), one chunk
        per step, each step costed by the model. Returns 0.0 for ``new_tokens <= 0``.
        """
        budget = budget or self.budget_tokens
        total = 0.0
        done = 0
        while done < new_tokens:
            n = min(budget, new_tokens - done)
            total += self.step_time_from_sums(n, n * (cached_tokens + done + n / 2), 1)
            done += n
        return total

    # -- T_idle ----------------------------------------------------------------------------------
    def idle_prefill_time(self, prompt_len: int) -> float:
        """``T_idle(L)``: seconds to prefill a cold ``prompt_len``-token prompt on an idle engine.

        Linear interpolation of the profile's table (monotone); below the first point it scales
        linearly to 0 at 0 tokens; beyond the last point it follows ``prefill_time(L)`` scaled to
        meet the table's last point. Memoised per length: the Fairway family and PEEK ask it for
        every distinct prompt length of a trace (thousands, each a cost on the hot path).

        Raises:
            ValueError: ``prompt_len < 1``.
        """
        t = self._idle_memo.get(prompt_len)
        if t is None:
            t = self._idle_memo[prompt_len] = self._idle_time(prompt_len)
        return t

    def _idle_time(self, prompt_len: int) -> float:
        if prompt_len < 1:
            raise ValueError(f"prompt_len={prompt_len} must be >= 1 token")
        x, y = self.idle_prompt_tokens, self.idle_seconds
        if prompt_len <= x[-1]:
            if prompt_len < x[0]:
                return float(float(y[0]) * prompt_len / float(x[0]))
            # ``interp(prompt_len, x, y)`` with its floats and slopes made once (the Fairway
            # family asks this once per distinct prompt length: thousands per trace).
            xs, ys, slopes = self._idle_segments
            j = bisect_right(x, prompt_len) - 1
            if j == len(x) - 1 or x[j] == prompt_len:
                return ys[j]
            out = slopes[j] * (float(prompt_len) - xs[j]) + ys[j]
            return out if out == out else interp(prompt_len, x, y)  # NaN: numpy's other ways
        last = int(x[-1])
        model_last = self.prefill_time(last)
        scale = float(y[-1]) / model_last if model_last > 0 else 1.0  # float64, as the table was
        return float(self.prefill_time(prompt_len) * scale)

    # -- (de)serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form written by ``save_profile`` (schema version 1).

        The decode coefficients are written only when one is non-zero, so a prefill-only profile
        keeps its original form."""
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "name": self.name,
            "kind": self.kind,
            "coefficients": {
                "a_s": self.a_s,
                "b_s_per_token": self.b_s_per_token,
                "k_s_per_pair": self.k_s_per_pair,
                "d_s_per_request": self.d_s_per_request,
            },
            "budget_tokens": self.budget_tokens,
            "idle_prefill": {
                "prompt_tokens": list(self.idle_prompt_tokens),
                "seconds": list(self.idle_seconds),
            },
        }
        if any(getattr(self, key) for key in DECODE_KEYS):
            out["coefficients"].update({key: getattr(self, key) for key in DECODE_KEYS})
        if self.kv_capacity is not None:
            out["kv_capacity"] = self.kv_capacity.to_dict()
        if self.max_model_len is not None:
            out["max_model_len"] = self.max_model_len
        out["metadata"] = self.metadata
        return out


class PrefillTimes:
    """``Profile.prefill_time(c, h)`` at the profile's budget: the same float, O(1) per call
    (``PrefillTimes(profile).prefill_time``).

    ``prefill_time`` adds one step time per chunk of at most ``B`` (budget) tokens, in order,
    from 0.0: for ``c = q x B + r`` new tokens on top of ``h`` cached ones, ``q`` full chunks
    (chunk ``j``: ``B`` tokens at context ``h + j x B``), then, when ``r > 0``, one of ``r``
    tokens at context ``h + q x B``. The running total after ``j`` full chunks depends on ``h``
    and ``j`` only, so it is kept per ``h`` (a list indexed by ``j``, extended when a longer
    prompt asks) and a call adds at most the last partial chunk's step to it. Why the float is
    the same: the kept totals are the loop's own partial sums (the same ``step_time_from_sums``
    calls with the same arguments, added in the same order from 0.0), and the last step is
    added to them as the loop adds it (``tests/test_prefill_times.py`` compares every value).

    PEEK asks ``T(c | h)`` for each new snapshot: on the conversation trace 22,707 distinct
    pairs of 22,727 calls (a memo of pairs never hits), about 7 chunks each, but only 155
    distinct ``h`` (multiples of the block size).

    Memory: one float per full chunk of the longest ``c`` asked at each distinct ``h``.

    Args:
        profile: The cost model; its ``budget_tokens`` is the chunk size (as ``prefill_time``
            with ``budget=None``).
    """

    __slots__ = ("_profile", "_budget", "_full")

    def __init__(self, profile: Profile) -> None:
        self._profile = profile
        self._budget = profile.budget_tokens
        self._full: dict[int, list[float]] = {}  # h -> running total after j full chunks, j = 0, 1, ...

    def prefill_time(self, new_tokens: int, cached_tokens: int = 0) -> float:
        """``T(c | h)`` in seconds: ``profile.prefill_time(new_tokens, cached_tokens)``; 0.0 for
        ``new_tokens <= 0``. Handed on as a bound method (``PrefillTimes(p).prefill_time``): a
        call through ``__call__`` costs several times a method's in CPython."""
        if new_tokens <= 0:
            return 0.0
        budget = self._budget
        q, r = divmod(new_tokens, budget)
        sums = self._full.get(cached_tokens)
        if sums is None:
            sums = self._full[cached_tokens] = [0.0]
        if len(sums) <= q:
            self._extend(sums, cached_tokens, q)
        total = sums[q]
        if r:
            total += self._profile.step_time_from_sums(r, r * (cached_tokens + q * budget + r / 2), 1)
        return total

    def _extend(self, sums: list[float], cached_tokens: int, q: int) -> None:
        """Running totals of the full chunks on top of ``cached_tokens`` up to ``q`` of them."""
        budget = self._budget
        step = self._profile.step_time_from_sums
        total = sums[-1]
        for j in range(len(sums) - 1, q):
            total += step(budget, budget * (cached_tokens + j * budget + budget / 2), 1)
            sums.append(total)


def model_idle_table(
    a_s: float, b_s_per_token: float, k_s_per_pair: float, d_s_per_request: float,
    lengths: Sequence[int], budget_tokens: int = 2048,
) -> list[float]:
    """``T_idle`` predicted by the cost model (chunked cold prefill alone), seconds per length.

    Used to build prior profiles, which have no measured table.
    """
    probe = Profile("probe", "prior", a_s, b_s_per_token, k_s_per_pair, d_s_per_request,
                    (1, 2), (0.0, 0.0), budget_tokens)
    return [probe.prefill_time(L) for L in lengths]


def save_profile(profile: Profile, path: str | Path, idle_table_tolerance: float | None = None) -> None:
    """Write ``profile`` as JSON (schema version 1) to ``path``, atomically (``fairsim.io``).

    Args:
        idle_table_tolerance: Written as the profile's own ``idle_table_tolerance`` when given
            (see ``IDLE_TABLE_TOLERANCE``).

    Raises:
        OutputError: The file cannot be written (the message names it).
    """
    from fairsim.io import atomic_write_text

    data = profile.to_dict()
    if idle_table_tolerance is not None:
        data["idle_table_tolerance"] = idle_table_tolerance
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def _require(d: dict[str, Any], key: str, where: str, source: str) -> Any:
    if not isinstance(d, dict):
        raise ProfileError(f"{source}: '{where.rstrip('.') or '<top level>'}' must be a JSON object")
    if key not in d:
        raise ProfileError(f"{source}: missing key '{where}{key}'")
    return d[key]


_TOP_KEYS = ("schema_version", "name", "kind", "coefficients", "budget_tokens", "idle_prefill", "metadata",
             "idle_table_tolerance", "kv_capacity", "max_model_len")


def _number(value: Any, key: str, source: str, unit: str) -> float:
    """``value`` as a finite float >= 0, else ``ProfileError`` naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProfileError(f"{source}: '{key}' must be a number ({unit}), got {json.dumps(value)}")
    try:
        float(value)
    except OverflowError:  # JSON integers are unbounded: one past a float's range
        raise ProfileError(f"{source}: '{key}' must be a finite number >= 0 ({unit}), got a whole number "
                           f"of {len(str(abs(value)))} digits") from None
    if not math.isfinite(value) or value < 0:
        raise ProfileError(f"{source}: '{key}' must be a finite number >= 0 ({unit}), got {value!r}")
    return float(value)


def check_idle_consistency(profile: Profile, source: str, tolerance: float | None = None) -> float:
    """Check the ``T_idle`` table against the profile's own cost model.

    At each table point ``L`` the relative gap is ``(T_idle(L) - prefill_time(L)) / prefill_time(L)``
    (``prefill_time``: chunked cold prefill at ``budget_tokens``, ``Profile.prefill_time``); points
    within ``IDLE_TABLE_SLACK_S`` seconds of the model count as agreeing.

    Args:
        profile: The profile.
        source: File named in the message.
        tolerance: Largest accepted ``|gap|`` (fraction); default ``IDLE_TABLE_TOLERANCE``.

    Returns:
        The worst ``|gap|`` over the table (fraction).

    Raises:
        ProfileError: The worst ``|gap|`` exceeds ``tolerance``; the message names the key, the
            worst point (tokens, table seconds, model seconds) and the tolerance.
    """
    tol = IDLE_TABLE_TOLERANCE if tolerance is None else tolerance
    worst, at = 0.0, None
    # Every point's cold prefill from one list of running totals (the same floats as
    # ``profile.prefill_time(L)``): a run loads its profile, and the loop over every point's
    # chunks (135 points up to 262,144 tokens in the shipped prior) was 2.7 ms of each load.
    prefill_time = PrefillTimes(profile).prefill_time
    for L, t in zip(profile.idle_prompt_tokens, profile.idle_seconds):
        model = prefill_time(L)
        if abs(t - model) <= IDLE_TABLE_SLACK_S:
            continue  # within the absolute slack (per-request overhead of a tiny prompt)
        gap = abs(t - model) / model if model > 0 else math.inf
        if gap > worst:
            worst, at = gap, (L, t, model)
    if worst > tol:
        L, t, model = at
        raise ProfileError(
            f"{source}: 'idle_prefill.seconds' disagrees with the profile's coefficients: at "
            f"{L} tokens the table says {t:.6g} s, the cost model {model:.6g} s ({100 * worst:.1f} % "
            f"apart, tolerance {100 * tol:.0f} %); the table and the coefficients describe different "
            f"engines. Recalibrate, fix the table, or state a wider 'idle_table_tolerance'")
    return worst


def profile_from_dict(data: dict[str, Any], source: str = "<dict>") -> Profile:
    """Build a ``Profile`` from its JSON form, validating every field.

    Raises:
        ProfileError: Unknown schema version; a missing or unknown key; a ``kind`` other than
            ``"prior"``/``"measured"``; a null, boolean, non-number, NaN,
            infinite or negative value where a number belongs; a ``T_idle`` table that is not
            two equal-length lists of >= 2 points with strictly increasing integer lengths >= 1
            and non-decreasing seconds; a table inconsistent with the coefficients beyond the
            tolerance (``check_idle_consistency``). The message names ``source`` and the key.
    """
    version = _require(data, "schema_version", "", source)
    if isinstance(version, bool) or version != SCHEMA_VERSION:  # (true == 1 in Python)
        raise ProfileError(f"{source}: schema_version={version!r}, this fairsim reads {SCHEMA_VERSION}")
    coeffs = _require(data, "coefficients", "", source)
    idle = _require(data, "idle_prefill", "", source)
    units = {"a_s": "s", "b_s_per_token": "s/token", "k_s_per_pair": "s/pair", "d_s_per_request": "s/request"}
    decode_units = {"e_s_per_decode_ctx_token": "s/token", "f_s_per_decode": "s/sequence", "min_step_s": "s"}
    # A misspelt key (e.g. "idle_table_tolerence") must not be ignored silently.
    for where, d, known in (("", data, _TOP_KEYS), ("coefficients.", coeffs, tuple(units) + DECODE_KEYS),
                            ("idle_prefill.", idle, ("prompt_tokens", "seconds"))):
        if isinstance(d, dict):
            unknown = sorted(set(d) - set(known))
            if unknown:
                raise ProfileError(f"{source}: unknown key '{where}{unknown[0]}'; known: {', '.join(known)}")
    values = {key: _number(_require(coeffs, key, "coefficients.", source), f"coefficients.{key}", source, unit)
              for key, unit in units.items()}
    for key, unit in decode_units.items():  # optional: profiles from before colocated mode lack them
        if key in coeffs:
            values[key] = _number(coeffs[key], f"coefficients.{key}", source, unit)
    lengths = _require(idle, "prompt_tokens", "idle_prefill.", source)
    seconds = _require(idle, "seconds", "idle_prefill.", source)
    if not isinstance(lengths, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in lengths):
        raise ProfileError(f"{source}: 'idle_prefill.prompt_tokens' must be a list of integers (tokens)")
    if not isinstance(seconds, list):
        raise ProfileError(f"{source}: 'idle_prefill.seconds' must be a list of numbers (s)")
    seconds = [_number(v, f"idle_prefill.seconds[{i}]", source, "s") for i, v in enumerate(seconds)]
    if len(lengths) < 2 or len(lengths) != len(seconds):
        raise ProfileError(f"{source}: 'idle_prefill' needs >= 2 points and as many seconds as "
                           f"prompt_tokens, got {len(lengths)} lengths and {len(seconds)} seconds")
    for i in range(len(lengths)):
        if lengths[i] > MAX_TOKENS:
            raise ProfileError(f"{source}: 'idle_prefill.prompt_tokens[{i}]'={lengths[i]}: lengths must be at "
                               f"most {MAX_TOKENS:,} tokens (vLLM keeps token positions in int32)")
        if lengths[i] < 1 or (i and lengths[i] <= lengths[i - 1]):
            raise ProfileError(f"{source}: 'idle_prefill.prompt_tokens[{i}]'={lengths[i]}: lengths must "
                               f"be >= 1 and strictly increasing")
        if i and seconds[i] < seconds[i - 1]:
            raise ProfileError(f"{source}: 'idle_prefill.seconds[{i}]'={seconds[i]!r} is below "
                               f"[{i - 1}]={seconds[i - 1]!r}: T_idle must not decrease with length")
    budget = data.get("budget_tokens", 2048)
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ProfileError(f"{source}: 'budget_tokens' must be an integer >= 1 (tokens), got {json.dumps(budget)}")
    if budget > MAX_TOKENS:
        raise ProfileError(f"{source}: 'budget_tokens' must be at most {MAX_TOKENS:,} tokens (vLLM's int32 step "
                           f"offsets, the bound of --budget), got {budget}")
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        raise ProfileError(f"{source}: 'metadata' must be a JSON object")
    tolerance = data.get("idle_table_tolerance")
    if tolerance is not None:
        tolerance = _number(tolerance, "idle_table_tolerance", source, "fraction")
        if tolerance <= 0:
            raise ProfileError(f"{source}: 'idle_table_tolerance' must be > 0, got {tolerance!r}")
    name = data.get("name", source)
    if not isinstance(name, str) or not name.strip():
        raise ProfileError(f"{source}: 'name' must be a non-empty string (the name printed and recorded for "
                           f"runs on this profile), got {json.dumps(name)}")
    kind = _require(data, "kind", "", source)
    if kind not in ("prior", "measured"):
        raise ProfileError(f"{source}: 'kind' must be \"prior\" or \"measured\", got {json.dumps(kind)}")
    kv_capacity = kv_capacity_from_dict(data["kv_capacity"], source) if "kv_capacity" in data else None
    max_model_len = data.get("max_model_len")
    if max_model_len is not None and (isinstance(max_model_len, bool) or not isinstance(max_model_len, int)):
        raise ProfileError(f"{source}: 'max_model_len' must be an integer number of tokens, got {max_model_len!r}")
    if max_model_len is not None and not 2 <= max_model_len <= MAX_TOKENS:  # (a prompt leaves one token)
        raise ProfileError(f"{source}: 'max_model_len' must be from 2 to {MAX_TOKENS:,} tokens, got {max_model_len!r}")
    try:
        profile = Profile(
            name=name,
            kind=kind,
            idle_prompt_tokens=tuple(lengths),
            idle_seconds=tuple(seconds),
            budget_tokens=budget,
            metadata=dict(metadata),
            kv_capacity=kv_capacity,
            max_model_len=max_model_len,
            **values,
        )
    except ProfileError as exc:
        raise ProfileError(f"{source}: {exc}") from exc
    check_idle_consistency(profile, source, tolerance)
    return profile


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's dict, refusing a key given twice (``json`` keeps the last silently, so a
    profile edited by hand could carry a figure nobody sees)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ProfileError(f"key {key!r} given twice in one object (json keeps the last without a word)")
        out[key] = value
    return out


def builtin_profiles() -> list[str]:
    """Names of the profiles shipped with fairsim (file stems in ``fairsim/profiles/``)."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def load_profile(name_or_path: str | Path = DEFAULT_PROFILE) -> Profile:
    """Load a profile by shipped name or by file path.

    Args:
        name_or_path: A name from ``builtin_profiles()`` or a path to a profile JSON file.

    Raises:
        ProfileError: The name is neither shipped nor an existing file, the file is not JSON, or
            it does not match the schema.
    """
    text = str(name_or_path)
    path = Path(text)
    if not path.is_file():
        shipped = PROFILE_DIR / f"{text}.json"
        if not shipped.is_file():
            what = "is a folder, not a profile JSON file" if path.is_dir() else "is neither a file nor a shipped profile"
            raise ProfileError(f"profile {text!r} {what}; shipped: {', '.join(builtin_profiles())}")
        path = shipped
    try:
        data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_no_repeated_keys)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg} (column {exc.colno}; reading it as a profile)") from exc
    except ProfileError as exc:  # (_no_repeated_keys)
        raise ProfileError(f"{path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path}: not UTF-8 text (a binary file?): {exc.reason}") from exc
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except ValueError:  # a whole number past Python's int digit limit (4,300 digits)
        raise ProfileError(f"{path}: a whole number of more digits than Python reads (at most "
                           f"{sys.get_int_max_str_digits():,}; reading it as a profile)") from None
    return profile_from_dict(data, source=str(path))
