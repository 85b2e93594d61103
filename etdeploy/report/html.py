"""One self-contained HTML file for a run or a farm, laid out as a daily page:
the summary, the matrix (each cell a link to its job), the regressions, the
jobs that did not run, every job as one line (failures, errors and regressions
open, the rest collapsed), the plots, and the tables every job shares (the store
limits, each with its source) once at the end.

Self-contained means it opens from an attachment or an artefact store with no
network: the CSS is inline, the plots are PNGs in data: URIs (etdeploy.report.plots,
where matplotlib is imported when a report is written, not before), nothing is
fetched and no script runs. Every string from a result is escaped.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from etdeploy.atomic import atomic_write
from etdeploy.report.html_format import count, e, num, regression_value, size
from etdeploy.report.html_job import job_section, status_class, status_label
from etdeploy.report.plots import plots_html
from etdeploy.report.plots_base import Job
from etdeploy.results.baseline import Regression, compare_to_baseline
from etdeploy.results.jobs import JobKey, NotRun, failure_kind, job_key, summarize, unique
from etdeploy.results.result import RunResult, SizeVerdict
from etdeploy.units import format_ms

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px;
       color: #1b1b1b; background: #fff; }
h1 { margin: 0 0 4px; font-size: 22px; } h2 { margin-top: 28px; border-bottom: 1px solid #ddd; }
h3 { margin: 0 0 6px; font-size: 16px; }
.meta { color: #555; margin: 0 0 16px; }
.summary span { display: inline-block; margin-right: 14px; padding: 2px 8px; border-radius: 4px; }
table { border-collapse: collapse; margin: 6px 0 12px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.matrix td.cell { min-width: 120px; text-align: center; font-weight: 600; }
table.matrix td.cell a { color: inherit; text-decoration: none; display: block; }
table.matrix td.cell small { display: block; font-weight: 400; }
.status-passed { background: #e8f5e9; color: #1b5e20; }
.status-failed { background: #ffebee; color: #b71c1c; }
.status-error.infra { background: #fff3e0; color: #bf360c; }
.status-error.input { background: #f3e5f5; color: #4a148c; }
.status-skipped { background: #f5f5f5; color: #616161; }
.status-not-run { background: #fffde7; color: #8d6e00; }
.status-missing { background: #fafafa; color: #999; }
td.regressed { outline: 3px solid #b71c1c; outline-offset: -3px; color: #b71c1c; }
.badge { font-size: 12px; padding: 1px 6px; border-radius: 3px; font-weight: 600; }
details.job { border: 1px solid #ddd; border-left-width: 6px; border-radius: 4px; padding: 4px 12px;
              margin: 6px 0; background: #fff; color: inherit; }
details.job > summary { cursor: pointer; padding: 2px 0; }
details.job[open] > summary { border-bottom: 1px solid #eee; margin-bottom: 6px; padding-bottom: 6px; }
details.job-passed { border-left-color: #2e7d32; }
details.job-failed { border-left-color: #c62828; }
details.job-error { border-left-color: #e65100; }
details.job.regressed { border-left-color: #c62828; }
/* Followed from the matrix: keep the job's summary line in view above its body. */
.job-body { scroll-margin-top: 48px; }
.cols { display: flex; flex-wrap: wrap; gap: 18px; }
.reason { font-weight: 600; }
.hint { color: #444; }
pre { background: #f6f6f6; padding: 8px; overflow-x: auto; max-height: 420px; font-size: 12px;
      white-space: pre-wrap; word-break: break-all; }
ul.regressions li { color: #b71c1c; }
.plots { display: flex; flex-wrap: wrap; gap: 8px 24px; align-items: flex-start; }
.plots figure { margin: 0; flex: 1 1 560px; max-width: 100%; }
.plots figure.wide { flex-basis: 100%; }
.plots figcaption { font-weight: 600; margin: 6px 0; }
img.plot { max-width: 100%; border: 1px solid #eee; }
.muted { color: #777; }
span.pass { color: #1b5e20; font-weight: 600; } span.fail { color: #b71c1c; font-weight: 600; }
"""


def write_html(
    results: Sequence[RunResult],
    path: Path,
    *,
    baseline: Sequence[RunResult] | None = None,
    regressions: Sequence[Regression] | None = None,
    title: str = "etdeploy report",
    not_run: Sequence[NotRun] = (),
    links: Sequence[tuple[str, str]] = (),
) -> None:
    """Write the HTML report of `results` to `path`, atomically.

    With `baseline`, regressions are computed with compare_to_baseline's
    defaults; pass `regressions` instead to use other thresholds. `not_run`:
    the planned jobs without a result (skipped as impossible, or never
    reported), in the matrix and listed with their reasons.
    """
    results = list(results)
    if regressions is None:
        regressions = compare_to_baseline(results, baseline) if baseline is not None else []
    base_by_key = {job_key(r): r for r in baseline or ()}
    jobs = [Job(i, r, job_key(r)) for i, r in enumerate(results)]
    flagged: dict[JobKey, list[Regression]] = {}
    for regression in regressions:
        if regression.is_regression:  # a history's single-night outlier is listed only
            flagged.setdefault(regression.key, []).append(regression)

    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{e(title)}</h1>",
        _header(results, regressions, baseline is not None, not_run),
        *(f'<p class="links"><a href="{e(href)}">{e(text)}</a></p>' for text, href in links),
        "<h2>Matrix</h2>",
        _matrix(jobs, flagged, not_run),
    ]
    if regressions:
        parts += ["<h2>Regressions against the baseline</h2>", _regression_table(regressions)]
    if not_run:
        parts += ['<h2 id="not-run">Skipped and not run</h2>', _not_run_table(not_run)]
    parts.append("<h2>Jobs</h2>")
    if jobs:
        parts.append(
            '<p class="muted">Failed, errored and regressed jobs are open; click a line to open the others.</p>'
        )
    parts += [job_section(job, flagged.get(job.key, []), base_by_key.get(job.key)) for job in jobs]
    base_latency = {key: r.latency_ms for key, r in base_by_key.items() if r.latency_ms is not None}
    parts += ["<h2>Plots</h2>", plots_html(jobs, baseline=base_latency)]
    limits = _store_limits(results)
    if limits:
        parts += ['<h2 id="store-limits">Store limits</h2>', limits]
    parts.append("</body></html>\n")
    atomic_write(Path(path), "\n".join(parts).encode("utf-8"))


# -- header, matrix, regressions, not run ---------------------------------------------------


def _header(
    results: Sequence[RunResult],
    regressions: Sequence[Regression],
    has_baseline: bool,
    not_run: Sequence[NotRun],
) -> str:
    s = summarize(results)
    starts = sorted(r.started_at for r in results if r.started_at)
    versions = ", ".join(sorted({r.etdeploy for r in results if r.etdeploy})) or "?"
    when = f"jobs started {starts[0]} to {starts[-1]}" if starts else "no jobs"
    made = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    spans = [
        f'<span class="status-passed">{s["passed"]} passed</span>',
        f'<span class="status-failed">{s["failed"]} failed</span>',
        f'<span class="status-error infra">{count(s["infrastructure_errors"], "infrastructure error")}</span>',
        f'<span class="status-error input">{count(s["errors"] - s["infrastructure_errors"], "input error")}</span>',
    ]
    if has_baseline or regressions:
        failing = sum(1 for r in regressions if r.is_regression)
        spans.append(f'<span class="status-failed">{count(failing, "regression")}</span>')
    skipped = sum(1 for n in not_run if n.skipped)
    if skipped:
        spans.append(f'<span class="status-skipped">{skipped} skipped</span>')
    if len(not_run) - skipped:
        spans.append(f'<span class="status-not-run">{len(not_run) - skipped} not run</span>')
    return (
        f'<p class="meta">{s["total"]} jobs; {e(when)}; etdeploy {e(versions)}; '
        f"report written {made}</p>"
        f'<p class="summary" id="summary">{"".join(spans)}</p>'
    )


def _cell_detail(result: RunResult) -> str:
    """The small line of a matrix cell, under its status word."""
    if result.status == "passed":
        median = result.latency_ms.median if result.latency_ms is not None else None
        return format_ms(median) if median is not None else ""
    if result.status == "failed":
        worst = result.verdict.worst if result.verdict is not None else None
        if failure_kind(result) == "numerics" and worst is not None:
            return f"max abs {num(worst.max_abs)}"
        return ""
    return result.error.kind if result.error is not None else ""


def _matrix(
    jobs: Sequence[Job], flagged: dict[JobKey, list[Regression]], not_run: Sequence[NotRun]
) -> str:
    if not jobs and not not_run:
        return '<p class="muted">No results.</p>'
    # Rows and columns in the order the jobs came (a farm's: its spec's order).
    keys = [job.key for job in jobs] + [n.key for n in not_run]
    rows = unique((key.model, key.variant) for key in keys)
    devices = unique(key.device for key in keys)
    # The last result of a key is the one shown (a retried job's final attempt).
    cell = {(job.key.model, job.key.variant, job.key.device): job for job in jobs}
    unrun = {(n.key.model, n.key.variant, n.key.device): n for n in not_run}
    out = ['<table class="matrix" id="matrix"><thead><tr><th>model</th><th>backend</th>']
    out += [f'<th class="device">{e(d)}</th>' for d in devices]
    out.append("</tr></thead><tbody>")
    for model, variant in rows:
        out.append(f'<tr><th class="model">{e(model)}</th><th class="variant">{e(variant)}</th>')
        for device in devices:
            found = cell.get((model, variant, device))
            if found is None:
                out.append(_unrun_cell(unrun.get((model, variant, device))))
                continue
            regressed = flagged.get(found.key, [])
            detail = _cell_detail(found.result)
            classes = f"cell {status_class(found.result)}"
            if regressed:
                classes += " regressed"
                note = f"{len(regressed)} regression(s)"
                detail = f"{detail} · {note}" if detail else note
            out.append(
                f'<td class="{classes}" data-status="{e(found.result.status)}" '
                f'data-key="{e(found.key.label)}" title="{e(found.key.label)}">'
                f'<a href="#job-{found.position}">{e(status_label(found.result, bool(regressed)))}'
                f"<small>{e(detail)}</small></a></td>"
            )
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _unrun_cell(job: NotRun | None) -> str:
    if job is None:  # not in the matrix at all (an excluded cell)
        return '<td class="cell status-missing" data-status="missing">&mdash;</td>'
    status = "skipped" if job.skipped else "not-run"
    detail = "cannot run" if job.skipped else "no result"
    return (
        f'<td class="cell status-{status}" data-status="{status}" data-key="{e(job.key.label)}" '
        f'title="{e(job.key.label)}: {e(job.reason)}"><a href="#not-run">{e(job.status)}'
        f"<small>{detail}</small></a></td>"
    )


def _regression_table(regressions: Sequence[Regression]) -> str:
    out = [
        '<table class="regressions" id="regressions"><thead><tr><th>job</th><th>kind</th>'
        "<th>baseline</th><th>now</th><th>what</th></tr></thead><tbody>"
    ]
    for r in regressions:
        out.append(
            f"<tr><td>{e(r.key.label)}</td><td>{e(r.kind)}{e(f' ({r.alarm})' if r.alarm else '')}</td>"
            f"<td class=num>{e(regression_value(r.baseline, r.kind))}</td>"
            f"<td class=num>{e(regression_value(r.current, r.kind))}</td><td>{e(r.message)}</td></tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def _not_run_table(not_run: Sequence[NotRun]) -> str:
    out = [
        '<table class="not-run"><thead><tr><th>job</th><th>status</th><th>why</th></tr></thead><tbody>'
    ]
    for job in not_run:
        status = "skipped" if job.skipped else "not-run"
        out.append(
            f'<tr><td>{e(job.key.label)}</td><td class="status-{status}">{e(job.status)}</td>'
            f"<td>{e(job.reason)}</td></tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


# -- what every job shares -----------------------------------------------------------------


def _store_limits(results: Sequence[RunResult]) -> str:
    """Each store limit the jobs were measured against, once, with its source and
    the date it was read; the jobs' size lines refer here."""
    limits: dict[tuple[str, int, str | None], SizeVerdict] = {}
    for result in results:
        for v in result.size.verdicts if result.size is not None else ():
            limits.setdefault((v.key, v.limit_bytes, v.source), v)
    if not limits:
        return ""
    out = [
        "<table class=store-limits><thead><tr><th>limit</th><th>measure</th><th>limit</th>"
        "<th>kind</th><th>source (read on)</th><th>note</th></tr></thead><tbody>"
    ]
    for v in limits.values():
        bound = "at most" if v.inclusive in (True, None) else "less than"
        out.append(
            f"<tr><td>{e(v.label)}</td><td>{e(v.measure or '')}</td>"
            f"<td class=num>{e(bound)} {e(size(v.limit_bytes))}</td><td>{e(v.severity or '')}</td>"
            f"<td>{e(v.source or '')} ({e(v.read_on or '?')})</td><td>{e(v.note or '')}</td></tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)
