"""A validator for the part of JSON Schema (draft 2020-12) that the result and
farm schemas use (etdeploy.results.schema), so `jsonschema` is not a dependency.

It covers exactly these keywords: type, const, enum, required, properties,
additionalProperties, items, minItems, minimum, maximum, pattern, $ref into
$defs, allOf, anyOf, if/then/else. It stops at the first problem and names its
key path (`verdict.metrics[3].sqnr_db`).
"""

from __future__ import annotations

import json
import re
from typing import Any

# A JSON Schema as a dict, and the document it checks: both are whatever
# json.loads gives, so their values are Any.
Schema = dict[str, Any]


class Invalid(Exception):
    """The first problem found: where (a key path) and what."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path or '(top level)'}: {problem}")
        self.path = path
        self.problem = problem


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list, tuple),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    for name in ("object", "array", "string", "integer", "number"):
        if isinstance(value, _JSON_TYPES[name]):
            return name
    return type(value).__name__


def _is_type(value: Any, name: str) -> bool:
    # bool is an int in Python but never a number in JSON.
    if isinstance(value, bool):
        return name == "boolean"
    return isinstance(value, _JSON_TYPES[name])


def show(value: Any) -> str:
    # Values as JSON spells them (true, null), short enough for one line.
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _check(value: Any, schema: Schema, path: str, root: Schema) -> None:
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"unsupported $ref {ref}")
        _check(value, root["$defs"][ref.removeprefix("#/$defs/")], path, root)
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is_type(value, n) for n in names):
            raise Invalid(path, f"expected {' or '.join(names)}, got {_type_name(value)}")
    if "const" in schema and not _same(value, schema["const"]):
        raise Invalid(path, f"must be {show(schema['const'])}, got {show(value)}")
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        options = ", ".join(show(o) for o in schema["enum"])
        raise Invalid(path, f"must be one of {options}, got {show(value)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise Invalid(path, f"must be >= {schema['minimum']}, got {show(value)}")
        if "maximum" in schema and value > schema["maximum"]:
            raise Invalid(path, f"must be <= {schema['maximum']}, got {show(value)}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        raise Invalid(path, f"{show(value)} does not match {schema['pattern']}")
    if isinstance(value, dict):
        _check_object(value, schema, path, root)
    if isinstance(value, (list, tuple)):
        if len(value) < schema.get("minItems", 0):
            raise Invalid(path, f"needs at least {schema['minItems']} item(s)")
        if "items" in schema:
            for i, item in enumerate(value):
                _check(item, schema["items"], _child(path, i), root)
    for sub in schema.get("allOf", ()):
        _check(value, sub, path, root)
    if "anyOf" in schema:
        problems = []
        for sub in schema["anyOf"]:
            try:
                _check(value, sub, path, root)
                break
            except Invalid as exc:
                problems.append(exc)
        else:
            # The deepest problem is the most specific one to show.
            raise max(reversed(problems), key=lambda e: len(e.path))
    if "if" in schema and _matches(value, schema["if"], path, root):
        if "then" in schema:
            try:
                _check(value, schema["then"], path, root)
            except Invalid as exc:
                why = schema["if"].get("description")
                raise Invalid(exc.path, f"{exc.problem} ({why})" if why else exc.problem) from None
    elif "if" in schema and "else" in schema:
        _check(value, schema["else"], path, root)


def _check_object(value: dict[str, Any], schema: Schema, path: str, root: Schema) -> None:
    for key in schema.get("required", ()):
        if key not in value:
            raise Invalid(_child(path, key), "is missing")
    properties = schema.get("properties", {})
    for key, sub in properties.items():
        if key in value:
            _check(value[key], sub, _child(path, key), root)
    extra = schema.get("additionalProperties", True)
    if extra is not True:
        for key in value:
            if key in properties:
                continue
            if extra is False:
                raise Invalid(_child(path, key), "is not allowed here")
            _check(value[key], extra, _child(path, str(key)), root)


def _matches(value: Any, schema: Schema, path: str, root: Schema) -> bool:
    try:
        _check(value, schema, path, root)
    except Invalid:
        return False
    return True


def _same(a: Any, b: Any) -> bool:
    # JSON equality: true is not 1.
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def check(doc: Any, schema: Schema) -> None:
    """Raise Invalid at the first problem of `doc` under `schema`."""
    _check(doc, schema, "", schema)
