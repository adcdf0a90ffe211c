"""Search spaces of policy parameters, declared in each policy's own class (``fairsim tune``).

A policy class declares the parameters worth searching, with their range and scale, as a class
attribute set on the class itself (not inherited, so a subclass that adds parameters is never
searched over its parent's alone without saying so)::

    class Fairway:
        search_space = {
            "fast_weight": FloatRange(1.0, 32.0, log=True),
            "slo_multiplier": FloatRange(0.5, 20.0, log=True),
        }

``search_space = {}`` says the policy has nothing worth searching (switches that define a
variant). A class without the attribute is searched over none of its parameters and
``space_of`` returns a note saying so. A registered variant's fixed parameters (``klpm4``'s
``k``, ``fairsim.policies.catalog.FIXED``) are left out of its space.

Pure module: no optuna import (``fairsim.tune`` turns a space into Optuna distributions).
"""

from __future__ import annotations

import json
import math
from typing import Any, Union

from fairsim.record import record

#: Name of the class attribute holding a policy's search space.
ATTRIBUTE = "search_space"


@record(frozen=True)
class FloatRange:
    """A real parameter in ``[low, high]``; ``log``: searched on a log scale (both > 0)."""

    low: float
    high: float
    log: bool = False

    def check(self, where: str) -> None:
        """Raises ValueError (naming ``where``) for an empty or non-finite range, or log with low <= 0."""
        _check_bounds(where, self.low, self.high, self.log)

    def describe(self) -> str:
        return f"{self.low:g}..{self.high:g}{' log' if self.log else ''}"


@record(frozen=True)
class IntRange:
    """An integer parameter in ``[low, high]`` (both included); ``log``: log scale (low >= 1)."""

    low: int
    high: int
    log: bool = False

    def check(self, where: str) -> None:
        """Raises ValueError (naming ``where``) for an empty range, non-integer bounds, or log with low < 1."""
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (self.low, self.high)):
            raise ValueError(f"{where}: integer range needs integer bounds, got {self.low!r}..{self.high!r}")
        _check_bounds(where, self.low, self.high, self.log)

    def describe(self) -> str:
        return f"{self.low}..{self.high} int{' log' if self.log else ''}"


def same_value_key(value: Any) -> str:
    """A key equal for two values that make one run: whole numbers read as floats at any depth
    (``4`` and ``4.0`` one key), ``true`` and ``1`` two. For a JSON value (a ``Choice`` value, a
    sweep grid's). A whole number beyond the float range keeps its digits."""
    def same(v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2 ** 1000:
            return float(v)
        if isinstance(v, list):
            return [same(x) for x in v]
        if isinstance(v, dict):
            return {k: same(x) for k, x in v.items()}
        return v

    return json.dumps(same(value), sort_keys=True)


@record(frozen=True)
class Choice:
    """A parameter taking one of ``values`` (JSON scalars: bool, number, string, null)."""

    values: tuple[Any, ...]

    def check(self, where: str) -> None:
        """Raises ValueError (naming ``where``) for no values, repeats (``4`` and ``4.0`` are one
        value), or a non-scalar value."""
        if not self.values:
            raise ValueError(f"{where}: empty choice; give at least one value")
        for v in self.values:
            if v is not None and not isinstance(v, (bool, int, float, str)):
                raise ValueError(f"{where}: choice values must be numbers, strings, true/false or null, got {v!r}")
        if len(set(map(same_value_key, self.values))) != len(self.values):
            raise ValueError(f"{where}: a value given twice in {list(self.values)}")

    def describe(self) -> str:
        return "|".join(_json_scalar(v) for v in self.values)


Range = Union[FloatRange, IntRange, Choice]


def _check_bounds(where: str, low: float, high: float, log: bool) -> None:
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"{where}: range {low!r}..{high!r} needs finite bounds")
    if not low <= high:
        raise ValueError(f"{where}: empty range {low:g}..{high:g} (low above high)")
    if log and not low > 0:
        raise ValueError(f"{where}: log-scale range {low:g}..{high:g} needs low > 0")


def _json_scalar(v: Any) -> str:
    return {True: "true", False: "false", None: "null"}.get(v, str(v)) if not isinstance(v, (int, float)) \
        or isinstance(v, bool) else f"{v:g}"


def declared_space(cls: type) -> dict[str, Range] | None:
    """The ``search_space`` a class declares itself (not inherited), or None when it declares none."""
    return cls.__dict__.get(ATTRIBUTE)


def space_of(name: str, cls: type, accepted: list[str], fixed: dict[str, Any]) -> tuple[dict[str, Range], str | None]:
    """The searchable parameters of policy ``name`` and a note when it declares none.

    Args:
        name: The policy's registered name (or ``package.module:Class``).
        cls: Its class.
        accepted: The keyword parameters it accepts (``registry.accepted_params``).
        fixed: Parameters its name fixes (left out of the space).

    Raises:
        ValueError: A declaration that is not a dict of ranges, a declared parameter the policy
            does not accept, or a bad range (the message names the class and parameter: a bug in
            the declaration).
    """
    declared = declared_space(cls)
    if declared is None:
        if not accepted:
            return {}, None
        return {}, (f"policy {name!r} ({cls.__name__}) declares no {ATTRIBUTE}: tuned at its defaults "
                    f"(parameters {', '.join(accepted)} not searched; add a {ATTRIBUTE} class attribute, "
                    f"fairsim/policies/space.py)")
    if not isinstance(declared, dict):
        raise ValueError(f"{cls.__name__}.{ATTRIBUTE} is {declared!r}: need a dict of parameter -> FloatRange, "
                         f"IntRange or Choice (fairsim/policies/space.py)")
    for key, rng in declared.items():
        if not isinstance(rng, (FloatRange, IntRange, Choice)):
            raise ValueError(f"{cls.__name__}.{ATTRIBUTE}[{key!r}] is {rng!r}: need a FloatRange, IntRange or "
                             f"Choice (fairsim/policies/space.py), e.g. FloatRange(1.0, 8.0)")
        if key not in accepted:
            raise ValueError(f"{cls.__name__}.{ATTRIBUTE}: {key!r} is not a parameter of policy {name!r}; "
                             f"accepted: {', '.join(accepted) or 'none'}")
        rng.check(f"{cls.__name__}.{ATTRIBUTE}[{key!r}]")
    return {k: v for k, v in declared.items() if k not in fixed}, None


def parse_range(text: str, where: str) -> Range:
    """``"1:16"``, ``"1:16:log"``, ``"1:64:int"``, ``"1:64:int:log"`` or ``"a|b|c"`` -> a range.

    A value with ``|`` is a choice (values read as JSON when they parse, else strings); a
    single value without ``:`` is a one-value choice (the parameter fixed).

    Raises:
        ValueError: A malformed range or an empty one (low above high), naming ``where``.
    """
    import json

    def scalar(s: str) -> Any:
        try:
            return json.loads(s)
        except json.JSONDecodeError:
            return s

    if "|" in text or ":" not in text:
        rng: Range = Choice(tuple(scalar(s) for s in text.split("|")))
    else:
        lo, _, rest = text.partition(":")
        hi, _, flags_text = rest.partition(":")
        flags = set(flags_text.split(":")) - {""}
        if flags - {"log", "int"}:
            raise ValueError(f"{where}: unknown flag(s) {sorted(flags - {'log', 'int'})}; expected "
                             f"LOW:HIGH[:int][:log] or A|B|C")
        try:
            low, high = (int(lo), int(hi)) if "int" in flags else (float(lo), float(hi))
        except ValueError:
            raise ValueError(f"{where}: expected LOW:HIGH[:int][:log] with numbers, got {text!r}") from None
        rng = (IntRange if "int" in flags else FloatRange)(low, high, "log" in flags)
    rng.check(where)
    return rng
