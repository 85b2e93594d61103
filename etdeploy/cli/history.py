"""`etdeploy history`: the nights a farm recorded, their series and change points.

    etdeploy history list [--store PATH|URL] [--since DATE]
    etdeploy history show PATTERN                   a series' nights and change points
    etdeploy history record OUT/results.jsonl...    add (or replay) nights into the store
    etdeploy history export [PATTERN] --format csv|json --out PATH|-
    etdeploy history trend --out trend.html         the trend page

The store is a SQLite file (default: $ETDEPLOY_HISTORY, else
etdeploy-history.sqlite in the current folder) or a postgresql:// URL. Parses and
renders; etdeploy.history does the work.
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape
from rich.table import Table

from etdeploy.cli._app import app, command, console, emit_json, err_console
from etdeploy.errors import UsageError

if TYPE_CHECKING:
    from etdeploy.history.changes import History, Series
    from etdeploy.history.trend import TrendSeries

history_app = typer.Typer(
    no_args_is_help=True,
    help="The nights a farm recorded: list and show series with their change points, "
    "record or replay results, export them, draw the trend page.",
)
app.add_typer(history_app, name="history")

STORE_HELP = (
    "The history: a SQLite file or a postgresql://USER@HOST:PORT/DB URL "
    "(default: $ETDEPLOY_HISTORY, else ./etdeploy-history.sqlite)."
)
SINCE_HELP = "Only nights started on or after this date (YYYY-MM-DD, or a full UTC time)."


def _history(store_where: str | None, since: str | None) -> tuple[str, History]:
    from etdeploy.history.night import store_location
    from etdeploy.history.store import open_store

    _check_since(since)
    with open_store(store_location(store_where)) as store:
        return store.shown, store.read(since)


def _check_since(since: str | None) -> None:
    import datetime

    if since is None:
        return
    try:
        datetime.datetime.fromisoformat(since.removesuffix("Z"))
    except ValueError:
        raise UsageError(f"--since {since!r} is not a date", "write it as 2026-12-01") from None


def _analysed(store: str, history: History, pattern: str | None) -> list[TrendSeries]:
    from etdeploy.history.night import analyse
    from etdeploy.history.select import require_match

    require_match(history.series, pattern, store)
    return analyse(history, pattern)


@command("list", group=history_app, examples=("etdeploy history list --since 2026-11-01",))
def history_list_command(
    store: str = typer.Option(None, "--store", metavar="PATH|URL", help=STORE_HELP),
    since: str = typer.Option(None, "--since", metavar="DATE", help=SINCE_HELP),
    pattern: str = typer.Option(None, "-k", metavar="PATTERN", help="Only series whose name contains PATTERN (or matches it, with * ? [)."),
) -> None:  # fmt: skip
    """List the series with their nights, last value and change points.

    A series is model|backend|quantization|device|metric."""
    from etdeploy.history.judge import shown

    where, history = _history(store, since)
    trends = _analysed(where, history, pattern)
    table = Table(title=f"history {where}")
    for column in ("series", "nights", "last", "change points"):
        table.add_column(column, overflow="fold", justify="right" if column == "nights" else "left")
    for trend in trends:
        s = trend.series
        changes = "; ".join(f"{c.night[:10]} {c.shift:+.0%}" for c in trend.changes)
        table.add_row(escape(s.name), str(len(s.values)), shown(s.metric, s.values[-1]), changes)
    console.print(table)
    console.print(
        f"{len(trends)} series, {len(history.jobs)} job night(s), "
        f"{sum(1 for t in trends if t.changes)} with a change point",
        highlight=False,
    )


@command(
    "show",
    group=history_app,
    examples=('etdeploy history show "digits|xnnpack|none|pixel8|latency.median_ms"',),
)
def history_show_command(
    pattern: str = typer.Argument(..., metavar="PATTERN", help="A series name, a part of one, or a pattern with * ? [."),
    store: str = typer.Option(None, "--store", metavar="PATH|URL", help=STORE_HELP),
    since: str = typer.Option(None, "--since", metavar="DATE", help=SINCE_HELP),
) -> None:  # fmt: skip
    """Show the matching series: each night's value and its change points.

    Each change point with its shift and the recorded input that changed that night."""
    from etdeploy.history.changes import flaky_jobs
    from etdeploy.history.judge import shown

    where, history = _history(store, since)
    for trend in _analysed(where, history, pattern):
        s = trend.series
        starts = {c.index for c in trend.changes}
        console.print(f"[bold]{escape(s.name)}[/] ({len(s.points)} nights)", highlight=False)
        for i, point in enumerate(s.points):
            mark = "  [red]<- change point[/]" if i in starts else ""
            console.print(f"  {point.started_at}  {shown(s.metric, point.value)}{mark}",
                          highlight=False)  # fmt: skip
        for c in trend.changes:
            console.print(
                f"  change point {c.night}: {shown(c.metric, c.before)} -> "
                f"{shown(c.metric, c.after)} ({c.shift:+.0%}, p={c.p_value:.1g}); "
                f"{escape(c.cause)}",
                highlight=False, soft_wrap=True,
            )  # fmt: skip
    for flaky in flaky_jobs(history.jobs):
        if pattern in flaky.key.text or not pattern:
            console.print(f"[yellow]flaky:[/] {escape(flaky.key.text)} flipped pass/fail "
                          f"{flaky.flips} times with no input changed", highlight=False)  # fmt: skip


@command(
    "record",
    group=history_app,
    examples=(
        "etdeploy history record nights/*/results.jsonl --store postgresql://farm@db/etdeploy",
    ),
)
def history_record_command(
    sources: list[Path] = typer.Argument(..., metavar="RESULTS...", help="results.jsonl or farm.json files of farm nights (or single results)."),
    store: str = typer.Option(None, "--store", metavar="PATH|URL", help=STORE_HELP),
) -> None:  # fmt: skip
    """Record farm nights into the history, or replay them.

    A job the history holds already (by its id) is not added twice, so results.jsonl
    can always be replayed."""
    from etdeploy.history.night import store_location
    from etdeploy.history.records import record_of
    from etdeploy.history.store import open_store
    from etdeploy.results import load_results

    loaded = []
    for source in sources:
        if not source.is_file():
            raise UsageError(f"{source}: no such file", "give a farm's OUT/results.jsonl")
        loaded.append((source, [record_of(r) for r in load_results(source)]))
    with open_store(store_location(store)) as opened:
        for source, records in loaded:
            done = opened.record(records, source=str(source.resolve()))
            console.print(f"{escape(str(source))}: {done.added} job(s) recorded, "
                          f"{done.already} already there", highlight=False)  # fmt: skip


@command(
    "export",
    group=history_app,
    examples=("etdeploy history export latency --format csv --out latency.csv",),
)
def history_export_command(
    pattern: str = typer.Argument(None, metavar="[PATTERN]", help="Only the series matching PATTERN."),
    fmt: str = typer.Option("csv", "--format", metavar="csv|json", help="CSV (one row per series and night) or JSON (series with points and change points)."),
    out: str = typer.Option("-", "--out", "-o", metavar="PATH|-", help="Where to write (default: stdout)."),
    store: str = typer.Option(None, "--store", metavar="PATH|URL", help=STORE_HELP),
    since: str = typer.Option(None, "--since", metavar="DATE", help=SINCE_HELP),
) -> None:  # fmt: skip
    """Export series as CSV or JSON.

    CSV rows (series, night, value, job id), or a JSON document with each series'
    points and change points."""
    if fmt not in ("csv", "json"):
        raise UsageError(f"--format {fmt!r}: not csv or json", "give --format csv or --format json")
    where, history = _history(store, since)
    trends = _analysed(where, history, pattern)
    if fmt == "json":
        emit_json({"schema": "etdeploy.history-export/1", "store": where,
                   "series": [_series_json(t) for t in trends]}, out)  # fmt: skip
        return
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["series", "model", "backend", "quantization", "device", "metric",
                     "started_at", "value", "job_id", "change_point"])  # fmt: skip
    for trend in trends:
        s, starts = trend.series, {c.index for c in trend.changes}
        for i, p in enumerate(s.points):
            k = s.key
            writer.writerow([s.name, k.model, k.backend, k.quantization, k.device, s.metric,
                             p.started_at, repr(p.value), p.record.job_uid, int(i in starts)])  # fmt: skip
    _write_text(buffer.getvalue(), out)


@command(
    "trend",
    group=history_app,
    examples=("etdeploy history trend --out trend.html --since 2026-09-01",),
)
def history_trend_command(
    out: Path = typer.Option(..., "--out", "-o", metavar="PATH", help="The HTML page to write."),
    pattern: str = typer.Argument(None, metavar="[PATTERN]", help="Only the series matching PATTERN."),
    store: str = typer.Option(None, "--store", metavar="PATH|URL", help=STORE_HELP),
    since: str = typer.Option(None, "--since", metavar="DATE", help=SINCE_HELP),
) -> None:  # fmt: skip
    """Write the trend page: one small plot per series, its change points marked.

    Each change point names the input that changed that night; flaky jobs are
    listed. Self-contained HTML."""
    from etdeploy.history.changes import flaky_jobs
    from etdeploy.history.trend import write_trend_page

    where, history = _history(store, since)
    trends = _analysed(where, history, pattern)
    write_trend_page(out, trends, flaky_jobs(history.jobs), title=f"etdeploy trends ({where})")
    console.print(f"{len(trends)} series drawn in {escape(str(out))}", highlight=False)


def _series_json(trend: TrendSeries) -> dict[str, Any]:
    s: Series = trend.series
    return {
        "name": s.name, "model": s.key.model, "backend": s.key.backend,
        "quantization": s.key.quantization, "device": s.key.device, "metric": s.metric,
        "points": [{"started_at": p.started_at, "value": p.value, "job_id": p.record.job_uid}
                   for p in s.points],
        "change_points": [
            {"night": c.night, "index": c.index, "before": c.before, "after": c.after,
             "shift": c.shift, "p_value": c.p_value,
             "changed": [{"input": i.name, "before": i.before, "after": i.after}
                         for i in c.changed]}
            for c in trend.changes
        ],
    }  # fmt: skip


def _write_text(text: str, out: str) -> None:
    if out == "-":
        sys.stdout.write(text)
        return
    from etdeploy.atomic import atomic_write

    atomic_write(Path(out), text.encode("utf-8"))
    err_console.print(f"written to {escape(out)}", highlight=False)
