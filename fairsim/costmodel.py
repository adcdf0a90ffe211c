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
by their file stem, any other by path.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fairsim.errors import ProfileError

SCHEMA_VERSION = 1
DECODE_KEYS = ("e_s_per_decode_ctx_token", "f_s_per_decode", "min_step_s")
"""Optional coefficients of the colocated (decode) form; 0 when a profile omits them."""
PROFILE_DIR = Path(__file__).parent / "profiles"
DEFAULT_PROFILE = "a6000-llama3.1-8b-vllm-prior"


@dataclass(frozen=True, slots=True)
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

    Raises:
        ProfileError: On a negative coefficient or a malformed ``T_idle`` table.
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
    e_s_per_decode_ctx_token: float = 0.0
    f_s_per_decode: float = 0.0
    min_step_s: float = 0.0
    _idle_x: Any = field(default=None, init=False, repr=False, compare=False)
    _idle_y: Any = field(default=None, init=False, repr=False, compare=False)

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
        object.__setattr__(self, "_idle_x", np.asarray(x, dtype=np.float64))
        object.__setattr__(self, "_idle_y", np.asarray(y, dtype=np.float64))

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
        meet the table's last point.

        Raises:
            ValueError: ``prompt_len < 1``.
        """
        if prompt_len < 1:
            raise ValueError(f"prompt_len={prompt_len} must be >= 1 token")
        x, y = self._idle_x, self._idle_y
        if prompt_len <= x[-1]:
            if prompt_len < x[0]:
                return float(y[0] * prompt_len / x[0])
            return float(np.interp(prompt_len, x, y))
        last = int(x[-1])
        model_last = self.prefill_time(last)
        scale = y[-1] / model_last if model_last > 0 else 1.0
        return float(self.prefill_time(prompt_len) * scale)

    # -- (de)serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form written by ``save_profile`` (schema version 1).

        The decode coefficients are written only when one is non-zero, so a prefill-only profile
        keeps its original form."""
        out = {
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
            "metadata": self.metadata,
        }
        if any(getattr(self, key) for key in DECODE_KEYS):
            out["coefficients"].update({key: getattr(self, key) for key in DECODE_KEYS})
        return out


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


def save_profile(profile: Profile, path: str | Path) -> None:
    """Write ``profile`` as JSON (schema version 1) to ``path``."""
    Path(path).write_text(json.dumps(profile.to_dict(), indent=2, sort_keys=False) + "\n")


def _require(d: dict[str, Any], key: str, where: str, source: str) -> Any:
    if not isinstance(d, dict) or key not in d:
        raise ProfileError(f"{source}: missing key '{where}{key}'")
    return d[key]


def profile_from_dict(data: dict[str, Any], source: str = "<dict>") -> Profile:
    """Build a ``Profile`` from its JSON form.

    Raises:
        ProfileError: Unknown schema version, or a missing/mistyped key (named in the message
            together with ``source``).
    """
    version = _require(data, "schema_version", "", source)
    if version != SCHEMA_VERSION:
        raise ProfileError(f"{source}: schema_version={version!r}, this fairsim reads {SCHEMA_VERSION}")
    coeffs = _require(data, "coefficients", "", source)
    idle = _require(data, "idle_prefill", "", source)
    values = {}
    for key in ("a_s", "b_s_per_token", "k_s_per_pair", "d_s_per_request"):
        value = _require(coeffs, key, "coefficients.", source)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProfileError(f"{source}: 'coefficients.{key}' must be a number, got {value!r}")
        values[key] = float(value)
    for key in DECODE_KEYS:  # optional: profiles from before colocated mode lack them
        if key in coeffs:
            value = coeffs[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ProfileError(f"{source}: 'coefficients.{key}' must be a number, got {value!r}")
            values[key] = float(value)
    lengths = _require(idle, "prompt_tokens", "idle_prefill.", source)
    seconds = _require(idle, "seconds", "idle_prefill.", source)
    if not isinstance(lengths, list) or not all(isinstance(v, int) for v in lengths):
        raise ProfileError(f"{source}: 'idle_prefill.prompt_tokens' must be a list of integers")
    if not isinstance(seconds, list) or not all(isinstance(v, (int, float)) for v in seconds):
        raise ProfileError(f"{source}: 'idle_prefill.seconds' must be a list of numbers")
    try:
        return Profile(
            name=str(data.get("name", source)),
            kind=str(_require(data, "kind", "", source)),
            idle_prompt_tokens=tuple(lengths),
            idle_seconds=tuple(float(v) for v in seconds),
            budget_tokens=int(data.get("budget_tokens", 2048)),
            metadata=dict(data.get("metadata", {})),
            **values,
        )
    except ProfileError as exc:
        raise ProfileError(f"{source}: {exc}") from exc


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
            raise ProfileError(
                f"profile {text!r} is neither a file nor a shipped profile; shipped: {', '.join(builtin_profiles())}"
            )
        path = shipped
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from exc
    return profile_from_dict(data, source=str(path))
