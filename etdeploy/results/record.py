"""Frozen dataclasses to and from JSON, by their type hints.

The result model (etdeploy.results.result) is a tree of small records; writing a
to_json/from_json pair by hand for each would repeat the field list twice per
record. `Record` derives both from the annotations: nested records, tuples,
dicts of str, unions with None, and JSON scalars. What a reader of a schema /1
document must tolerate is handled here once: unknown keys are ignored, a missing
key takes the field's default.

Kept free of heavy imports: the CLI imports the report package on every start.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import types
import typing
from collections.abc import Mapping
from typing import ClassVar, TypeVar, Union, overload

from etdeploy.jsonvalue import JsonObject, JsonValue

R = TypeVar("R", bound="Record")
T = TypeVar("T")

# Field metadata: {OMIT_NONE: True} leaves the key out when the value is None
# (the schema has a non-nullable type there, and absence says "not known").
OMIT_NONE = "omit_none"


@overload
def omitted_if_none() -> None: ...
@overload
def omitted_if_none(default: T) -> T: ...
def omitted_if_none(default: object = None) -> object:
    """A field written only when it has a value."""
    return dataclasses.field(default=default, metadata={OMIT_NONE: True})


def finite_or_none(value: float) -> float | None:
    # JSON has no Infinity or NaN; the schema writes a non-finite metric as null.
    return value if math.isfinite(value) else None


def infinite_where_null(data: Mapping[str, object], keys: tuple[str, ...]) -> dict[str, object]:
    """A copy of `data` with each of `keys` that is null read as infinity: an
    error metric the document wrote as null was infinite (see finite_or_none)."""
    filled = dict(data)
    for key in keys:
        if key in filled and filled[key] is None:
            filled[key] = math.inf
    return filled


class Record:
    """Mixin for a frozen dataclass that is one block of a JSON document."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[object]]]

    def to_json(self) -> JsonObject:
        out: JsonObject = {}
        klass: type = type(self)  # hashable as a class (see from_json)
        for name, omit_none in _json_fields(klass):
            value = getattr(self, name)
            if value is None and omit_none:
                continue
            out[name] = _encode(value)
        return out

    @classmethod
    def from_json(cls: type[R], data: Mapping[str, object]) -> R:
        if not isinstance(data, Mapping):
            raise TypeError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
        klass: type = cls  # a class object is hashable; mypy checks type[R] against R's __hash__
        hints = _hints(klass)
        kwargs: dict[str, object] = {}
        for field in dataclasses.fields(cls):
            if field.name in data:
                kwargs[field.name] = _decode(data[field.name], hints[field.name], field.name)
        return cls(**kwargs)


@functools.cache
def _hints(cls: type) -> dict[str, object]:
    try:
        return typing.get_type_hints(cls)
    except NameError:
        # A name its module imports when first asked for (etdeploy.lazy): the module's
        # attribute, which imports it.
        return typing.get_type_hints(cls, localns=_ModuleNames(sys.modules[cls.__module__]))


class _ModuleNames(dict[str, object]):
    """A module's names as a namespace, each looked up as its attribute (so a name
    the module exports lazily is imported when an annotation names it)."""

    def __init__(self, module: types.ModuleType) -> None:
        super().__init__()
        self.module = module

    def __missing__(self, name: str) -> object:
        try:
            return getattr(self.module, name)
        except AttributeError:
            raise KeyError(name) from None


@functools.cache
def _json_fields(cls: type) -> tuple[tuple[str, bool], ...]:
    """Each field's name and whether it is left out when None: worked out once a class
    (dataclasses.fields builds its tuple on every call; a result has a thousand records)."""
    return tuple((f.name, bool(f.metadata.get(OMIT_NONE))) for f in dataclasses.fields(cls))


def _encode(value: object) -> JsonValue:
    if value is None or isinstance(value, (str, int)):  # bool is an int
        return value
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, float):
        return finite_or_none(value)
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    raise TypeError(f"{type(value).__name__} is not a JSON value: {value!r}")


def _decode(value: object, hint: object, where: str) -> object:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        candidates = [a for a in args if a is not type(None)]
        if len(candidates) == 1:
            return _decode(value, candidates[0], where)
        for candidate in candidates:  # scalars first match wins (int before float)
            if _matches(value, candidate):
                return _decode(value, candidate, where)
        raise TypeError(f"{where}: {value!r} fits none of {hint}")
    if origin is tuple:
        if not isinstance(value, list):
            raise TypeError(f"{where}: expected an array")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(v, args[0], where) for v in value)
        return tuple(_decode(v, a, where) for v, a in zip(value, args, strict=True))
    if origin is list:
        if not isinstance(value, list):
            raise TypeError(f"{where}: expected an array")
        return [_decode(v, args[0], where) for v in value]
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise TypeError(f"{where}: expected an object")
        item = args[1] if len(args) == 2 else object
        return {str(k): _decode(v, item, where) for k, v in value.items()}
    if origin is typing.Literal:
        return value
    if isinstance(hint, type) and issubclass(hint, Record):
        if not isinstance(value, Mapping):
            raise TypeError(f"{hint.__name__}: expected an object, got {type(value).__name__}")
        return hint.from_json(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _matches(value: object, hint: object) -> bool:
    origin = typing.get_origin(hint) or hint
    if origin in (tuple, list):
        return isinstance(value, list)
    if origin in (dict, Mapping):
        return isinstance(value, Mapping)
    if isinstance(origin, type) and issubclass(origin, Record):
        return isinstance(value, Mapping)
    if origin is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(origin, type):
        return isinstance(value, origin)
    return True
