"""A failed runner read (etdeploy/runner/failure.py): the ExecuTorch error its
output names, with its cause and hint, timeouts and signals."""

from __future__ import annotations

from etdeploy.errors import EXIT_INFRA, RunnerError
from etdeploy.runner import (
    EtError,
    find_et_error,
    runner_failure,
)


def test_find_et_error_names_upstream_hex_statuses() -> None:
    text = (
        "E 00:00:00.000670 executorch:method.cpp:822] Missing operator: [0] my::op.out\n"
        "F 00:00:00.000700 executorch:executor_runner.cpp:350] "
        "In function main(), assert failed (method.ok()): "
        "Loading of method forward failed with status 0x14\n"
    )
    assert find_et_error(text) == EtError("OperatorMissing", 0x14)
    failure = runner_failure(-6, "", text)
    assert "OperatorMissing (0x14)" in failure.message
    assert failure.missing_operators == ("my::op.out",)
    assert failure.exit_code == EXIT_INFRA


def test_every_error_code_of_the_installed_runtime_is_named_and_explained() -> None:
    """The table against runtime/core/error.h as the installed wheel ships it."""
    import re

    from etdeploy.et_errors import ET_ERROR_INFO
    from etdeploy.runner_build import executorch_package_dir

    header = (executorch_package_dir() / "include/executorch/runtime/core/error.h").read_text()
    enum = header[
        header.index("enum class Error") : header.index("};", header.index("enum class Error"))
    ]
    declared = {
        int(code, 0): name for name, code in re.findall(r"(\w+) = (0x[0-9a-fA-F]+|\d+),", enum)
    }
    assert declared and {c: i.name for c, i in ET_ERROR_INFO.items()} == declared
    for code, info in ET_ERROR_INFO.items():
        assert code == 0 or (info.cause and info.hint), info


def test_a_bare_hex_status_is_translated_to_its_name_cause_and_hint() -> None:
    # Upstream's runner prints only the code.
    text = "F executorch:executor_runner.cpp:301] Could not prepare inputs: 0x12\n"
    failure = runner_failure(-6, "", text)
    assert failure.et_error == EtError("InvalidArgument", 0x12)
    assert "InvalidArgument (0x12)" in failure.message
    assert "likely cause: an argument was rejected" in failure.message
    assert failure.hint is not None and "dynamic dims" in failure.hint
    assert failure.et_error.to_json()["cause"] == failure.et_error.cause


def test_runner_failure_says_timeout_and_signal() -> None:
    timed_out = runner_failure(None, "Iteration 1 of 9: 5.0 ms\n", "", timed_out=True)
    assert timed_out.message == "runner timed out after 1 iteration(s)"
    killed = runner_failure(137, "", "")
    assert killed.message == "runner was killed by SIGKILL"
    assert isinstance(killed, RunnerError)
