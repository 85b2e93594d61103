"""The runner's --describe document (etdeploy/runner/describe.py), and a runner
without the flag recognised."""

from __future__ import annotations

import json

import pytest

from etdeploy.errors import RunnerError


def test_describe_output_is_read_and_a_runner_without_it_is_recognised() -> None:
    from etdeploy.runner.describe import describe_unsupported, parse_describe

    with pytest.raises(RunnerError, match="schema"):
        parse_describe(json.dumps({"schema": "etdeploy.runner_result/1"}))
    with pytest.raises(RunnerError, match="not JSON"):
        parse_describe("{cut")
    # Ours before --describe existed, and upstream's gflags.
    assert describe_unsupported("", "error: unknown flag --describe (see --help)\n")
    assert describe_unsupported("", "ERROR: unknown command line flag 'describe'\n")
    assert not describe_unsupported("", "error: unknown flag --descriptor (see --help)\n")
