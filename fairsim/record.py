"""Value classes that behave as ``dataclasses.dataclass`` ones, without its start-up cost.

``dataclasses.dataclass`` writes each class's methods as source text and compiles it while the
module imports: six ``exec`` calls a frozen class, and its ``__repr__``'s f-string parses every
field's expression again (CPython 3.11); and ``dataclasses`` imports ``inspect`` (with ``ast``,
``dis`` and ``tokenize``). For the 16 value classes a ``fairsim run`` imports, that was about
85 M instructions: 30 % of a 20-request run, 9 % of a run on an Azure trace (callgrind;
docs/performance.md, "Start-up without the dataclass decorator"). ``record`` builds the same
methods from closures, with no source text:

* ``__init__`` with the dataclass's parameters (its fields with ``init=True``, in order, with
  their defaults and ``default_factory``), then the ``init=False`` fields, then
  ``__post_init__``; a class that defines its own ``__init__`` keeps it (as ``dataclass`` does);
* ``__repr__`` (``Name(a=1, b='x')``, the ``repr=True`` fields), ``__eq__`` (the same class and
  equal tuples of the ``compare=True`` fields), ``__hash__`` by the dataclass rule (frozen: the
  hash of those fields, or those with ``hash=True``; not frozen: unhashable), each kept where the
  class defines it;
* ``frozen``: assignment and deletion raise ``dataclasses.FrozenInstanceError``; ``slots``: a new
  class with ``__slots__`` (and pickling of frozen slotted instances), as ``dataclass`` makes it;
* ``__match_args__``.

Such a class is a dataclass to the standard library: ``dataclasses.fields``, ``replace``,
``asdict`` and ``is_dataclass`` read its ``__dataclass_fields__`` and ``__dataclass_params__``,
and ``inspect.signature(cls)`` its ``__signature__``, which are made at their first use by
``dataclasses.dataclass`` itself, on a copy of the class's field declarations (so the ``Field``
objects are the standard library's own); a subclass (``@dataclass`` on it too) pickles with its
own fields and has its own signature. A generated ``__init__`` read alone
(``inspect.signature(cls.__init__)``) shows ``(self, *args, **kwargs)``. A run reads its
records through ``field_names`` and ``replace`` below and never imports
``dataclasses``. ``tests/test_record.py`` compares every record class with the dataclass of
the same declarations: signature, repr, equality, hash, freezing, pickling and ``fields``.

Supported: plain fields with or without defaults, ``field(default=..., default_factory=...,
init=..., repr=..., compare=..., hash=...)``, ``frozen``, ``slots``, ``__post_init__``, a base of
``object``. Refused (``TypeError`` at class creation): bases, ``ClassVar``/``InitVar``/``KW_ONLY``
declarations, a mutable default (as ``dataclass`` refuses it: ``ValueError``).
"""

from __future__ import annotations

from reprlib import recursive_repr
from typing import Any, Callable

__all__ = ["MISSING", "Field", "field", "field_names", "fields_of", "record", "replace"]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


#: No default (``dataclasses.MISSING``'s role; converted to it for the standard library's view).
MISSING: Any = _Missing()
#: A parameter not given whose field has a ``default_factory`` (``__init__``'s marker).
_FACTORY: Any = _Missing()


class Field:
    """One field's declaration: what ``dataclasses.field`` takes, and the field's name.

    Attributes:
        name: The field's name (set by ``record``).
        type: Its annotation, as written (a string under ``from __future__ import annotations``).
        default, default_factory, init, repr, compare, hash: As ``dataclasses.field``'s.
    """

    __slots__ = ("name", "type", "default", "default_factory", "init", "repr", "compare", "hash")

    def __init__(self, default: Any = MISSING, default_factory: Any = MISSING, init: bool = True,
                 repr: bool = True, compare: bool = True, hash: bool | None = None) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name: str = ""
        self.type: Any = None
        self.default = default
        self.default_factory = default_factory
        self.init = init
        self.repr = repr
        self.compare = compare
        self.hash = hash

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r}, default_factory={self.default_factory!r})"


def field(*, default: Any = MISSING, default_factory: Callable[[], Any] | Any = MISSING, init: bool = True,
          repr: bool = True, compare: bool = True, hash: bool | None = None) -> Any:
    """A field declaration with options, as ``dataclasses.field`` (the same keywords).

    Raises:
        ValueError: Both ``default`` and ``default_factory`` given.
    """
    return Field(default, default_factory, init, repr, compare, hash)


def record(cls: type | None = None, /, *, frozen: bool = False, slots: bool = False) -> Any:
    """Make ``cls`` a value class, as ``@dataclass(frozen=frozen, slots=slots)`` would (see the
    module's docstring for what is made and what is refused).

    Returns the class (with ``slots``, a new class, as ``dataclass`` returns).

    Raises:
        TypeError: A base class, a ``ClassVar``/``InitVar``/``KW_ONLY`` declaration, a field
            without a default after one with a default, or (``frozen``) a class that defines
            ``__setattr__``/``__delattr__``.
        ValueError: A mutable (unhashable) plain default.
    """
    def wrap(c: type) -> type:
        return _process(c, frozen, slots)

    return wrap if cls is None else wrap(cls)


# -- reading a record's fields without the standard library's view ------------------------------

def fields_of(cls_or_obj: Any) -> tuple[Field, ...]:
    """The declarations of a record class (or instance), in order: ``dataclasses.fields``'s
    order, without importing ``dataclasses``.

    Raises:
        TypeError: Not a record.
    """
    cls = cls_or_obj if isinstance(cls_or_obj, type) else type(cls_or_obj)
    try:
        return cls.__record_fields__
    except AttributeError:
        raise TypeError(f"{cls.__qualname__} is not a record") from None


def field_names(cls_or_obj: Any) -> tuple[str, ...]:
    """The names of a record's fields, in order (``[f.name for f in dataclasses.fields(x)]``)."""
    return tuple(f.name for f in fields_of(cls_or_obj))


def replace(obj: Any, /, **changes: Any) -> Any:
    """``dataclasses.replace(obj, **changes)`` for a record: a new instance built by its
    ``__init__`` from ``obj``'s ``init`` fields and ``changes`` (so ``__post_init__`` runs again).

    Raises:
        ValueError: A change names an ``init=False`` field (``dataclasses.replace``'s message).
        TypeError: A change names no field (from ``__init__``).
    """
    for f in fields_of(obj):
        if not f.init:
            if f.name in changes:
                raise ValueError(f"field {f.name} is declared with init=False, it cannot be specified with replace()")
            continue
        if f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    return obj.__class__(**changes)


# -- building the class --------------------------------------------------------------------------

_REFUSED_ANNOTATIONS = ("ClassVar", "InitVar", "KW_ONLY")


def _declarations(cls: type) -> list[Field]:
    if cls.__bases__ != (object,):
        raise TypeError(f"record {cls.__qualname__}: a base class is not supported")
    out: list[Field] = []
    seen_default = False
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        text = (annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))).strip("'\" ")
        if any(text == word or text.startswith((word + "[", "typing." + word, "dataclasses." + word))
               for word in _REFUSED_ANNOTATIONS):
            raise TypeError(f"record {cls.__qualname__}.{name}: {text} is not supported")
        declared = cls.__dict__.get(name, MISSING)
        f = declared if isinstance(declared, Field) else Field(default=declared)
        f.name, f.type = name, annotation
        if f.default is not MISSING and type(f.default).__hash__ is None:
            raise ValueError(f"mutable default {type(f.default)} for field {name} is not allowed: use default_factory")
        if f.init:
            if f.default is MISSING and f.default_factory is MISSING:
                if seen_default:
                    raise TypeError(f"non-default argument {name!r} follows default argument")
            else:
                seen_default = True
        out.append(f)
    return out


def _process(cls: type, frozen: bool, slots: bool) -> type:
    decls = _declarations(cls)
    names = tuple(f.name for f in decls)
    own = cls.__dict__
    explicit_hash = own.get("__hash__", MISSING)
    has_explicit_hash = not (explicit_hash is MISSING or (explicit_hash is None and "__eq__" in own))
    if frozen and ("__setattr__" in own or "__delattr__" in own):
        raise TypeError(f"Cannot overwrite attribute __setattr__ or __delattr__ in class {cls.__name__}")
    if slots:
        if "__slots__" in own:
            raise TypeError(f"{cls.__name__} already specifies __slots__")
        body = dict(own)
        body["__slots__"] = names
        for name in names:
            body.pop(name, None)
        body.pop("__dict__", None)
        body.pop("__weakref__", None)
        qualname = cls.__qualname__
        cls = type(cls)(cls.__name__, cls.__bases__, body)
        cls.__qualname__ = qualname
    else:
        # As dataclass leaves them: a plain default stays a class attribute; a ``field(...)``
        # gives way to its default, or to nothing.
        for f in decls:
            if isinstance(own.get(f.name), Field):
                if f.default is MISSING:
                    delattr(cls, f.name)
                else:
                    setattr(cls, f.name, f.default)
    own = cls.__dict__
    cls.__record_fields__ = tuple(decls)
    cls.__record_frozen__ = frozen
    cls.__dataclass_fields__ = _StdlibView("__dataclass_fields__")
    cls.__dataclass_params__ = _StdlibView("__dataclass_params__")
    if "__init__" not in own:
        cls.__init__ = _make_init(cls, decls, frozen)
    # ``inspect.signature(cls)`` (and ``help``) read it: the dataclass's, made at first use (a
    # written-out ``__init__`` takes the same parameters: tests/test_record.py).
    cls.__signature__ = _StdlibView("__signature__")
    if "__repr__" not in own:
        cls.__repr__ = _make_repr(cls, decls)
    if "__eq__" not in own:
        cls.__eq__ = _make_eq(cls, decls)
    if not has_explicit_hash:
        cls.__hash__ = _make_hash(cls, decls) if frozen else None
    if frozen:
        cls.__setattr__, cls.__delattr__ = _make_frozen(cls, names)
        if slots:
            cls.__getstate__, cls.__setstate__ = _getstate, _setstate
    if "__match_args__" not in own:
        cls.__match_args__ = tuple(f.name for f in decls if f.init)
    return cls


def _named(cls: type, fn: Any, name: str) -> Any:
    fn.__name__ = name
    fn.__qualname__ = f"{cls.__qualname__}.{name}"
    fn.__module__ = cls.__module__
    return fn


def _missing_message(qualname: str, missing: list[str]) -> str:
    # CPython's own wording for a call missing positional arguments.
    quoted = [repr(m) for m in missing]
    if len(quoted) == 1:
        listed = quoted[0]
    elif len(quoted) == 2:
        listed = f"{quoted[0]} and {quoted[1]}"
    else:
        listed = ", ".join(quoted[:-1]) + f", and {quoted[-1]}"
    plural = "argument" if len(missing) == 1 else "arguments"
    return f"{qualname}() missing {len(missing)} required positional {plural}: {listed}"


def _make_init(cls: type, decls: list[Field], frozen: bool) -> Any:
    params = [f for f in decls if f.init]
    names = tuple(f.name for f in params)
    n = len(names)
    index = {name: i for i, name in enumerate(names)}
    # Each parameter's value when not given: the default, _FACTORY (made by its factory), or
    # MISSING. Fields without defaults come first (``_declarations`` checks it), so the
    # required ones are the first ``required``.
    template = [MISSING if f.default is MISSING and f.default_factory is MISSING
                else _FACTORY if f.default_factory is not MISSING else f.default for f in params]
    required = sum(1 for v in template if v is MISSING)
    factories = tuple((i, f.default_factory) for i, f in enumerate(params) if f.default_factory is not MISSING)
    later = tuple((f.name, f.default, f.default_factory) for f in decls if not f.init)
    qualname = f"{cls.__qualname__}.__init__"
    # CPython's wording for too many positional arguments (``self`` counted).
    takes = (f"from {required + 1} to {n + 1} positional arguments" if required < n
             else f"{n + 1} positional argument" + ("s" if n else ""))
    set_field = object.__setattr__ if frozen else setattr
    post_init = hasattr(cls, "__post_init__")

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        # The checks in CPython's order: keywords, then too many positional, then missing.
        given = len(args)
        vals = [*args[:n], *template[given:]]
        for key, value in kwargs.items():
            i = index.get(key)
            if i is None:
                if key == "self":
                    raise TypeError(f"{qualname}() got multiple values for argument 'self'")
                raise TypeError(f"{qualname}() got an unexpected keyword argument {key!r}")
            if i < given:
                raise TypeError(f"{qualname}() got multiple values for argument {key!r}")
            vals[i] = value
        if given > n:
            raise TypeError(f"{qualname}() takes {takes} but {given + 1} were given")
        if given < required:
            missing = [names[i] for i in range(given, required) if vals[i] is MISSING]
            if missing:
                raise TypeError(_missing_message(qualname, missing))
        for i, make in factories:
            if vals[i] is _FACTORY:
                vals[i] = make()
        for name, value in zip(names, vals):
            set_field(self, name, value)
        for name, default, factory in later:
            if factory is not MISSING:
                set_field(self, name, factory())
            elif default is not MISSING:
                set_field(self, name, default)
        if post_init:
            self.__post_init__()

    return _named(cls, __init__, "__init__")


def _make_repr(cls: type, decls: list[Field]) -> Any:
    shown = tuple(f.name for f in decls if f.repr)

    @recursive_repr("...")
    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{self.__class__.__qualname__}({inner})"

    return _named(cls, __repr__, "__repr__")


def _make_eq(cls: type, decls: list[Field]) -> Any:
    compared = tuple(f.name for f in decls if f.compare)

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return tuple(getattr(self, n) for n in compared) == tuple(getattr(other, n) for n in compared)
        return NotImplemented

    return _named(cls, __eq__, "__eq__")


def _make_hash(cls: type, decls: list[Field]) -> Any:
    hashed = tuple(f.name for f in decls if (f.compare if f.hash is None else f.hash))

    def __hash__(self: Any) -> int:
        return hash(tuple(getattr(self, n) for n in hashed))

    return _named(cls, __hash__, "__hash__")


def _frozen_error(name: str) -> Exception:
    from dataclasses import FrozenInstanceError  # only when a program errs

    return FrozenInstanceError(f"cannot assign to field {name!r}")


def _make_frozen(cls: type, names: tuple[str, ...]) -> tuple[Any, Any]:
    fields_set = frozenset(names)

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in fields_set:
            raise _frozen_error(name)
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in fields_set:
            from dataclasses import FrozenInstanceError

            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return _named(cls, __setattr__, "__setattr__"), _named(cls, __delattr__, "__delattr__")


def _all_fields(obj: Any) -> tuple[str, ...]:
    """The field names of ``obj``'s class: the record's own, or a dataclass subclass's (its
    fields and the record's, from ``dataclasses.fields``, which that subclass imported)."""
    cls = type(obj)
    if "__record_fields__" in cls.__dict__:
        return tuple(f.name for f in cls.__record_fields__)
    import dataclasses

    return tuple(f.name for f in dataclasses.fields(obj))


def _getstate(self: Any) -> list[Any]:
    # A frozen slotted instance pickles as its field values (dataclass's ``_dataclass_getstate``),
    # a subclass's fields included.
    return [getattr(self, name) for name in _all_fields(self)]


def _setstate(self: Any, state: list[Any]) -> None:
    for name, value in zip(_all_fields(self), state):
        object.__setattr__(self, name, value)


class _StdlibView:
    """``__dataclass_fields__``, ``__dataclass_params__`` and ``__signature__`` of a record, made
    at the first read of one of them by ``dataclasses.dataclass`` on a copy of the declarations
    (``_shadow``). The first two are then stored on the class; the signature stays behind this
    descriptor, as it is the record's alone: a subclass with an ``__init__`` of its own (a
    dataclass subclass, say) gets ``None``, so ``inspect`` reads that ``__init__``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.signature: Any = None

    def __get__(self, obj: Any, owner: type) -> Any:
        for klass in owner.__mro__:
            if "__record_fields__" in klass.__dict__:
                break
        if self.name == "__signature__":
            if owner is not klass and owner.__init__ is not klass.__init__:
                return None
            if self.signature is None:
                import inspect

                self.signature = inspect.signature(_shadow(klass))
            return self.signature
        _shadow(klass)
        return getattr(klass, self.name)


def _shadow(klass: type) -> type:
    """The dataclass of ``klass``'s declarations (made once), whose ``__dataclass_fields__`` and
    ``__dataclass_params__`` become ``klass``'s."""
    shadow = klass.__dict__.get("__record_shadow__")
    if shadow is not None:
        return shadow
    import dataclasses as dc

    ns: dict[str, Any] = {"__module__": klass.__module__, "__qualname__": klass.__qualname__, "__annotations__": {}}
    for f in klass.__record_fields__:
        ns["__annotations__"][f.name] = f.type
        ns[f.name] = dc.field(
            default=dc.MISSING if f.default is MISSING else f.default,
            default_factory=dc.MISSING if f.default_factory is MISSING else f.default_factory,
            init=f.init, repr=f.repr, compare=f.compare, hash=f.hash)
    shadow = dc.dataclass(frozen=klass.__record_frozen__)(type(klass.__name__, (), ns))
    type.__setattr__(klass, "__record_shadow__", shadow)
    type.__setattr__(klass, "__dataclass_fields__", shadow.__dataclass_fields__)
    type.__setattr__(klass, "__dataclass_params__", shadow.__dataclass_params__)
    return shadow
