"""JSON documents written for people and programs alike, at the C encoder's speed.

json.dumps with indent= runs Python's own encoder, not the C one (CPython 3.11
Lib/json/encoder.py, JSONEncoder.iterencode takes c_make_encoder only when indent is
None, read 2026-12-05): the result of a 1,000-sample run (~0.5 MB) took 0.019 s
that way, most of the time a warm run spends after the device is done. `dumps`
indents the outer levels, where a reader looks for a key, and writes everything from
LEVELS deep, and any list of plain values, on one line through the C encoder: a
per-sample list is one line a sample. The text parses to the same document.
"""

from __future__ import annotations

import json
from typing import Any

# Objects and arrays this deep or deeper are written on one line.
LEVELS = 3
_INDENT = "  "


def dumps(document: Any) -> str:
    """`document` as JSON text, ending with a newline; values JSON cannot hold are
    written as their str() (as json.dumps(default=str) does)."""
    encode = json.JSONEncoder(default=str).encode
    parts: list[str] = []
    _write(document, 0, encode, parts)
    parts.append("\n")
    return "".join(parts)


def _write(value: Any, depth: int, encode: Any, parts: list[str]) -> None:
    if (
        depth >= LEVELS
        or not isinstance(value, (dict, list, tuple))
        or not value
        or (
            not isinstance(value, dict)
            and not any(isinstance(v, (dict, list, tuple)) for v in value)
        )
    ):
        parts.append(encode(value))  # a scalar, or a list of scalars: one line
        return
    inner = "\n" + _INDENT * (depth + 1)
    if isinstance(value, dict):
        parts.append("{")
        for i, (key, item) in enumerate(value.items()):
            parts.append(("," if i else "") + inner + encode(str(key)) + ": ")
            _write(item, depth + 1, encode, parts)
        parts.append("\n" + _INDENT * depth + "}")
        return
    parts.append("[")
    for i, item in enumerate(value):
        parts.append(("," if i else "") + inner)
        _write(item, depth + 1, encode, parts)
    parts.append("\n" + _INDENT * depth + "]")
