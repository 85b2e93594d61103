"""A runner's log lines (etdeploy/runner/log.py) behind ExecuTorch's and logcat's
prefixes, and a result read from them alone (upstream's runner)."""

from __future__ import annotations

import pytest

from etdeploy.errors import RunnerError
from etdeploy.runner import (
    RunnerInvocation,
    parse_log,
    result_from_log,
)

UPSTREAM_STYLE_LOG = """\
I 00:00:00.000512 executorch:executor_runner.cpp:171] Resetting threadpool with num threads = 4
I 00:00:00.001843 executorch:executor_runner.cpp:240] Model file m.pte is loaded.
some unrelated line: Iteration counts are fun
I 00:00:00.004102 executorch:executor_runner.cpp:330] Model loaded in 2.251000 ms.
I 00:00:00.004512 executorch:executor_runner.cpp:420] Iteration 1 of 3: 0.410000 ms
I 00:00:00.004912 executorch:executor_runner.cpp:420] Iteration 2 of 3: 0.400000 ms
12-02 10:00:00.000  4242  4242 I ExecuTorch: Iteration 3 of 3: 3.9e-01 ms
I 00:00:00.005312 executorch:executor_runner.cpp:431] Model executed successfully 3 time(s) in 1.200000 ms.
"""


def test_parse_log_reads_timing_lines_behind_et_and_logcat_prefixes_among_noise() -> None:
    log = parse_log(UPSTREAM_STYLE_LOG)
    assert log.load_ms == pytest.approx(2.251)
    assert log.iterations_ms == pytest.approx((0.41, 0.40, 0.39))
    assert log.iterations_announced == 3
    assert log.executed_count == 3
    assert log.executed_total_ms == pytest.approx(1.2)
    assert log.completed


def test_parse_log_counts_an_iteration_seen_twice_once() -> None:
    # stdout and logcat can both carry the same line.
    doubled = "Iteration 1 of 2: 1.0 ms\nIteration 1 of 2: 1.0 ms\r\nIteration 2 of 2: 2.0 ms\r\n"
    assert parse_log(doubled).iterations_ms == (1.0, 2.0)


def test_result_from_log_drops_upstream_warmups_and_refuses_an_unfinished_log() -> None:
    invocation = RunnerInvocation(model_path="m.pte", num_executions=2, warmup=1, flavor="upstream")
    result = result_from_log(UPSTREAM_STYLE_LOG, invocation)
    assert result.iterations_ms == pytest.approx((0.40, 0.39))
    assert result.outputs == ()
    unfinished = "Model loaded in 1.0 ms.\nIteration 1 of 3: 0.4 ms\n"
    with pytest.raises(RunnerError, match="1 of 3 iterations"):
        result_from_log(unfinished, invocation)
