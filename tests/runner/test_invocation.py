"""The runner's command line (etdeploy/runner/invocation.py): every flag of our
runner, upstream's subset with its warm-ups folded in, later samples, output files."""

from __future__ import annotations

import pytest

from etdeploy.errors import UsageError
from etdeploy.runner import (
    RunnerInvocation,
    SampleFiles,
    output_files,
    runner_argv,
)


def test_argv_for_our_runner_carries_every_flag() -> None:
    invocation = RunnerInvocation(
        model_path="/data/local/tmp/m.pte",
        input_paths=("/d/in-0.bin", "/d/in-1.bin"),
        output_base="/d/out",
        num_executions=5,
        warmup=2,
        method="forward",
        etdump_path="/d/run.etdump",
        cpu_threads=4,
        result_json_path="/d/result.json",
    )
    assert runner_argv("/d/etdeploy_runner", invocation) == [
        "/d/etdeploy_runner",
        "--model_path=/data/local/tmp/m.pte",
        "--inputs=/d/in-0.bin,/d/in-1.bin",
        "--output_file=/d/out",
        "--num_executions=5",
        "--method_name=forward",
        "--etdump_path=/d/run.etdump",
        "--cpu_threads=4",
        "--warmup=2",
        "--result_json=/d/result.json",
    ]


def test_argv_for_upstream_folds_warmup_into_executions_and_omits_our_flags() -> None:
    invocation = RunnerInvocation(
        model_path="m.pte",
        num_executions=5,
        warmup=2,
        result_json_path="r.json",
        flavor="upstream",
        measure_memory=True,
    )
    argv = runner_argv("executor_runner", invocation)
    assert "--num_executions=7" in argv
    assert not any(a.startswith(("--warmup", "--result_json", "--memory")) for a in argv)


def test_our_runner_is_asked_to_measure_memory_for_the_call_that_times() -> None:
    measured = RunnerInvocation(model_path="m.pte", result_json_path="r.json", measure_memory=True)
    assert runner_argv("r", measured)[-1] == "--memory"
    assert "--memory" not in runner_argv("r", RunnerInvocation(model_path="m.pte"))


def test_invocation_refuses_what_the_runner_cannot_take() -> None:
    with pytest.raises(UsageError, match="comma"):
        RunnerInvocation(model_path="m.pte", input_paths=("a,b.bin",))
    with pytest.raises(UsageError, match="num_executions"):
        RunnerInvocation(model_path="m.pte", num_executions=0)
    with pytest.raises(UsageError, match="flavor"):
        RunnerInvocation(model_path="m.pte", flavor="gflags")


def test_argv_adds_each_later_sample_after_a_next_sample_marker() -> None:
    invocation = RunnerInvocation(
        model_path="m.pte",
        input_paths=("/d/a.bin",),
        output_base="/d/s0-out",
        result_json_path="/d/s0.json",
        next_samples=(
            SampleFiles(("/d/b.bin",), "/d/s1-out", "/d/s1.json"),
            SampleFiles(("/d/c.bin",), "/d/s2-out", "/d/s2.json", input_shapes=((3, 5),)),
        ),
    )
    argv = runner_argv("etdeploy_runner", invocation)
    assert argv[argv.index("--next_sample") :] == [
        "--next_sample", "--inputs=/d/b.bin", "--output_file=/d/s1-out", "--result_json=/d/s1.json",
        "--next_sample", "--inputs=/d/c.bin", "--input_shapes=3x5", "--output_file=/d/s2-out",
        "--result_json=/d/s2.json",
    ]  # fmt: skip
    # Upstream's runner loads the program once per sample: it takes one per call.
    with pytest.raises(UsageError, match="more than one sample"):
        RunnerInvocation(
            model_path="m.pte", flavor="upstream", next_samples=invocation.next_samples
        )
    with pytest.raises(UsageError, match="comma"):
        RunnerInvocation(model_path="m.pte", next_samples=(SampleFiles(("a,b",), "o", "r"),))


def test_output_files_are_base_dash_index_dot_bin() -> None:
    assert output_files("/d/out", [0, 2]) == ["/d/out-0.bin", "/d/out-2.bin"]
