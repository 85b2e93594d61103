"""Our runner's result document (etdeploy/runner/runner_result.py): another schema or
inconsistent counts are refused."""

from __future__ import annotations

import json

import pytest

from etdeploy.errors import RunnerError
from etdeploy.runner import (
    RESULT_SCHEMA,
    parse_result_json,
)


def test_parse_result_json_refuses_another_schema_and_inconsistent_counts() -> None:
    with pytest.raises(RunnerError, match="schema"):
        parse_result_json(json.dumps({"schema": "other/1", "iterations_ms": []}))
    with pytest.raises(RunnerError, match="num_executions"):
        parse_result_json(
            json.dumps({"schema": RESULT_SCHEMA, "num_executions": 3, "iterations_ms": [1.0]})
        )
    with pytest.raises(RunnerError, match="not JSON"):
        parse_result_json("{truncated")
