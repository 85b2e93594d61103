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
from collections.abc import Mapping, Sequence

# A JSON Schema, as etdeploy.results.schema writes it out in dict literals: its
# values are read here with a check of their kind (a schema of the wrong shape is
# etdeploy's own bug, a ValueError). The document it checks is any object: what
# json.loads gave, or a result's to_json.
Schema = Mapping[str, object]


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


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    for name in ("object", "array", "string", "integer", "number"):
        if isinstance(value, _JSON_TYPES[name]):
            return name
    return type(value).__name__


def _is_type(value: object, name: str) -> bool:
    # bool is an int in Python but never a number in JSON.
    if isinstance(value, bool):
        return name == "boolean"
    return isinstance(value, _JSON_TYPES[name])


def show(value: object) -> str:
    # Values as JSON spells them (true, null), short enough for one line.
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _part(schema: Schema, key: str) -> Schema:
    part = schema[key]
    if not isinstance(part, Mapping):
        raise ValueError(f"schema: {key} is not an object")
    return part


def _parts(schema: Schema, key: str) -> list[Schema]:
    found = schema.get(key, ())
    if not isinstance(found, Sequence) or not all(isinstance(p, Mapping) for p in found):
        raise ValueError(f"schema: {key} is not a list of objects")
    return [p for p in found if isinstance(p, Mapping)]


def _values(schema: Schema, key: str) -> Sequence[object]:
    found = schema[key]
    if not isinstance(found, (list, tuple)):
        raise ValueError(f"schema: {key} is not a list")
    return found


def _number(schema: Schema, key: str) -> float:
    found = schema[key]
    if not isinstance(found, (int, float)):
        raise ValueError(f"schema: {key} is not a number")
    return found


def _text(schema: Schema, key: str) -> str:
    found = schema[key]
    if not isinstance(found, str):
        raise ValueError(f"schema: {key} is not a string")
    return found


def _check(value: object, schema: Schema, path: str, root: Schema) -> None:
    if "$ref" in schema:
        ref = _text(schema, "$ref")
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"unsupported $ref {ref}")
        _check(value, _part(_part(root, "$defs"), ref.removeprefix("#/$defs/")), path, root)
    if "type" in schema:
        names = (
            [str(n) for n in _values(schema, "type")]
            if isinstance(schema["type"], list)
            else [_text(schema, "type")]
        )
        if not any(_is_type(value, n) for n in names):
            raise Invalid(path, f"expected {' or '.join(names)}, got {_type_name(value)}")
    if "const" in schema and not _same(value, schema["const"]):
        raise Invalid(path, f"must be {show(schema['const'])}, got {show(value)}")
    if "enum" in schema and not any(_same(value, option) for option in _values(schema, "enum")):
        options = ", ".join(show(o) for o in _values(schema, "enum"))
        raise Invalid(path, f"must be one of {options}, got {show(value)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < _number(schema, "minimum"):
            raise Invalid(path, f"must be >= {schema['minimum']}, got {show(value)}")
        if "maximum" in schema and value > _number(schema, "maximum"):
            raise Invalid(path, f"must be <= {schema['maximum']}, got {show(value)}")
    if (
        isinstance(value, str)
        and "pattern" in schema
        and not re.search(_text(schema, "pattern"), value)
    ):
        raise Invalid(path, f"{show(value)} does not match {schema['pattern']}")
    if isinstance(value, dict):
        _check_object(value, schema, path, root)
    if isinstance(value, (list, tuple)):
        if "minItems" in schema and len(value) < _number(schema, "minItems"):
            raise Invalid(path, f"needs at least {schema['minItems']} item(s)")
        if "items" in schema:
            for i, item in enumerate(value):
                _check(item, _part(schema, "items"), _child(path, i), root)
    for sub in _parts(schema, "allOf"):
        _check(value, sub, path, root)
    if "anyOf" in schema:
        problems = []
        for sub in _parts(schema, "anyOf"):
            try:
                _check(value, sub, path, root)
                break
            except Invalid as exc:
                problems.append(exc)
        else:
            # The deepest problem is the most specific one to show.
            raise max(reversed(problems), key=lambda e: len(e.path))
    if "if" in schema and _matches(value, _part(schema, "if"), path, root):
        if "then" in schema:
            try:
                _check(value, _part(schema, "then"), path, root)
            except Invalid as exc:
                why = _part(schema, "if").get("description")
                raise Invalid(exc.path, f"{exc.problem} ({why})" if why else exc.problem) from None
    elif "if" in schema and "else" in schema:
        _check(value, _part(schema, "else"), path, root)


def _check_object(value: Mapping[str, object], schema: Schema, path: str, root: Schema) -> None:
    for key in _values(schema, "required") if "required" in schema else ():
        if key not in value:
            raise Invalid(_child(path, str(key)), "is missing")
    properties = _part(schema, "properties") if "properties" in schema else {}
    for key, sub in properties.items():
        if key in value:
            if not isinstance(sub, Mapping):
                raise ValueError(f"schema: properties.{key} is not an object")
            _check(value[key], sub, _child(path, key), root)
    extra = schema.get("additionalProperties", True)
    if extra is not True:
        for key in value:
            if key in properties:
                continue
            if extra is False:
                raise Invalid(_child(path, key), "is not allowed here")
            _check(value[key], _part(schema, "additionalProperties"), _child(path, str(key)), root)


def _matches(value: object, schema: Schema, path: str, root: Schema) -> bool:
    try:
        _check(value, schema, path, root)
    except Invalid:
        return False
    return True


def _same(a: object, b: object) -> bool:
    # JSON equality: true is not 1.
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def check(doc: object, schema: Schema) -> None:
    """Raise Invalid at the first problem of `doc` under `schema`."""
    _check(doc, schema, "", schema)
