"""`etdeploy sizecheck`: does this fit the store, and if not, what to cut.

Starts without torch or executorch: the .pte is read with generated flatbuffer readers.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from etdeploy.cli._app import (
    JSON_HELP,
    check_json_target,
    command,
    console,
    emit_json,
    is_verbose,
    json_to_stdout,
    note,
)
from etdeploy.errors import CheckFailed

if TYPE_CHECKING:
    from etdeploy.sizecheck.breakdown import Breakdown
    from etdeploy.sizecheck.check import SizeReport


@command(
    "sizecheck",
    examples=(
        "etdeploy sizecheck model.pte                       # Play base module + App Store app",
        "etdeploy sizecheck model.pte libs/ --extra 35MB    # the whole module",
        "etdeploy sizecheck model.pte --store play --delivery on-demand",
        "etdeploy sizecheck model.pte --budget 150MB --json -",
        "etdeploy sizecheck assets.bin --any-file",
    ),
)
def sizecheck_command(
    paths: list[Path] = typer.Argument(..., metavar="PATH", help="A .pte, its libraries, any directory (summed recursively)."),
    store: str | None = typer.Option(None, "--store", metavar="STORE", help="play, appstore or all (default: sizecheck.store in etdeploy.toml, else all).", rich_help_panel="Targets"),
    delivery: list[str] = typer.Option(
        [], "--delivery", metavar="NAME", rich_help_panel="Targets",
        help="base, feature, install-time, fast-follow, on-demand, ai-pack, "
        "ai-pack-install-time, ai-pack-fast-follow, ai-pack-on-demand, apk (Play); "
        "app, app-clip, odr, odr-hosted, background-assets (App Store). Repeat for several. "
        "Default: sizecheck.deliveries in etdeploy.toml, else Play base module and App Store app.",
    ),
    budget: str | None = typer.Option(None, "--budget", metavar="SIZE", help="Your own limit on the download size, e.g. 150MB (decimal).", rich_help_panel="Targets"),
    budget_raw: bool = typer.Option(False, "--budget-raw", help="Hold --budget against raw bytes, not the download.", rich_help_panel="Targets"),
    extra: str | None = typer.Option(None, "--extra", metavar="SIZE", help="The rest of the app, added to the total: 12MB, 1.5GB, 123.", rich_help_panel="Targets"),
    json_out: str | None = typer.Option(None, "--json", metavar="PATH|-", help=JSON_HELP.format(what="size report", schema="etdeploy.sizecheck/1"), rich_help_panel="Output"),
    any_file: bool = typer.Option(False, "--any-file", help="Size files that are not .pte programs (no breakdown).", rich_help_panel="Measuring"),
    top: int = typer.Option(10, "--top", min=0, metavar="N", help="How many of the largest tensors to list.", rich_help_panel="Output"),
    level9: bool = typer.Option(True, "--level9/--no-level9", help="Also measure gzip -9 (Android Studio's figure); costs a second deflate.", rich_help_panel="Measuring"),
    estimate: str | None = typer.Option(
        None, "--estimate", metavar="HOW", rich_help_panel="Measuring",
        help="exact: deflate every byte (the default; cached by content, so a file measured "
        "before costs nothing). sample: deflate a spread of chunks per part, for multi-GB files, "
        "with the error bound it measured; download verdicts are judged at the top of that bound.",
    ),
    no_cache: bool = typer.Option(False, "--no-cache", help="Measure afresh; neither read nor write the measurement cache.", rich_help_panel="Measuring"),
    config: Path | None = typer.Option(None, "--config", metavar="PATH", help="The etdeploy.toml to read sizecheck.* and limits.* from (default: the nearest one).", rich_help_panel="Output"),
) -> None:  # fmt: skip
    """Check files against Google Play and App Store size limits; exit 1 when over.

    Flags override sizecheck.* in etdeploy.toml; its limits.* keys replace built-in figures.
    """
    from etdeploy.cli._feedback import Feedback
    from etdeploy.config import load_config
    from etdeploy.sizecheck.check import report_to_json
    from etdeploy.sizecheck.compress import ANALYZER_LEVEL, PLAY_LEVEL
    from etdeploy.sizecheck.limits import DOWNLOAD, RAW
    from etdeploy.sizecheck.summary import resolve_settings
    from etdeploy.units import format_bytes

    check_json_target(json_out)
    settings = resolve_settings(
        load_config(config), store=store, deliveries=delivery, budget=budget, extra=extra,
        estimate=estimate,
    )  # fmt: skip
    levels = (PLAY_LEVEL, ANALYZER_LEVEL) if level9 else (PLAY_LEVEL,)
    to_stdout = json_to_stdout(json_out)
    with Feedback() as feedback:
        feedback.status(f"measuring {len(paths)} path(s)")
        report = settings.check(
            paths, any_file=any_file, levels=levels,
            budget_measure=RAW if budget_raw else DOWNLOAD, use_cache=not no_cache,
        )  # fmt: skip
    doc = report_to_json(report, top=top, config_path=settings.config_path)
    if json_out is not None:
        emit_json(doc, json_out)
    if not to_stdout:
        if settings.config_path is not None:
            note(f"settings from {settings.config_path}")
        render_report(report, top)
    if report.failed:
        over = [v for v in report.verdicts if v.status == "over"]
        first = over[0]
        sampled = any(v.uncertainty_bytes for v in over)
        raise CheckFailed(
            f"over {first.limit.label} ({format_bytes(first.limit.bytes)}) by "
            f"{format_bytes(first.excess_bytes)}"
            + (f", and {len(over) - 1} more" if len(over) > 1 else "")
            + (f" ({report.estimate_label}, judged at the top of its bound)" if sampled else ""),
            "measure exactly (drop --estimate sample) before cutting anything"
            if sampled
            else "see the breakdown for what to cut; int8 weights save about three quarters "
            "of float weight bytes",
        )


def render_report(report: SizeReport, top: int) -> None:
    """The sizes and the verdicts, a line each. What it is made of, the largest
    tensors, the int8 estimate and where each limit was read follow with -v, or
    when something does not fit (then they say what to cut)."""
    from etdeploy.sizecheck.check import FITS

    detailed = is_verbose() or any(v.status != FITS for v in report.verdicts)
    _render_sizes(report)
    _render_verdicts(report, sources=detailed)
    if detailed:
        for f in report.files:
            if f.breakdown is not None:
                _render_breakdown(f.path, f.breakdown, top)
    elif any(f.breakdown is not None for f in report.files):
        note("what it is made of, its largest tensors and where each limit was read: add -v")
    _render_notes(report, detailed)


def _render_sizes(report: SizeReport) -> None:
    from etdeploy.units import format_bytes

    files = Table(box=None, pad_edge=False)
    files.add_column("file")
    files.add_column("raw", justify="right")
    files.add_column("download (gzip -6)", justify="right")
    files.add_column("gzip -9", justify="right")
    # Always said: a sampled figure is an estimate within a bound, an exact one is not.
    files.add_column("measured")
    for f in report.files:
        files.add_row(
            escape(str(f.path)), format_bytes(f.raw_bytes), format_bytes(f.download_bytes),
            format_bytes(f.level9_bytes) if f.level9_bytes is not None else "-",
            f.estimate_label + (" (cached)" if f.cached else ""),
        )  # fmt: skip
    if report.extra_bytes:
        files.add_row(
            "--extra", format_bytes(report.extra_bytes), format_bytes(report.extra_bytes), "", ""
        )
    if len(report.files) > 1 or report.extra_bytes:
        files.add_row(
            "[bold]total[/]", format_bytes(report.raw_bytes), format_bytes(report.download_bytes),
            format_bytes(report.level9_bytes) if report.level9_bytes is not None else "-",
            report.estimate_label,
        )  # fmt: skip
    console.print(files)


def _render_verdicts(report: SizeReport, *, sources: bool) -> None:
    from etdeploy.sizecheck.limits import DOWNLOAD
    from etdeploy.units import format_bytes

    verdicts = Table(box=None, pad_edge=False)
    verdicts.add_column("target", no_wrap=True)
    verdicts.add_column("limit", justify="right", no_wrap=True)
    verdicts.add_column("measured", justify="right")
    verdicts.add_column("verdict")
    style = {"fits": "green", "over": "bold red", "warning": "yellow"}
    read: dict[str, str] = {}
    for v in report.verdicts:
        what = "download" if v.limit.measure == DOWNLOAD else "raw"
        verdicts.add_row(
            escape(v.limit.label), format_bytes(v.limit.bytes), f"{format_bytes(v.measured_bytes)} {what}",
            f"[{style[v.status]}]{v.describe()}[/]",
        )  # fmt: skip
        if v.limit.read_on:
            read.setdefault(v.limit.source, v.limit.read_on)
    console.print(verdicts)
    if sources:
        for url, read_on in read.items():
            console.print(
                f"[dim]source (read {read_on}): {escape(url)}[/]", highlight=False, soft_wrap=True
            )


def _render_breakdown(path: Path, b: Breakdown, top: int) -> None:
    from etdeploy.units import format_bytes

    parts = Table(title=f"{escape(str(path))}: what it is made of")
    parts.add_column("part")
    parts.add_column("bytes", justify="right")
    parts.add_column("share", justify="right")
    parts.add_column("gzip -6 ratio", justify="right")
    for g in b.groups():
        share = g.size / b.file_size * 100 if b.file_size else 0.0
        ratio = f"{g.ratio:.2f}" if g.ratio is not None else "-"
        label = g.label + (f" ({g.count} spans)" if g.count > 1 else "")
        parts.add_row(escape(label), format_bytes(g.size), f"{share:.1f}%", ratio)
    console.print(parts)
    if top and b.tensors:
        tensors = Table(
            title=f"largest {min(top, len(b.tensors))} of {len(b.tensors)} constant tensors"
        )
        tensors.add_column("name / key")
        tensors.add_column("shape")
        tensors.add_column("dtype")
        tensors.add_column("bytes", justify="right")
        tensors.add_column("where")
        for t in b.largest(top):
            who = t.name or (f"sha256 {t.key[:12]}…" if t.key else "(unnamed)")
            shape = "x".join(str(s) for s in t.shape) if t.shape else "?"
            where = t.location + (f" ({t.backend})" if t.backend else "")
            dtype = _torch_dtype(t.dtype) if t.dtype else "?"
            tensors.add_row(escape(who), shape, dtype, format_bytes(t.nbytes), where)
        console.print(tensors)
    q = b.quantization
    if q.tensors:
        console.print(
            f"int8 weights (estimate): {q.tensors} float weight tensors, "
            f"{format_bytes(q.float_bytes)} -> {format_bytes(q.quantized_bytes)}, "
            f"saving about {format_bytes(q.saved_bytes)} raw. [dim]{q.note}[/]"
        )


def _render_notes(report: SizeReport, detailed: bool) -> None:
    """Notes on stderr, none with -q. A limit's caveat (an older figure, an
    exclusive bound) matters near that limit: said with -v or when it does not
    fit; the breakdown's notes go with the breakdown."""
    from etdeploy.sizecheck.check import FITS, limit_note

    quiet_limits = set() if is_verbose() else {
        limit_note(v.limit) for v in report.verdicts if v.status == FITS and v.limit.note
    }  # fmt: skip
    texts = [n for f in report.files if detailed and f.breakdown for n in f.breakdown.notes]
    texts += [n for n in report.notes if n not in quiet_limits]
    for text in dict.fromkeys(texts):
        note(f"note: {text}")


def _torch_dtype(scalar_type: str) -> str:
    """The .pte names ScalarType members (float, long); show torch's names (float32,
    int64), as build, inspect and run do."""
    from etdeploy.builder.lower import _scalar_name

    return _scalar_name(scalar_type.upper())
