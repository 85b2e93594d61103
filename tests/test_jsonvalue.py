"""JSON values are read through narrowing readers that name the key at fault."""

from __future__ import annotations

import json

import pytest

from etdeploy.errors import UsageError
from etdeploy.jsonvalue import (
    as_array,
    as_object,
    read_bool,
    read_float,
    read_int,
    read_object,
    read_str,
    read_str_list,
)


def test_readers_return_the_value_or_the_default_for_a_missing_or_null_key() -> None:
    doc = as_object(json.loads('{"a": "x", "n": 3, "f": 2, "b": true, "o": {"k": 1}, "z": null}'))
    assert read_str(doc, "a", None) == "x"
    assert read_int(doc, "n", 0) == 3
    assert read_float(doc, "f", 0.0) == 2.0
    assert read_bool(doc, "b", False) is True
    assert read_object(doc, "o") == {"k": 1}
    assert read_str(doc, "z", "d") == "d"
    assert read_int(doc, "missing", 7) == 7
    assert read_object(doc, "missing") == {}
    assert as_array(json.loads("[1, 2]")) == [1, 2]


@pytest.mark.parametrize(
    ("text", "reader", "message"),
    [
        (
            '{"n": "3"}',
            lambda d: read_int(d, "n", 0, "farm.toml"),
            "farm.toml: 'n' is a str, expected an integer",
        ),
        ('{"n": true}', lambda d: read_float(d, "n", 0.0), "'n' is a bool, expected a number"),
        ('{"b": 1}', lambda d: read_bool(d, "b", False), "'b' is a int, expected true or false"),
        (
            '{"l": ["a", 2]}',
            lambda d: read_str_list(d, "l"),
            "'l' holds a int, expected strings only",
        ),
    ],
)
def test_a_value_of_the_wrong_type_is_a_usage_error_naming_the_key(
    text: str, reader: object, message: str
) -> None:
    doc = as_object(json.loads(text))
    with pytest.raises(UsageError) as caught:
        reader(doc)  # type: ignore[operator]
    assert str(caught.value) == message


def test_a_document_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(UsageError, match=r"results\.json is a list, not a table/object"):
        as_object([1], "results.json")
