"""`etdeploy run`: build, deploy, execute, verify, report. Parses and renders only."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Any

import typer

from etdeploy.cli._app import (
    check_json_target,
    command,
    console,
    emit_json,
    err_console,
    json_to_stdout,
)
from etdeploy.cli._settings import with_setting_options
from etdeploy.errors import EXIT_OK, EtdeployError, UsageError
from etdeploy.pipeline.job import RunJob
from etdeploy.report.console import RunConsole
from etdeploy.results.result import RunResult
from etdeploy.settings import DEVICE_PANEL

OUTPUT_PANEL = "Output and settings"


@command(
    "run",
    examples=(
        "etdeploy run digits                                  # this machine",
        "etdeploy run model.py:build --device pixel8 --inputs samples/",
        "etdeploy run model.py:build --quantize int8 --inputs 'samples/*.npy'",
        "etdeploy run model.py:build --pte built.pte --inputs x.npz",
        "etdeploy run digits --profile                        # slowest operators",
        "etdeploy run digits --json - | jq .verdict.passed    # the result on stdout",
    ),
)
@functools.partial(with_setting_options, cls=RunJob)
def run_command(
    model: str = typer.Argument(None, metavar="MODEL", help="file.py:factory, package.module:factory, model.pt2, or an example (digits)."),
    adb_host: str = typer.Option(None, "--adb-host", metavar="HOST", help="The adb server's host (default ANDROID_ADB_SERVER_HOST or 127.0.0.1).", rich_help_panel=DEVICE_PANEL),
    adb_port: int = typer.Option(None, "--adb-port", metavar="PORT", help="The adb server's port (default ANDROID_ADB_SERVER_PORT or 5037).", rich_help_panel=DEVICE_PANEL),
    json_path: str = typer.Option(None, "--json", metavar="PATH|-", help="Write the result (etdeploy.result/2) to PATH, also when the run fails; - prints it to stdout instead of the tables.", rich_help_panel=OUTPUT_PANEL),
    junit_path: Path = typer.Option(None, "--junit", metavar="PATH", help="Also write the result as JUnit XML (one testcase), for a CI check of one model.", rich_help_panel=OUTPUT_PANEL),
    html_path: Path = typer.Option(None, "--html", metavar="PATH", help="Also write the result as a self-contained HTML report.", rich_help_panel=OUTPUT_PANEL),
    config_path: Path = typer.Option(None, "--config", metavar="PATH", help="etdeploy.toml to read (default: the nearest one).", rich_help_panel=OUTPUT_PANEL),
    settings: dict[str, Any] | None = None,
) -> None:  # fmt: skip
    """Run MODEL on a device with real inputs and compare with eager PyTorch.

    Exit 0 when every check passes, 1 when one fails (numerics, size), 2 for bad
    input, 3 when the device, transport or runner fails (or no device answers to
    --device).
    """
    import time

    from etdeploy.cli._feedback import Feedback
    from etdeploy.config import load_config
    from etdeploy.devices.registry import configured_runner, open_device
    from etdeploy.pipeline import RunContext, as_error, error_result, new_job_id, run_job

    check_json_target(json_path)
    config = load_config(config_path)
    job = RunJob.resolve(model, config, settings)
    started, job_id = time.time(), new_job_id()
    try:
        with Feedback() as feedback:
            feedback.status(f"opening {job.device or 'the default device'}")
            target = open_device(
                job.device, config, adb_host=adb_host, adb_port=adb_port,
                lock_timeout_s=job.lock_timeout_s,
            )  # fmt: skip
            with contextlib.closing(target):
                result = run_job(
                    job,
                    target,
                    RunContext(
                        status=feedback.status, progress=feedback.transfer, size_config=config,
                        device_runner=configured_runner(job.device, config),
                    ),
                    job_id=job_id,
                )  # fmt: skip
    except BaseException as exc:
        # The result file is promised for every run that got this far: a bug of
        # ours or Ctrl-C included (then as an internal error / interruption).
        if json_path is not None or junit_path is not None or html_path is not None:
            failed = error_result(job, job.device, as_error(exc), started, job_id)
            with contextlib.suppress(EtdeployError):
                if json_path is not None:
                    emit_json(failed.to_json(), json_path)
                _write_reports(failed, junit_path, html_path)
        raise
    if json_path is not None:
        emit_json(result.to_json(), json_path)
    _write_reports(result, junit_path, html_path)
    printer = RunConsole(console, err_console)
    if json_to_stdout(json_path):
        # stdout is the document alone; the verdict line still reaches a person.
        printer.render_verdict_line(result, err_console)
    else:
        printer.render_result(result)
    if result.exit_code != EXIT_OK:
        raise typer.Exit(result.exit_code)


def _write_reports(result: RunResult, junit_path: Path | None, html_path: Path | None) -> None:
    """--junit and --html: the same writers a farm uses, for one result."""
    if junit_path is None and html_path is None:
        return
    from etdeploy.report import write_html, write_junit

    try:
        if junit_path is not None:
            write_junit([result], junit_path)
        if html_path is not None:
            write_html([result], html_path)
    except OSError as exc:
        raise UsageError(
            f"cannot write {exc.filename}: {exc.strerror}", "check the --junit/--html path"
        ) from None
