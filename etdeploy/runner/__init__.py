"""The runner contract: how etdeploy invokes a runner and reads back what it did.

Two runners speak it. Ours (android_harness/, flavor "etdeploy") takes
upstream executor_runner's flags plus `--warmup`, `--result_json`,
`--next_sample` (more samples through the program loaded once) and
`--describe` (what it can run, for preflight: describe.py); upstream's
(flavor "upstream") takes only its own flags, so its warm-up runs are folded into
the timed loop and dropped again when the log is read, and shapes come from the
reference instead of a result document.

Pure Python and torch-free: a device transport builds the argv here
(invocation.py), runs it wherever the device is, and hands the exit status and
text back to `runner_failure` (failure.py) or to `parse_log` (log.py) /
`parse_result_json` (runner_result.py).
"""

from __future__ import annotations

from etdeploy.memory.probe import RunnerMemory
from etdeploy.runner.failure import EtError, RunnerFailure, find_et_error, runner_failure
from etdeploy.runner.invocation import (
    FLAVORS,
    RunnerInvocation,
    SampleFiles,
    batch_files,
    next_sample_argv,
    output_files,
    packed_input,
    runner_argv,
    samples_file_text,
)
from etdeploy.runner.log import RunnerLog, parse_log
from etdeploy.runner.runner_result import (
    BATCH_SCHEMA,
    RESULT_SCHEMA,
    RunnerResult,
    TensorRecord,
    parse_batch_json,
    parse_result_json,
    result_from_log,
)

__all__ = [
    "BATCH_SCHEMA",
    "FLAVORS",
    "RESULT_SCHEMA",
    "EtError",
    "RunnerFailure",
    "RunnerInvocation",
    "RunnerLog",
    # A result's memory block (etdeploy.memory.probe), named where results are read.
    "RunnerMemory",
    "RunnerResult",
    "SampleFiles",
    "TensorRecord",
    "batch_files",
    "find_et_error",
    "next_sample_argv",
    "output_files",
    "packed_input",
    "parse_batch_json",
    "parse_log",
    "parse_result_json",
    "result_from_log",
    "runner_argv",
    "runner_failure",
    "samples_file_text",
]
