"""`etdeploy farm SPEC.toml`: run a matrix of jobs on many devices. Parses and renders;
etdeploy.farm runs. Starts without torch (each job's worker imports it if needed)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.table import Table

from etdeploy.cli._app import command, console, err_console, format_ms
from etdeploy.errors import EXIT_OK, UsageError

if TYPE_CHECKING:
    from etdeploy.farm import FarmEvent, FarmOutcome
    from etdeploy.report.result import RunResult


@command("farm")
def farm_command(
    spec_path: Path = typer.Argument(..., metavar="SPEC.toml", help="The farm spec: its farm matrix and devices.NAME tables."),
    out: Path = typer.Option(None, "--out", "-o", help="Folder for results.jsonl, farm.json and worker logs (default: SPEC-out)."),
    json_path: Path = typer.Option(None, "--json", help="Also write the farm document (etdeploy.farm/1) here."),
    junit_path: Path = typer.Option(None, "--junit", help="Write JUnit XML here (one testcase per job)."),
    html_path: Path = typer.Option(None, "--html", help="Write a self-contained HTML report here."),
    baseline: Path = typer.Option(None, "--baseline", help="A previous run's results (farm.json or results.jsonl) to compare with."),
    shard_index: int = typer.Option(None, "--shard-index", min=0, help="Run only this shard (0-based) of the matrix."),
    shard_count: int = typer.Option(None, "--shard-count", min=1, help="How many shards the matrix is split into."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out: skip the jobs that finished."),
    jobs_per_device: int = typer.Option(None, "--jobs-per-device", min=1, help="Jobs in flight per device (default 1; the device lock still runs one at a time, the rest build and stage meanwhile)."),
) -> None:  # fmt: skip
    """Run every model x backend x quantization x device job of SPEC.toml.

    Exit 0 when every job passed, 1 when a job failed a check (or regressed
    against --baseline), 2 when a job had bad input, 3 when the only problems
    were infrastructure errors (device, transport, runner).
    """
    from etdeploy.farm import exit_code, load_farm_spec, run_farm, write_reports

    if (shard_index is None) != (shard_count is None):
        raise UsageError(
            "--shard-index and --shard-count go together",
            "give both, e.g. --shard-index 0 --shard-count 4",
        )
    shard = (
        (shard_index, shard_count)
        if shard_index is not None and shard_count is not None
        else (0, 1)
    )
    spec = load_farm_spec(spec_path)
    out_dir = out if out is not None else Path(f"{spec_path.stem}-out")
    outcome = run_farm(
        spec,
        out_dir,
        shard=shard,
        resume=resume,
        jobs_per_device=jobs_per_device,
        on_event=_render_event,
    )
    regressions = write_reports(
        outcome,
        json_path=json_path,
        junit_path=junit_path,
        html_path=html_path,
        baseline_path=baseline,
    )
    render_outcome(outcome, regressions)
    code = exit_code(outcome.results, regressions)
    if code != EXIT_OK:
        raise typer.Exit(code)


def _render_event(event: FarmEvent) -> None:
    label = escape(event.job.label)
    if event.kind == "start":
        again = f" (attempt {event.attempt})" if event.attempt > 1 else ""
        err_console.print(f"[dim]start[/] {label}{again}", highlight=False)
    elif event.kind == "retry":
        error = event.result.error if event.result is not None else None
        message = error.message if error is not None else ""
        err_console.print(
            f"[yellow]retry[/] {label} in {event.wait_s:g} s: {escape(message)}",
            highlight=False, soft_wrap=True,
        )  # fmt: skip
    elif event.kind == "skip":
        err_console.print(f"[dim]done earlier[/] {label}", highlight=False)
    elif event.kind == "finish" and event.result is not None:
        note = _note(event.result)
        err_console.print(
            f"{_mark(event.result)} {label}{': ' + note if note else ''}",
            highlight=False,
            soft_wrap=True,
        )


def _mark(result: RunResult) -> str:
    if result.status == "passed":
        return "[green]pass[/]"
    if result.status == "failed":
        return "[red]FAIL[/]"
    return "[magenta]infra error[/]" if result.is_infrastructure else "[red]error[/]"


def _note(result: RunResult) -> str:
    if result.status == "error":
        return escape(result.error.message if result.error else "")
    if result.status == "failed":
        from etdeploy.report.common import failure_message

        return escape(failure_message(result))
    return ""


def _short_model(model: str) -> str:
    # A file reference reads best as its file name and factory; the JSON has the path.
    path, sep, factory = model.rpartition(":")
    return f"{Path(path).name}{sep}{factory}" if sep and "/" in path else model


def render_outcome(outcome: FarmOutcome, regressions: list[Any]) -> None:
    table = Table(title=f"farm {outcome.spec.path.name}" + _shard_title(outcome.shard))
    for column in ("job", "device", "status", "tries", "median", "time", "note"):
        # Short columns never wrap; the job and the note take what is left.
        table.add_column(
            column,
            justify="right" if column in ("tries", "median", "time") else "left",
            overflow="fold",
            no_wrap=column not in ("job", "note"),
            min_width=12 if column in ("job", "note") else None,
        )
    from etdeploy.farm.results import farm_seconds, result_key

    by_key = {result_key(r): r for r in outcome.results}
    for job in outcome.planned:
        result = by_key.get(job.key)
        variant = job.backend + (f"+{job.quantize}" if job.quantize else "")
        cells = [escape(f"{_short_model(job.model)}[{variant}]"), escape(job.device)]
        if result is None:
            table.add_row(*cells, "[dim]not run[/]", "", "", "", "")
            continue
        table.add_row(
            *cells, _mark(result), str(len(result.attempts or ())),
            format_ms(result.latency_ms.median if result.latency_ms else None),
            f"{farm_seconds(result):.1f} s", _note(result),
        )  # fmt: skip
    console.print(table)
    from etdeploy.report import summarize

    s = summarize(outcome.results)
    parts = [f"{s['passed']} passed", f"{s['failed']} failed", f"{s['errors']} error(s)"]
    if s["infrastructure_errors"]:
        parts[-1] += f" ({s['infrastructure_errors']} infrastructure)"
    if outcome.resumed:
        parts.append(f"{outcome.resumed} from the earlier run")
    missing = len(outcome.planned) - len(outcome.results)
    if missing:
        parts.append(f"{missing} not run")
    console.print(
        f"{', '.join(parts)}; results in {escape(str(outcome.results_path))}", highlight=False
    )
    for regression in regressions:
        console.print(
            f"[red]regression:[/] {escape(regression.message)}", highlight=False, soft_wrap=True
        )
    if not outcome.planned:
        err_console.print("[yellow]warning:[/] this shard has no jobs", highlight=False)


def _shard_title(shard: tuple[int, int]) -> str:
    return "" if shard[1] == 1 else f" (shard {shard[0]} of {shard[1]})"
