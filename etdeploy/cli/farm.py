"""`etdeploy farm`: a matrix of jobs on many devices, and farms beyond one host.

    etdeploy farm run SPEC.toml [--shard-index I --shard-count N]   (or: etdeploy farm SPEC.toml)
    etdeploy farm merge OUT... --out MERGED                         one report from every shard
    etdeploy farm export aws-device-farm SPEC.toml --out DIR        a Device Farm test spec + package

`farm` is a group so that merge and export sit beside run; a first argument that
is not a subcommand means `run`, so `etdeploy farm SPEC.toml` keeps working (a
spec file literally named "merge" or "export" needs `farm run`). Parses and
renders; etdeploy.farm does the work. Starts without torch (each job's worker
imports it if needed).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from etdeploy.cli._app import (
    JSON_HELP,
    app,
    check_json_target,
    command,
    console,
    emit_json,
    err_console,
    is_quiet,
    json_to_stdout,
    plain_text,
)
from etdeploy.errors import EXIT_OK, EtdeployError, UsageError
from etdeploy.interrupts import exit_code_of, signal_name
from etdeploy.units import format_ms

if TYPE_CHECKING:
    from etdeploy.farm import FarmEvent, FarmOutcome
    from etdeploy.farm.merge import MergeOutcome
    from etdeploy.farm.reports import NightReport
    from etdeploy.results import JobKey, NotRun, Regression
    from etdeploy.results.result import RunResult

F = TypeVar("F", bound=Callable[..., Any])


class _FarmGroup(TyperGroup):
    """`farm`'s subcommands, with `run` taken when the first word names none."""

    # ctx: the click context typer makes (typer vendors click, under a private name).
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["run", *args]
        return super().parse_args(ctx, args)


farm_app = typer.Typer(
    cls=_FarmGroup,
    no_args_is_help=True,
    help=plain_text(
        "Run a farm spec's matrix (`farm run SPEC.toml`, or `farm SPEC.toml`), merge "
        "the results of its shards, or export it to a device-farm service."
    ),
)
app.add_typer(farm_app, name="farm")


@command(
    "run",
    group=farm_app,
    examples=(
        "etdeploy farm nightly.toml --junit out.xml --html report.html",
        'etdeploy farm nightly.toml -k "int8 and not pixel8"',
        "etdeploy farm nightly.toml --shard-index 1 --shard-count 4",
        "etdeploy farm nightly.toml --resume --retry-errors",
    ),
)
def farm_run_command(
    spec_path: Path = typer.Argument(..., metavar="SPEC.toml", help="The farm spec: its farm matrix and devices.NAME tables."),
    out: Path = typer.Option(None, "--out", "-o", metavar="DIR", help="Folder for results.jsonl, farm.json and worker logs (default: SPEC-out)."),
    json_path: str = typer.Option(None, "--json", metavar="PATH|-", help=JSON_HELP.format(what="farm", schema="etdeploy.farm/1") + " The tables then go to stderr."),
    junit_path: Path = typer.Option(None, "--junit", metavar="PATH", help="Write JUnit XML here (one testcase per job; skipped cells as skipped testcases)."),
    html_path: Path = typer.Option(None, "--html", metavar="PATH", help="Write a self-contained HTML report here."),
    baseline: str = typer.Option(None, "--baseline", metavar="PATH|history", help="Judge tonight against the farm's history (`history`: a regression is a sustained shift, a single noisy night is only reported) or a previous run's results (farm.json or results.jsonl)."),
    keyword: str = typer.Option(None, "-k", metavar="EXPR", help='Run only the jobs whose names match EXPR, as pytest -k: words that are parts of a job\'s name or key (int8, pixel8, "none" for float builds) joined by and, or, not and parentheses, e.g. -k "int8 and not pixel8".'),
    shard_index: int = typer.Option(None, "--shard-index", min=0, metavar="N", help="Run only this shard (0-based) of the matrix."),
    shard_count: int = typer.Option(None, "--shard-count", min=1, metavar="N", help="How many shards the matrix is split into."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out: skip the jobs that finished."),
    retry_errors: bool = typer.Option(False, "--retry-errors", help="With --resume: also run again the jobs whose earlier result was an infrastructure error."),
    jobs_per_device: int = typer.Option(None, "--jobs-per-device", min=1, metavar="N", help="Jobs in flight per device (default 1; the device lock still runs one at a time, the rest build and stage meanwhile)."),
) -> None:  # fmt: skip
    """Run every model x backend x quantization x device job of SPEC.toml.

    Cells that cannot run (int8 with a backend that has no quantizer) are
    skipped with the reason and do not affect the exit code. Exit 0 when every
    job passed, 1 when a job failed a check (or regressed against --baseline),
    2 when a job had bad input, 3 when the only problems were infrastructure
    errors (device, transport, runner), 130 when interrupted (Ctrl-C; 143 for SIGTERM): the
    workers are stopped, the devices released, the finished jobs kept in
    OUT/results.jsonl for --resume.
    """
    from etdeploy.farm import FARM_DOC_NAME, exit_code, load_farm_spec, run_farm
    from etdeploy.farm.reports import trend_page_beside, write_night
    from etdeploy.farm.select import select_jobs

    check_json_target(json_path)

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
    if keyword is not None:
        spec = select_jobs(spec, keyword)
    out_dir = out if out is not None else Path(f"{spec_path.stem}-out")
    try:
        outcome = run_farm(
            spec,
            out_dir,
            shard=shard,
            resume=resume,
            retry_errors=retry_errors,
            jobs_per_device=jobs_per_device,
            on_event=_render_event,
        )
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (etdeploy.interrupts)
        _render_interrupted(spec_path, out_dir, signal_name(exc))
        raise typer.Exit(exit_code_of(exc)) from None
    trend_page = trend_page_beside(html_path)
    night = write_night(outcome, json_path=None, baseline=baseline, trend_page=trend_page)
    links = [("Trends over the nights", night.trend_page.name)] if night.trend_page else []
    write_reports(outcome.results, junit_path, html_path, regressions=night.alarms,
                  baseline=night.baseline, not_run=night.not_run, links=links)  # fmt: skip
    regressions = night.regressions
    if json_path is not None:
        emit_json(json.loads((out_dir / FARM_DOC_NAME).read_text()), json_path)
    render_outcome(outcome, regressions, err_console if json_to_stdout(json_path) else console)
    _render_history(night)
    code = exit_code(outcome.results, regressions)
    if code != EXIT_OK:
        raise typer.Exit(code)


def write_reports(
    results: Sequence[RunResult],
    junit_path: Path | None,
    html_path: Path | None,
    *,
    regressions: Sequence[Regression],
    baseline: Sequence[RunResult] | None,
    not_run: Sequence[NotRun],
    links: Sequence[tuple[str, str]] = (),
    title: str = "etdeploy report",
) -> None:
    """--junit and --html of a farm (run or merge): the alarms and the jobs without
    a result in both, the baseline beside each job in the HTML."""
    if junit_path is None and html_path is None:
        return
    from etdeploy.report import write_html, write_junit

    if junit_path is not None:
        write_junit(results, junit_path, regressions=regressions, not_run=not_run)
    if html_path is not None:
        write_html(results, html_path, baseline=baseline, regressions=regressions,
                   title=title, not_run=not_run, links=links)  # fmt: skip


def _render_history(night: NightReport) -> None:
    """The history's part of the night: outliers (told, not failed), flaky jobs, and
    where the night went (or why it did not)."""
    for outlier in night.outliers:  # an outlier, or a busy host
        err_console.print(
            f"[yellow]{outlier.alarm}:[/] {escape(outlier.line)}", highlight=False, soft_wrap=True
        )
    history = night.history
    if history is None or history.store is None:
        return
    for flaky in history.judgement.flaky if history.judgement else ():
        err_console.print(f"[yellow]flaky:[/] {escape(flaky.key.text)} flipped pass/fail {flaky.flips} "
                          "times with no input changed", highlight=False, soft_wrap=True)  # fmt: skip
    if history.problem is not None:
        err_console.print(f"[yellow]history {escape(history.store)}:[/] {escape(history.problem)}",
                          highlight=False, soft_wrap=True)  # fmt: skip
    elif history.recorded is not None:
        page = f"; trends in {history.trend_page}" if history.trend_page else ""
        err_console.print(f"[dim]history {escape(history.store)}: {history.recorded.added} job(s) "
                          f"recorded{escape(page)}[/]", highlight=False, soft_wrap=True)  # fmt: skip


def _render_interrupted(spec_path: Path, out_dir: Path, signal: str) -> None:
    """What an interrupted farm kept, and how to finish it."""
    from etdeploy.farm import RESULTS_NAME, ResultsLog

    try:
        kept = len({r.farm.key for r in ResultsLog(out_dir / RESULTS_NAME).read() if r.farm})
    except EtdeployError:
        kept = 0
    err_console.print(
        f"[bold red]interrupted[/] by {signal}: workers stopped and devices released; {kept} finished "
        f"job(s) kept in {escape(str(out_dir / RESULTS_NAME))}",
        highlight=False, soft_wrap=True,
    )  # fmt: skip
    err_console.print(
        f"[dim]hint:[/] finish the run with: etdeploy farm {escape(str(spec_path))} "
        f"--out {escape(str(out_dir))} --resume",
        highlight=False, soft_wrap=True,
    )  # fmt: skip


def _progress(event: FarmEvent) -> str:
    """[n/N mm:ss]: jobs finished of those this run starts, and the time so far."""
    seconds = int(event.elapsed_s)
    hours, rest = divmod(seconds, 3600)
    clock = (
        f"{hours}:{rest // 60:02d}:{rest % 60:02d}"
        if hours
        else f"{rest // 60:02d}:{rest % 60:02d}"
    )
    width = len(str(event.total))
    return f"[dim]\\[{event.done:>{width}}/{event.total} {clock}][/]"


def _render_event(event: FarmEvent) -> None:
    """A job's progress line on stderr; with --quiet only a job that did not pass has
    one (the summary table follows either way)."""
    from etdeploy.farm.results import farm_seconds

    if is_quiet() and not (
        event.kind == "finish" and event.result is not None and event.result.status != "passed"
    ):
        return
    label = escape(event.job.label)
    head = _progress(event)
    if event.kind == "start":
        again = f" (attempt {event.attempt})" if event.attempt > 1 else ""
        line = f"{head} [dim]start[/] {label}{again}"
    elif event.kind == "retry":
        error = event.result.error if event.result is not None else None
        message = error.message if error is not None else ""
        line = f"{head} [yellow]retry[/] {label} in {event.wait_s:g} s: {escape(message)}"
    elif event.kind == "skip":
        reason = getattr(event.job, "reason", "")
        line = f"{head} [dim]skipped[/] {label}: {escape(reason)}"
    elif event.kind == "earlier":
        line = f"{head} [dim]done earlier[/] {label}"
    elif event.kind == "rerun":
        error = event.result.error if event.result is not None else None
        line = f"{head} [yellow]rerun[/] {label} (earlier: {escape(error.message if error else 'an error')})"
    elif event.kind == "finish" and event.result is not None:
        note = _note(event.result)
        took = f" ({farm_seconds(event.result):.1f} s)"
        line = f"{head} {_mark(event.result)} {label}{took}{': ' + note if note else ''}"
    else:
        return
    err_console.print(line, highlight=False, soft_wrap=True)


def _mark(result: RunResult, regressed: bool = False) -> str:
    if result.status == "passed":
        # A job that passed its own checks but got worse than the baseline is not a pass.
        return "[red]REGRESSED[/]" if regressed else "[green]pass[/]"
    if result.status == "failed":
        return "[red]FAIL[/]"
    return "[magenta]infra error[/]" if result.is_infrastructure else "[red]error[/]"


def _note(result: RunResult) -> str:
    if result.status == "error":
        return escape(result.error.message if result.error else "")
    if result.status == "failed":
        from etdeploy.results.jobs import failure_message

        return escape(failure_message(result))
    return ""


# A row of the farm table: a job's model reference, backend, quantization,
# device, and its result (a NotRun: skipped or not run, with why).
Row = tuple[str, str | None, str | None, str, "RunResult | NotRun"]


def _render_table(
    title: str, rows: list[Row], regressions: list[Regression], out: Console = console
) -> None:
    from etdeploy.farm.results import farm_seconds
    from etdeploy.results import NotRun, job_key
    from etdeploy.results.jobs import short_model

    flagged: dict[JobKey, list[Regression]] = {}
    for regression in regressions:
        flagged.setdefault(regression.key, []).append(regression)
    table = Table(title=title)
    for column in ("job", "device", "status", "tries", "median", "time", "note"):
        # Short columns never wrap; the job and the note take what is left.
        table.add_column(
            column,
            justify="right" if column in ("tries", "median", "time") else "left",
            overflow="fold",
            no_wrap=column not in ("job", "note"),
            min_width=12 if column in ("job", "note") else None,
        )
    for model, backend, quantize, device, result in rows:
        variant = (backend or "?") + (f"+{quantize}" if quantize else "")
        # A file reference reads best as its file name and factory; the JSON has the path.
        cells = [escape(f"{short_model(model)}[{variant}]"), escape(device)]
        if isinstance(result, NotRun):
            table.add_row(*cells, f"[dim]{result.status}[/]", "", "", "", escape(result.reason))
            continue
        regressed = flagged.get(job_key(result), [])
        note = _note(result)
        if regressed and not note:
            more = f" (+{len(regressed) - 1} more)" if len(regressed) > 1 else ""
            note = escape(regressed[0].message) + more
        table.add_row(
            *cells, _mark(result, bool(regressed)), str(len(result.attempts or ())),
            format_ms(result.latency_ms.median if result.latency_ms else None),
            f"{farm_seconds(result):.1f} s", note,
        )  # fmt: skip
    out.print(table)


def _summary_parts(results: list[RunResult], unrun: list[NotRun]) -> list[str]:
    from etdeploy.results import summarize

    s = summarize(results)
    parts = [f"{s['passed']} passed", f"{s['failed']} failed", f"{s['errors']} error(s)"]
    if s["infrastructure_errors"]:
        parts[-1] += f" ({s['infrastructure_errors']} infrastructure)"
    skipped = sum(1 for n in unrun if n.skipped)
    if skipped:
        parts.append(f"{skipped} skipped")
    if len(unrun) - skipped:
        parts.append(f"{len(unrun) - skipped} not run")
    return parts


def _render_regressions(regressions: list[Regression], out: Console = console) -> None:
    for regression in regressions:
        said = (
            "[red]regression:[/]" if regression.is_regression else f"[yellow]{regression.alarm}:[/]"
        )
        out.print(f"{said} {escape(regression.line)}", highlight=False, soft_wrap=True)


def render_outcome(
    outcome: FarmOutcome, regressions: list[Regression], out: Console = console
) -> None:
    from etdeploy.farm.reports import skipped_entries
    from etdeploy.farm.results import result_key
    from etdeploy.results import JobKey, NotRun

    by_key = {result_key(r): r for r in outcome.results}
    unrun = skipped_entries(outcome.skipped)
    rows: list[Row] = []
    for job in outcome.planned:
        found = by_key.get(job.key)
        rows.append((job.model, job.backend, job.quantize, job.device, found
                     if found is not None else NotRun(JobKey(job.model, job.backend, job.quantize,
                                                             job.device), "no result")))  # fmt: skip
    rows += [(c.key.model, c.key.backend, c.key.quantization, c.key.device, c) for c in unrun]
    _render_table(
        f"farm {outcome.spec.path.name}" + _shard_title(outcome.shard), rows, regressions, out
    )
    for line in outcome.source_notes:
        err_console.print(f"[dim]{escape(line)}[/]", highlight=False, soft_wrap=True)
    missing = len(outcome.planned) - len(outcome.results)
    parts = _summary_parts(outcome.results, unrun)
    if outcome.resumed:
        parts.append(f"{outcome.resumed} from the earlier run")
    if outcome.rerun:
        parts.append(f"{outcome.rerun} earlier error(s) run again")
    if missing:
        parts.append(f"{missing} not run")
    if regressions:
        parts.append(f"{len(regressions)} regression(s)")
    # One line however narrow the console: CI logs are grepped for it.
    out.print(
        f"{', '.join(parts)}; results in {escape(str(outcome.results_path))}",
        highlight=False,
        soft_wrap=True,
    )
    _render_regressions(regressions, out)
    if not outcome.planned:
        err_console.print("[yellow]warning:[/] this shard has no jobs", highlight=False)


def _shard_title(shard: tuple[int, int]) -> str:
    return "" if shard[1] == 1 else f" (shard {shard[0]} of {shard[1]})"


# -- merge -------------------------------------------------------------------------------


@command(
    "merge",
    group=farm_app,
    examples=("etdeploy farm merge out-0 out-1 out-2 out-3 --spec nightly.toml --out merged",),
)
def farm_merge_command(
    sources: list[Path] = typer.Argument(..., metavar="OUT...", help="The --out folders of the shards (or their results.jsonl / farm.json)."),
    out: Path = typer.Option(..., "--out", "-o", metavar="DIR", help="Folder for the merged results.jsonl and farm.json."),
    spec_path: Path = typer.Option(None, "--spec", metavar="SPEC.toml", help="The farm spec the shards ran: its whole matrix is the plan, so a shard that never reported shows as jobs not run."),
    json_path: str = typer.Option(None, "--json", metavar="PATH|-", help=JSON_HELP.format(what="merged farm", schema="etdeploy.farm/1") + " The tables then go to stderr."),
    junit_path: Path = typer.Option(None, "--junit", metavar="PATH", help="Write JUnit XML here (one testcase per job; jobs not run are skipped testcases)."),
    html_path: Path = typer.Option(None, "--html", metavar="PATH", help="Write a self-contained HTML report here."),
    baseline: Path = typer.Option(None, "--baseline", metavar="PATH", help="A previous run's results (farm.json or results.jsonl) to compare with."),
) -> None:  # fmt: skip
    """Merge the results of a farm's shards (or hosts) into one farm.json and reports.

    A job found in several sources keeps the result that started last; a planned
    job with no result is listed as not run. Exit codes as `farm run`, and 3 when
    jobs were not run and nothing worse happened.
    """
    from etdeploy.farm import FARM_DOC_NAME, load_farm_spec
    from etdeploy.farm.merge import merge_sources, write_merged

    check_json_target(json_path)
    spec = load_farm_spec(spec_path) if spec_path is not None else None
    outcome = merge_sources(sources, spec=spec)
    merged = write_merged(
        outcome, out, baseline_path=baseline,
        memory_growth=spec.memory_growth if spec is not None else None,
    )  # fmt: skip
    regressions = merged.regressions
    write_reports(outcome.results, junit_path, html_path, regressions=regressions,
                  baseline=merged.baseline, not_run=outcome.unrun,
                  title="etdeploy farm (merged)")  # fmt: skip
    if json_path is not None:
        emit_json(json.loads((out / FARM_DOC_NAME).read_text()), json_path)
    render_merge(outcome, out, regressions, err_console if json_to_stdout(json_path) else console)
    code = outcome.exit_code
    if any(r.is_regression for r in regressions) and code in (EXIT_OK, 3):
        code = 1
    if code != EXIT_OK:
        raise typer.Exit(code)


def render_merge(
    outcome: MergeOutcome, folder: Path, regressions: list[Regression], out: Console = console
) -> None:
    from etdeploy.farm.merge import key_of, planned_key
    from etdeploy.results import JobKey

    by_key = {key_of(r): r for r in outcome.results}
    unrun = {n.key: n for n in outcome.unrun}
    planned = {planned_key(p) for p in outcome.matrix}
    rows: list[Row] = []
    for p in outcome.matrix:
        found = by_key.get(planned_key(p))
        key = JobKey(str(p["model"]), p["backend"], p["quantization"], str(p["device"]))
        rows.append((key.model, key.backend, key.quantization, key.device,
                     found if found is not None else unrun[key]))  # fmt: skip
    for joined, result in by_key.items():
        if joined not in planned:
            model, backend, quantize, device = joined.split("|")
            rows.append((model, backend, None if quantize == "none" else quantize, device, result))
    rows += [(c.key.model, c.key.backend, c.key.quantization, c.key.device, c)
             for c in outcome.skipped]  # fmt: skip
    _render_table(f"farm merged from {len(outcome.sources)} source(s)", rows, regressions, out)
    for duplicate in outcome.duplicates:
        err_console.print(
            f"[dim]duplicate[/] {escape(duplicate.key)}: kept the result from "
            f"{escape(duplicate.kept)} (started {duplicate.kept_started_at})",
            highlight=False, soft_wrap=True,
        )  # fmt: skip
    for warning in outcome.warnings:
        err_console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
    parts = _summary_parts(outcome.results, outcome.unrun)
    if outcome.duplicates:
        parts.append(f"{len(outcome.duplicates)} duplicate(s) dropped")
    if regressions:
        parts.append(f"{sum(1 for r in regressions if r.is_regression)} regression(s)")
    out.print(
        f"{', '.join(parts)}; merged into {escape(str(folder))}", highlight=False, soft_wrap=True
    )
    _render_regressions(regressions, out)


# -- export ------------------------------------------------------------------------------


@command(
    "export",
    group=farm_app,
    examples=("etdeploy farm export aws-device-farm nightly.toml --device pixel8 --out df/",),
)
def farm_export_command(
    target: str = typer.Argument(..., metavar="TARGET", help="Where to: aws-device-farm."),
    spec_path: Path = typer.Argument(..., metavar="SPEC.toml", help="The farm spec to export."),
    out: Path = typer.Option(..., "--out", "-o", metavar="DIR", help="Folder for the test spec, the test package and its zip."),
    device: str = typer.Option(None, "--device", metavar="NAME", help="The spec's device whose jobs run on each Device Farm phone (default: its only adb device)."),
) -> None:  # fmt: skip
    """Write what a device-farm service needs to run SPEC.toml's jobs on its hosts.

    aws-device-farm: a custom-environment test spec (testspec.yml) and a test
    package (etdeploy-farm-tests.zip) that install etdeploy on the Device Farm
    host and run --device's jobs on the attached phone, the results kept as the
    run's artifacts.
    """
    from etdeploy.farm.export import EXPORTERS

    exporter = EXPORTERS.get(target)
    if exporter is None:
        raise UsageError(f"unknown export target {target!r}", f"targets: {', '.join(EXPORTERS)}")
    done = exporter(spec_path, out, device)
    console.print(
        f"{len(done.jobs)} job(s) of {escape(done.device)} exported for {escape(target)}:",
        highlight=False,
    )
    for label, path in (("test spec", done.test_spec), ("test package", done.package_zip)):
        console.print(f"  {label}: {escape(str(path))}", highlight=False)
    for note in done.notes:
        err_console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
