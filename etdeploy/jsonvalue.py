"""JSON and TOML values as types, and readers that narrow them with a clear error.

`json.loads` and `tomllib.load` return values whose shape is only known at run
time. Typing them as `Any` lets a wrong key or a wrong type travel far before it
breaks; typing them as `JsonValue` makes mypy ask for a check at the point of
reading, and the readers below are that check, done once: each returns the
narrowed value or raises UsageError naming the document and the key.

Kept free of heavy imports: the CLI's start-up imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias, TypeVar

from etdeploy.errors import UsageError

# What json.loads returns (a TOML document reads into a subset of the same, plus
# dates, which etdeploy's TOML files do not use).
JsonScalar: TypeAlias = bool | int | float | str | None
JsonValue: TypeAlias = JsonScalar | list["JsonValue"] | dict[str, "JsonValue"]
JsonObject: TypeAlias = dict[str, JsonValue]
JsonArray: TypeAlias = list[JsonValue]

T = TypeVar("T")


def _where(source: str, key: str) -> str:
    return f"{source}: {key!r}" if source else repr(key)


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def as_object(value: object, source: str = "") -> JsonObject:
    """`value` as a JSON object, or UsageError saying what `source` holds instead."""
    if not isinstance(value, dict):
        raise UsageError(
            f"{source or 'document'} is a {_kind(value)}, not a table/object",
            hint="check the file against its documented format",
        )
    return value


def as_array(value: object, source: str = "") -> JsonArray:
    """`value` as a JSON array, or UsageError saying what `source` holds instead."""
    if not isinstance(value, list):
        raise UsageError(
            f"{source or 'document'} is a {_kind(value)}, not a list",
            hint="check the file against its documented format",
        )
    return value


def _typed(
    data: Mapping[str, object], key: str, kinds: tuple[type, ...], label: str, source: str
) -> object:
    value = data[key]
    # bool is an int in Python; a JSON true is not a number.
    wrong_bool = isinstance(value, bool) and bool not in kinds
    if wrong_bool or not isinstance(value, kinds):
        raise UsageError(
            f"{_where(source, key)} is a {_kind(value)}, expected {label}",
            hint="check the file against its documented format",
        )
    return value


def read_str(data: Mapping[str, object], key: str, default: T, source: str = "") -> str | T:
    """data[key] as a string, `default` when the key is missing or null."""
    if data.get(key) is None:
        return default
    value = _typed(data, key, (str,), "a string", source)
    assert isinstance(value, str)
    return value


def read_int(data: Mapping[str, object], key: str, default: T, source: str = "") -> int | T:
    """data[key] as an integer, `default` when the key is missing or null."""
    if data.get(key) is None:
        return default
    value = _typed(data, key, (int,), "an integer", source)
    assert isinstance(value, int)
    return value


def read_float(data: Mapping[str, object], key: str, default: T, source: str = "") -> float | T:
    """data[key] as a number (an integer is read as a float), `default` when missing or null."""
    if data.get(key) is None:
        return default
    value = _typed(data, key, (int, float), "a number", source)
    assert isinstance(value, (int, float))
    return float(value)


def read_bool(data: Mapping[str, object], key: str, default: T, source: str = "") -> bool | T:
    """data[key] as true/false, `default` when the key is missing or null."""
    if data.get(key) is None:
        return default
    value = _typed(data, key, (bool,), "true or false", source)
    assert isinstance(value, bool)
    return value


def read_object(data: Mapping[str, object], key: str, source: str = "") -> JsonObject:
    """data[key] as an object; an empty one when the key is missing or null."""
    if data.get(key) is None:
        return {}
    value = _typed(data, key, (dict,), "a table/object", source)
    assert isinstance(value, dict)
    return value


def read_array(data: Mapping[str, object], key: str, source: str = "") -> JsonArray:
    """data[key] as a list; an empty one when the key is missing or null."""
    if data.get(key) is None:
        return []
    value = _typed(data, key, (list,), "a list", source)
    assert isinstance(value, list)
    return value


def read_str_list(data: Mapping[str, object], key: str, source: str = "") -> list[str]:
    """data[key] as a list of strings; an empty one when the key is missing or null."""
    items = read_array(data, key, source)
    for item in items:
        if not isinstance(item, str):
            raise UsageError(
                f"{_where(source, key)} holds a {_kind(item)}, expected strings only",
                hint="check the file against its documented format",
            )
    return [str(item) for item in items]
