"""TOML text from the parsed document of a farm spec, for exports that write a
changed copy of a spec (tomllib reads TOML; the standard library writes none).

Covers what a spec holds: tables, nested tables, arrays of tables, and values
that are strings, booleans, integers, floats and arrays of those or of inline
tables. Strings are written as basic strings through json.dumps, whose escapes
(\\", \\\\, \\n, \\uXXXX, ...) are all TOML escapes too.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import TypeGuard

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def dumps(document: Mapping[str, object]) -> str:
    lines: list[str] = []
    _table(document, [], lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _is_table_array(value: object) -> TypeGuard[list[Mapping[str, object]]]:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


def _table(table: Mapping[str, object], path: list[str], lines: list[str]) -> None:
    for key, value in table.items():
        if not isinstance(value, Mapping) and not _is_table_array(value):
            lines.append(f"{_key(key)} = {value_text(value)}")
    for key, value in table.items():
        if isinstance(value, Mapping):
            header = ".".join(_key(k) for k in [*path, key])
            # A table of tables only needs its sub-tables' headers ([devices.pixel8]).
            if not value or any(
                not isinstance(v, Mapping) and not _is_table_array(v) for v in value.values()
            ):
                lines += ["", f"[{header}]"]
            _table(value, [*path, key], lines)
        elif _is_table_array(value):
            header = ".".join(_key(k) for k in [*path, key])
            for item in value:
                lines += ["", f"[[{header}]]"]
                _table(item, [*path, key], lines)


def value_text(value: object) -> str:
    """One TOML value (an inline table for a mapping)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {value_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    raise TypeError(f"no TOML for {type(value).__name__}: {value!r}")
