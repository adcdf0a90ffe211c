"""A team's own policy class, named ``package.module:Class`` instead of a registered name.

The class has the same contract as the shipped policies (``fairsim.policies.base.Policy``): an
``order(waiting, now)`` method returning a permutation of ``waiting``, optional capabilities by
attribute. It is built with the ``--param`` / ``"params"`` keyword arguments; if its constructor
takes a ``profile`` argument, it also gets the cost-model ``Profile`` (for ``T_idle(L)``:
``profile.idle_prefill_time``). Everything is checked when the policy is built, i.e. at start-up
of a simulation or of the vLLM hook, with one ``ValueError`` naming what is wrong.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fairsim.policies.base import Policy, param_text

if TYPE_CHECKING:  # (imported where used: a run that names no own class does without it)
    import inspect


def is_user_spec(name: str) -> bool:
    """True for ``package.module:Class`` (a colon; registered names have none)."""
    return ":" in name


def load_user_class(spec: str) -> type:
    """Import ``package.module:Class`` and return the class.

    Raises:
        ValueError: A malformed spec, a module that is not importable (or fails while importing),
            a missing attribute, or one that is not a class with a callable ``order``.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr or ":" in attr:
        raise ValueError(f"policy {spec!r}: expected package.module:Class")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name == exc.name or module_name.startswith(exc.name + ".")):  # a dependency it imports
            raise ValueError(f"policy {spec!r}: importing module {module_name!r} failed: "
                             f"ModuleNotFoundError: {exc}{_at(exc)}") from exc
        raise ValueError(f"policy {spec!r}: module {module_name!r} not found ({exc}); install it "
                         f"or put its folder on PYTHONPATH") from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed while importing: say how
        raise ValueError(f"policy {spec!r}: importing module {module_name!r} failed: "
                         f"{type(exc).__name__}: {exc}{_at(exc)}") from exc
    obj = module
    for part in attr.split("."):
        try:
            if not hasattr(obj, part):
                raise ValueError(f"policy {spec!r}: module {module_name!r} has no attribute {attr!r}")
            obj = getattr(obj, part)
        except ValueError:
            raise
        except Exception as exc:  # noqa: BLE001 - a module __getattr__ of the team's failed
            raise ValueError(f"policy {spec!r}: reading {attr!r} from module {module_name!r} failed: "
                             f"{type(exc).__name__}: {exc}{_at(exc)}") from exc
    if not isinstance(obj, type):
        raise ValueError(f"policy {spec!r}: {attr!r} is {_a(type(obj).__name__)}, not a class")
    if not callable(getattr(obj, "order", None)):
        raise ValueError(f"policy {spec!r}: class {attr!r} is not a policy: it has no "
                         f"order(waiting, now) method (fairsim.policies.base.Policy)")
    return obj


def _at(exc: BaseException) -> str:
    """`` (at FILE, line N)`` where the team's code raised ``exc`` (``failure.raised_at``), or ""."""
    from fairsim.policies.failure import raised_at

    where = raised_at(exc)
    return f" (at {where})" if where else ""


def user_params(cls: type) -> list[str]:
    """Keyword parameters the class's constructor accepts (``profile`` excluded)."""
    import inspect

    sig = inspect.signature(cls)
    return [p.name for p in sig.parameters.values() if p.name != "profile" and p.kind in
            (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]


def make_user_policy(spec: str, profile: Any = None, /, **params: Any) -> Policy:
    """Build the user's policy ``spec`` with ``params`` (and ``profile`` if it takes one).

    Returns:
        The instance; its ``name`` is set to ``spec`` when the class does not set one.

    Raises:
        ValueError: Anything ``load_user_class`` refuses, parameters the constructor does not
            take (listing those it does), a missing required parameter, a constructor given
            ``params`` that raises ``ValueError``/``TypeError`` (on the values given), an
            ``order`` (``on_admitted``, ``on_prefill_tokens``) that cannot be called as
            ``order(waiting, now)`` (``on_admitted(admitted, now)``, ``on_prefill_tokens(total)``),
            or an ``admission_limit`` that is neither None nor a whole number >= 1.
        PolicyError: The constructor raised anything else, or anything with no ``params``
            given (the policy's own code failed, exit 1 as for ``order()``; the original is its
            ``__cause__``). Both messages say where the team's code raised it.
    """
    import inspect

    cls = load_user_class(spec)
    sig = inspect.signature(cls)
    kwargs = dict(params)
    if "profile" in sig.parameters:
        if "profile" in params:
            raise ValueError(f"policy {spec!r}: 'profile' comes from --profile, not from --param")
        kwargs["profile"] = profile
    try:
        sig.bind(**kwargs)
    except TypeError as exc:
        raise ValueError(f"policy {spec!r}: bad parameters {params} ({exc}); accepted: "
                         f"{', '.join(user_params(cls)) or 'none'}") from None
    for key, value in params.items():
        wanted = _kind_of(sig.parameters[key]) if key in sig.parameters else None
        if wanted is not None and not _is_kind(value, wanted):
            raise ValueError(f"--param {key}={param_text(value)}: policy {spec!r} takes {wanted} there "
                             f"({_declared(sig.parameters[key])})")
    try:
        policy = cls(**kwargs)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the team's code failed: name it as such
        from fairsim.errors import PolicyError
        from fairsim.policies.failure import raised_at

        where = raised_at(exc, cls)
        if params and isinstance(exc, (TypeError, ValueError)):  # (its check of the --param values)
            raise ValueError(f"policy {spec!r}: constructor refused {params}: {exc}"
                             f"{f' (at {where})' if where else ''}") from exc
        raise PolicyError(spec, cls.__name__, type(exc).__name__, str(exc), where) from exc
    for method in _CALLS:
        check_callable_as(spec, policy, method)
    check_admission_limit(spec, policy)
    check_eviction_hook(spec, policy)
    if not isinstance(getattr(policy, "name", None), str):
        try:
            policy.name = spec
        except AttributeError:  # __slots__ without name: the tables use the spec anyway
            pass
    return policy


def _a(noun: str) -> str:
    """``noun`` with its indefinite article (``an object``, ``a float``), by its first letter."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


_NUMBER, _WHOLE, _BOOL = "a finite number", "a whole number", "true or false"
#: The kinds an annotation declares: ``int`` takes whole numbers only (``--param k=2.5`` would
#: reach a count or an index as a float), as the shipped policies' integer parameters do.
_KINDS = {float: _NUMBER, int: _WHOLE, bool: _BOOL, "float": _NUMBER, "int": _WHOLE, "bool": _BOOL}
#: The kinds a default's type declares: a default of ``5`` says a number, not that ``2.5`` is
#: wrong (``alpha=1`` is often meant as a weight).
_DEFAULT_KINDS = {float: _NUMBER, int: _NUMBER, bool: _BOOL}
#: The kinds that also take ``null`` (``None``): an ``Optional[...]`` / ``X | None`` annotation,
#: spelt ``null`` as for the shipped policies' optional parameters (``suf``'s
#: ``starvation_iterations=null``).
_OR_NULL = {kind: f"{kind} or null" for kind in (_NUMBER, _WHOLE, _BOOL)}


def _annotated(param: inspect.Parameter) -> str | None:
    """The kind a parameter's annotation names (``float``, ``int``, ``bool``, any of them
    ``Optional[...]`` or ``... | None``, also as strings under ``from __future__ import
    annotations``), else None."""
    import typing

    ann = param.annotation
    if isinstance(ann, str):
        return _annotated_text(ann)
    args = typing.get_args(ann)
    if typing.get_origin(ann) is not None and type(None) in args:  # Optional[X], X | None
        rest = [a for a in args if a is not type(None)]
        kind = _KINDS.get(rest[0]) if len(rest) == 1 and isinstance(rest[0], type) else None
        return _OR_NULL[kind] if kind is not None else None
    try:
        return _KINDS.get(ann)
    except TypeError:  # an unhashable annotation: declares nothing we check
        return None


def _annotated_text(text: str) -> str | None:
    """``_annotated`` for an annotation kept as text: ``"int"``, ``"int | None"``,
    ``"Optional[int]"`` (``typing.`` prefixes allowed), ``"Union[int, None]"``; else None (any
    other text, e.g. ``"list[int] | None"``, declares nothing we check)."""
    # (quotes: a quoted annotation under ``from __future__ import annotations`` is kept quoted)
    text = text.replace(" ", "").replace("typing.", "").strip("'\"")
    for prefix in ("Optional[", "Union["):
        if text.startswith(prefix) and text.endswith("]"):
            text = text[len(prefix):-1] + ("|None" if prefix == "Optional[" else "")
            break
    parts = [p for p in text.replace(",", "|").split("|") if p]
    names = [p for p in parts if p != "None"]
    if len(names) != 1:
        return None
    kind = _KINDS.get(names[0])
    return _OR_NULL[kind] if kind is not None and len(parts) > 1 else kind


def _kind_of(param: inspect.Parameter) -> str | None:
    """What a constructor parameter declares it takes, by its annotation or else its default's
    type: ``_NUMBER``, ``_WHOLE`` (annotated ``int`` only), ``_BOOL`` (or any ``_OR_NULL``), or None when it declares neither
    (any value goes)."""
    import inspect

    kind = _annotated(param)
    if kind is None and param.default is not inspect.Parameter.empty:
        kind = _DEFAULT_KINDS.get(type(param.default))
    return kind


def _is_kind(value: Any, kind: str) -> bool:
    """``value`` (as ``parse_params`` read it) is a ``kind``: a finite number that is not a bool
    (JSON reads ``1e400`` as infinity, and ``NaN``/``Infinity`` too), an int that is not a bool
    (``2.5`` and ``3.0`` are not), or a bool; ``None`` where the kind takes null."""
    import math
    import sys

    if value is None:
        return kind in _OR_NULL.values()
    if kind in (_BOOL, _OR_NULL[_BOOL]):
        return isinstance(value, bool)
    if kind in (_WHOLE, _OR_NULL[_WHOLE]):
        return isinstance(value, int) and not isinstance(value, bool)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    # (a whole number beyond the float range, JSON's reading of 1 and 400 zeros, is not finite
    # either: math.isfinite would raise OverflowError on it)
    return abs(value) <= sys.float_info.max if isinstance(value, int) else math.isfinite(value)


def _declared(param: inspect.Parameter) -> str:
    """How a parameter declared its kind, for the message: ``default 5.0`` or ``float``."""
    if _annotated(param) is not None:
        ann = param.annotation
        return f"declared {ann.__name__ if isinstance(ann, type) else ann}"
    return f"default {param.default!r}"


#: The methods the engines call on a policy, with the arguments they pass
#: (``fairsim/policies/base.py``); all but ``order`` are optional.
_CALLS = {"order": ("waiting", "now"), "on_admitted": ("admitted", "now"),
          "on_prefill_tokens": ("total",)}


def check_callable_as(spec: str, policy: Any, method: str) -> None:
    """Refuse (``ValueError``) a ``method`` of ``policy`` (one of ``_CALLS``) that cannot be
    called with the engine's positional arguments (``order(waiting, now)``, ``on_admitted(admitted,
    now)``, ``on_prefill_tokens(total)``: ``fairsim/policies/base.py``); a missing optional one is
    fine, and a callable whose signature Python cannot read is taken as it is."""
    names = _CALLS[method]
    call = f"{method}({', '.join(names)})"
    fn = getattr(policy, method, None)
    if fn is None:
        return
    if not callable(fn):
        raise ValueError(f"policy {spec!r}: {method} is {_a(type(fn).__name__)}, not a method "
                         f"{call} (fairsim/policies/base.py)")
    _refuse_unbindable(spec, fn, (0,) if method == "on_prefill_tokens" else ([], 0.0), method, call,
                       "fairsim/policies/base.py")


def check_admission_limit(spec: str, policy: Any) -> None:
    """Refuse (``ValueError``) an ``admission_limit`` that is neither ``None`` (no limit) nor a
    whole number >= 1 (``fairsim/policies/base.py``): the engines slice the order with it, and 0
    would admit nothing while requests wait. A policy's ``order()`` may change it later (Preble's)."""
    from fairsim.policies.base import ADMISSION_LIMIT_RULE, valid_admission_limit

    limit = _attribute(spec, policy, "admission_limit")
    if not valid_admission_limit(limit):
        raise ValueError(f"policy {spec!r}: admission_limit is {limit!r} ({type(limit).__name__}); "
                         f"{ADMISSION_LIMIT_RULE}")


def check_eviction_hook(spec: str, policy: Any) -> None:
    """Refuse (``ValueError``) an ``eviction_hook`` that is neither ``None`` nor an object whose
    ``select`` can be called as ``select(pool, n)`` (``fairsim/policies/eviction.py``): a class
    given for an instance (its ``select`` would take the pool for ``self``), an object without a
    ``select``, or one whose signature cannot take the two arguments. Checked when the policy is
    made, so a mistake is one line before any policy runs; a ``select`` whose signature Python
    cannot read is taken as it is."""
    hook = _attribute(spec, policy, "eviction_hook")
    if hook is None:
        return
    where = "(fairsim/policies/eviction.py)"
    if isinstance(hook, type):
        raise ValueError(f"policy {spec!r}: eviction_hook is the class {hook.__name__}; give an instance "
                         f"({hook.__name__}(...)), whose select(pool, n) the block pool calls {where}")
    select = getattr(hook, "select", None)
    if not callable(select):
        raise ValueError(f"policy {spec!r}: eviction_hook {hook!r} ({type(hook).__name__}) has no select(pool, n) "
                         f"method; it must be None or an eviction hook {where}")
    _refuse_unbindable(spec, select, (None, 1), "eviction_hook's select", "select(pool, n)",
                       "fairsim/policies/eviction.py")


def _attribute(spec: str, policy: Any, name: str) -> Any:
    """``getattr(policy, name, None)``; a property of the team's that raises is the policy's
    own failure (``PolicyError``, exit 1, naming where it raised), not fairsim's."""
    try:
        return getattr(policy, name, None)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the team's code failed: name it as such
        from fairsim.errors import PolicyError
        from fairsim.policies.failure import raised_at

        raise PolicyError(spec, type(policy).__name__, type(exc).__name__, str(exc),
                          raised_at(exc, type(policy))) from exc


def _refuse_unbindable(spec: str, fn: Any, args: tuple, what: str, call: str, source: str) -> None:
    """Refuse (``ValueError``) a callable that cannot take ``args`` as the engines pass them,
    naming ``what`` with its signature and ``call``; one whose signature Python cannot read is
    taken as it is."""
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(*args)
    except TypeError as exc:
        raise ValueError(f"policy {spec!r}: {what}{sig} cannot be called as {call} ({exc}; {source})") from None
