"""One self-contained HTML file for a run or a farm: the matrix at a glance, the
plots, then every job in detail.

Self-contained means it opens from an attachment or an artefact store with no
network: the CSS is inline, the plots are PNGs in data: URIs (etdeploy.report.plots,
where matplotlib is imported when a report is written, not before), and nothing
is fetched. Every string from a result is escaped.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Sequence
from pathlib import Path

from etdeploy.atomic import atomic_write
from etdeploy.report.baseline import Regression, compare_to_baseline
from etdeploy.report.common import (
    JobKey,
    error_type,
    failure_kind,
    failure_message,
    job_key,
    joined_logs,
    metrics_by_output,
    unique,
)
from etdeploy.report.plots import Job, plots_html
from etdeploy.report.result import Latency, RunResult, SizeSummary, Verdict
from etdeploy.report.schema import summarize

# A result has one metrics row per output and sample; past this the table goes
# behind a <details> and only the per-output summary shows.
_METRIC_ROWS_OPEN = 24

# What a key-value table holds: numbers and text, None (and "") for rows left out.
Cell = str | int | float | None

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px;
       color: #1b1b1b; background: #fff; }
h1 { margin: 0 0 4px; font-size: 22px; } h2 { margin-top: 32px; border-bottom: 1px solid #ddd; }
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
.status-missing { background: #fafafa; color: #999; }
td.regressed { outline: 3px solid #b71c1c; outline-offset: -3px; }
.badge { font-size: 12px; padding: 1px 6px; border-radius: 3px; margin-left: 6px; }
section.job { border: 1px solid #ddd; border-left-width: 6px; border-radius: 4px; padding: 10px 14px;
              margin: 14px 0; }
section.job.status-passed { border-left-color: #2e7d32; background: #fff; color: inherit; }
section.job.status-failed { border-left-color: #c62828; background: #fff; color: inherit; }
section.job.status-error { border-left-color: #e65100; background: #fff; color: inherit; }
.cols { display: flex; flex-wrap: wrap; gap: 18px; }
.reason { font-weight: 600; }
.hint { color: #444; }
pre { background: #f6f6f6; padding: 8px; overflow-x: auto; max-height: 420px; font-size: 12px;
      white-space: pre-wrap; word-break: break-all; }
ul.regressions li { color: #b71c1c; }
img.plot { max-width: 100%; border: 1px solid #eee; }
.muted { color: #777; }
span.pass { color: #1b5e20; font-weight: 600; } span.fail { color: #b71c1c; font-weight: 600; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def write_html(
    results: Sequence[RunResult],
    path: Path,
    *,
    baseline: Sequence[RunResult] | None = None,
    regressions: Sequence[Regression] | None = None,
    title: str = "etdeploy report",
) -> None:
    """Write the HTML report of `results` to `path`, atomically.

    With `baseline`, regressions are computed with compare_to_baseline's
    defaults; pass `regressions` instead to use other thresholds.
    """
    results = list(results)
    if regressions is None:
        regressions = compare_to_baseline(results, baseline) if baseline is not None else []
    base_by_key = {job_key(r): r for r in baseline or ()}
    jobs = [Job(i, r, job_key(r)) for i, r in enumerate(results)]
    flagged: dict[JobKey, list[Regression]] = {}
    for regression in regressions:
        flagged.setdefault(regression.key, []).append(regression)

    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        _header(results, regressions, baseline is not None),
        "<h2>Matrix</h2>",
        _matrix(jobs, flagged),
    ]
    if regressions:
        parts += ["<h2>Regressions against the baseline</h2>", _regression_table(regressions)]
    parts += ["<h2>Plots</h2>", plots_html(jobs), "<h2>Jobs</h2>"]
    parts += [_job_section(job, flagged.get(job.key, []), base_by_key.get(job.key)) for job in jobs]
    parts.append("</body></html>\n")
    atomic_write(Path(path), "\n".join(parts).encode("utf-8"))


# -- header, matrix, regressions --------------------------------------------------------


def _header(
    results: Sequence[RunResult], regressions: Sequence[Regression], has_baseline: bool
) -> str:
    s = summarize(results)
    starts = sorted(r.started_at for r in results if r.started_at)
    versions = ", ".join(sorted({r.etdeploy for r in results if r.etdeploy})) or "?"
    when = f"jobs started {starts[0]} to {starts[-1]}" if starts else "no jobs"
    made = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    spans = [
        f'<span class="status-passed">{s["passed"]} passed</span>',
        f'<span class="status-failed">{s["failed"]} failed</span>',
        f'<span class="status-error infra">{_count(s["infrastructure_errors"], "infrastructure error")}</span>',
        f'<span class="status-error input">{_count(s["errors"] - s["infrastructure_errors"], "input error")}</span>',
    ]
    if has_baseline or regressions:
        spans.append(f'<span class="status-failed">{_count(len(regressions), "regression")}</span>')
    return (
        f'<p class="meta">{s["total"]} jobs; {_e(when)}; etdeploy {_e(versions)}; '
        f"report written {made}</p>"
        f'<p class="summary" id="summary">{"".join(spans)}</p>'
    )


def _status_class(result: RunResult) -> str:
    if result.status == "error":
        return "status-error " + ("infra" if result.is_infrastructure else "input")
    return f"status-{result.status}"


def _cell_text(result: RunResult) -> tuple[str, str]:
    """(label, detail) of a matrix cell."""
    if result.status == "passed":
        median = result.latency_ms.median if result.latency_ms is not None else None
        return "pass", f"{median:.4g} ms" if median is not None else ""
    if result.status == "failed":
        kind = failure_kind(result)
        worst = result.verdict.worst if result.verdict is not None else None
        if kind == "numerics" and worst is not None:
            return "FAIL numerics", f"max abs {_num(worst.max_abs)}"
        return f"FAIL {kind}", ""
    who = "infra" if result.is_infrastructure else "input"
    return f"ERROR {who}", result.error.kind if result.error is not None else ""


def _matrix(jobs: Sequence[Job], flagged: dict[JobKey, list[Regression]]) -> str:
    if not jobs:
        return '<p class="muted">No results.</p>'
    rows = sorted(unique((job.key.model, job.key.variant) for job in jobs))
    devices = sorted(unique(job.key.device for job in jobs))
    # The last result of a key is the one shown (a retried job's final attempt).
    cell = {(job.key.model, job.key.variant, job.key.device): job for job in jobs}
    out = ['<table class="matrix" id="matrix"><thead><tr><th>model</th><th>backend</th>']
    out += [f'<th class="device">{_e(d)}</th>' for d in devices]
    out.append("</tr></thead><tbody>")
    for model, variant in rows:
        out.append(f'<tr><th class="model">{_e(model)}</th><th class="variant">{_e(variant)}</th>')
        for device in devices:
            found = cell.get((model, variant, device))
            if found is None:
                out.append('<td class="cell status-missing" data-status="missing">&mdash;</td>')
                continue
            label, detail = _cell_text(found.result)
            classes = f"cell {_status_class(found.result)}"
            regressed = flagged.get(found.key, [])
            if regressed:
                classes += " regressed"
                note = f"{len(regressed)} regression(s)"
                detail = f"{detail} · {note}" if detail else note
            out.append(
                f'<td class="{classes}" data-status="{_e(found.result.status)}" '
                f'data-key="{_e(found.key.label)}" title="{_e(found.key.label)}">'
                f'<a href="#job-{found.position}">{_e(label)}<small>{_e(detail)}</small></a></td>'
            )
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _regression_table(regressions: Sequence[Regression]) -> str:
    out = [
        '<table class="regressions" id="regressions"><thead><tr><th>job</th><th>kind</th>'
        "<th>baseline</th><th>now</th><th>what</th></tr></thead><tbody>"
    ]
    for r in regressions:
        out.append(
            f"<tr><td>{_e(r.key.label)}</td><td>{_e(r.kind)}</td><td class=num>{_e(_value(r.baseline, r.kind))}"
            f"</td><td class=num>{_e(_value(r.current, r.kind))}</td><td>{_e(r.message)}</td></tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


# -- one job ------------------------------------------------------------------------------


def _job_section(job: Job, regressions: list[Regression], base: RunResult | None) -> str:
    result = job.result
    out = [
        f'<section class="job {_status_class(result)}" id="job-{job.position}">',
        f'<h3>{_e(job.key.label)}<span class="badge {_status_class(result)}">{_e(result.status)}</span></h3>',
    ]
    if result.status == "failed":
        out.append(f'<p class="reason">{_e(failure_message(result))}</p>')
    elif result.status == "passed":
        reason = result.verdict.reason if result.verdict is not None else ""
        out.append(f'<p class="reason">{_e(reason)}</p>')
    if regressions:
        out.append('<ul class="regressions">')
        out += [f"<li>{_e(r.kind)}: {_e(r.message)}</li>" for r in regressions]
        out.append("</ul>")
    if result.error is not None:
        out.append(_error_block(result))
    out.append('<div class="cols">')
    out.append(_facts(result))
    if result.latency_ms is not None:
        out.append(_latency_table(result.latency_ms, base.latency_ms if base else None))
    out.append(_memory_delegation(result))
    out.append("</div>")
    if result.verdict is not None:
        out.append(_verdict_block(result.verdict))
    host = result.host_check
    if host is not None:
        out.append("<h4>Host check (executorch's Python runtime on this machine)</h4><ul>")
        out.append(f"<li>device vs host: {_e(host.device_vs_host.reason)}</li>")
        out.append(f"<li>host vs reference: {_e(host.host_vs_reference.reason)}</li>")
        out.append("</ul>")
    if result.size is not None:
        out.append(_size_block(result.size))
    if result.warnings:
        out.append("<h4>Warnings</h4><ul class=warnings>")
        out += [f"<li>{_e(w)}</li>" for w in result.warnings]
        out.append("</ul>")
    logs = joined_logs(result)
    if logs:
        # Open by default only where the log is the evidence: a run that errored.
        opened = " open" if result.status == "error" else ""
        out.append(
            f"<details{opened}><summary>log (clipped)</summary><pre>{_e(logs)}</pre></details>"
        )
    out.append("</section>")
    return "\n".join(out)


def _error_block(result: RunResult) -> str:
    error = result.error
    if error is None:
        return ""
    who = "device, transport or runner" if result.is_infrastructure else "bad input or usage"
    out = [
        f'<p class="reason">{_e(error_type(result))}: {_e(error.message)}</p>',
        f'<p class="muted">{_e(who)}; exit code {_e(result.exit_code)}; '
        f"retryable: {_e(error.retryable)}</p>",
    ]
    if error.hint:
        out.append(f'<p class="hint">hint: {_e(error.hint)}</p>')
    if error.command:
        out.append(f"<pre>{_e(error.command)}</pre>")
    return "\n".join(out)


def _facts(result: RunResult) -> str:
    job, device = result.job, result.device
    rows: list[tuple[str, Cell]] = [
        ("job id", job.id),
        ("started", result.started_at),
        ("seconds", result.seconds),
        ("iterations", f"{job.iterations} (+{job.warmup} warm-up)"),
        ("device", " ".join(part for part in (device.name, device.model, device.soc) if part)),
        (
            "os / abi",
            " ".join(part for part in (device.os, device.os_version, device.abi) if part),
        ),
        ("transport", device.transport),
    ]
    artifact = result.artifact
    if artifact is not None:
        built = artifact.built_with or {}
        rows += [
            ("program", f"{(artifact.sha256 or '?')[:12]}… {_bytes(artifact.size_bytes)}"),
            ("pte", artifact.pte),
            ("built with", ", ".join(f"{k} {v}" for k, v in built.items())),
        ]
    runner = result.runner
    if runner is not None:
        rows.append(("runner", f"{runner.flavor} {runner.version or ''} ({runner.abi})"))
    return _kv_table("job", rows)


def _latency_table(latency: Latency, base: Latency | None) -> str:
    rows: list[tuple[str, Cell]] = [
        ("n", latency.n),
        ("load", _ms(latency.load)),
        ("min", _ms(latency.min)),
        ("median", _ms(latency.median)),
        ("p90", _ms(latency.p90)),
        ("max", _ms(latency.max)),
        ("trimmed mean", _ms(latency.trimmed_mean)),
        ("stdev", _ms(latency.stdev)),
    ]
    if base is not None and base.median is not None:
        rows.append(("baseline median", _ms(base.median)))
    return _kv_table("latency", rows)


def _memory_delegation(result: RunResult) -> str:
    memory = result.memory
    rows: list[tuple[str, Cell]] = [
        ("planned arena", _bytes(memory.planned_bytes if memory is not None else None)),
        ("peak RSS", _bytes(memory.peak_rss_bytes if memory is not None else None)),
    ]
    delegation = result.artifact.delegation if result.artifact is not None else None
    if delegation is not None:
        total = delegation.delegated_nodes + delegation.non_delegated_nodes
        rows += [
            (
                "delegated",
                f"{delegation.share * 100:.1f}% ({delegation.delegated_nodes}/{total} nodes)",
            ),
            ("subgraphs", delegation.delegated_subgraphs),
        ]
    if memory is None and delegation is None:
        return ""
    out = [_kv_table("memory and delegation", rows)]
    if delegation is not None and delegation.by_op:
        out.append(
            "<table class=by-op><thead><tr><th>op</th><th>delegated</th><th>not</th></tr></thead><tbody>"
        )
        for op, counts in delegation.by_op.items():
            out.append(
                f"<tr><td>{_e(op)}</td><td class=num>{_e(counts.delegated)}</td>"
                f"<td class=num>{_e(counts.non_delegated)}</td></tr>"
            )
        out.append("</tbody></table>")
    return "<div>" + "".join(out) + "</div>"


def _verdict_block(verdict: Verdict) -> str:
    out = ["<h4>Outputs against the reference</h4>"]
    if verdict.on_noise:
        out.append('<p class="hint">judged on random inputs, not real samples</p>')
    worst = verdict.worst
    if worst is not None:
        out.append(
            f"<p>worst: <b>{_e(worst.name)}</b> on sample {_e(worst.sample)}: "
            f"max abs {_e(_num(worst.max_abs))}, SQNR {_e(_db(worst.sqnr_db))}, "
            f"cosine {_e(_num(worst.cosine))}</p>"
        )
    out.append(_budget_block(verdict))
    metrics = verdict.metrics
    out.append(
        "<table class=outputs><thead><tr><th>output</th><th>samples</th><th>worst max abs</th>"
        "<th>worst SQNR</th><th>min cosine</th><th>allclose</th><th>top-1 agree</th></tr></thead><tbody>"
    )
    for (_, name), rows in metrics_by_output(verdict).items():
        # A NaN cosine (a NaN output) says nothing about the others' minimum.
        cosines = [r.cosine for r in rows if not math.isnan(r.cosine)]
        top1 = [r.top1_agree for r in rows if r.top1_agree is not None]
        out.append(
            f"<tr><td>{_e(name)}</td><td class=num>{len(rows)}</td>"
            f"<td class=num>{_e(_num(max(r.max_abs for r in rows)))}</td>"
            f"<td class=num>{_e(_db(min(r.sqnr_db for r in rows)))}</td>"
            f"<td class=num>{_e(_num(min(cosines)) if cosines else '-')}</td>"
            f"<td>{sum(r.allclose for r in rows)}/{len(rows)}</td>"
            f"<td>{f'{sum(top1)}/{len(top1)}' if top1 else '-'}</td></tr>"
        )
    out.append("</tbody></table>")
    if metrics:
        opened = " open" if len(metrics) <= _METRIC_ROWS_OPEN and not verdict.passed else ""
        out.append(
            f"<details{opened}><summary>all {len(metrics)} metrics (output × sample)</summary>"
        )
        out.append(
            "<table class=metrics><thead><tr><th>output</th><th>sample</th><th>shape</th><th>max abs</th>"
            "<th>max rel</th><th>mean abs</th><th>SQNR</th><th>cosine</th><th>allclose</th>"
            "<th>top-1</th></tr></thead><tbody>"
        )
        for r in metrics:
            out.append(
                f"<tr><td>{_e(r.name)}</td><td>{_e(r.sample)}</td>"
                f"<td>{_e(list(r.shape))}</td><td class=num>{_e(_num(r.max_abs))}</td>"
                f"<td class=num>{_e(_num(r.max_rel))}</td>"
                f"<td class=num>{_e(_num(r.mean_abs))}</td>"
                f"<td class=num>{_e(_db(r.sqnr_db))}</td><td class=num>{_e(_num(r.cosine))}</td>"
                f"<td>{_e(r.allclose)}</td><td>{_e(r.top1_agree)}</td></tr>"
            )
        out.append("</tbody></table></details>")
    return "\n".join(out)


def _budget_block(verdict: Verdict) -> str:
    """The error budget: each stage, its numbers, its limit; the one that broke it marked."""
    if not verdict.budget:
        return ""
    out = [
        "<table class=budget><thead><tr><th>stage</th><th>measured</th><th>max abs</th>"
        "<th>SQNR</th><th>top-1</th><th>steps</th><th>limit</th><th></th></tr></thead><tbody>"
    ]
    for stage in verdict.budget:
        top1 = "-" if stage.top1_agreement is None else f"{stage.top1_agreement:.0%}"
        steps = "-" if stage.steps is None else f"{stage.steps:.1f}"
        mark = "<span class=pass>within</span>" if stage.passed else "<span class=fail>over</span>"
        out.append(
            f"<tr><td>{_e(stage.stage)}</td><td>{_e(stage.measured)}</td>"
            f"<td class=num>{_e(_num(stage.max_abs))}</td><td class=num>{_e(_db(stage.sqnr_db))}</td>"
            f"<td class=num>{top1}</td><td class=num>{steps}</td>"
            f"<td class=muted>{_e(stage.limit)}</td><td>{mark}</td></tr>"
        )
    out.append("</tbody></table>")
    kinds = ", ".join(
        f"{k.name}: {k.kind}{'' if k.declared else ' (guessed from its shape)'}"
        for k in verdict.kinds
    )
    if kinds:
        out.append(f"<p class=muted>output kinds: {_e(kinds)}</p>")
    return "<h4>Error budget</h4>" + "\n".join(out)


def _size_block(size: SizeSummary) -> str:
    raw = size.total_raw_bytes if size.total_raw_bytes is not None else size.raw_bytes
    download = (
        size.total_download_bytes if size.total_download_bytes is not None else size.download_bytes
    )
    out = [
        "<h4>Size against store limits</h4>",
        f"<p>raw {_e(_bytes(raw))}, download {_e(_bytes(download))} "
        f"<span class=muted>({_e(size.estimate or '')})</span>; "
        f"{'passes' if size.passed else '<b>fails</b>'}</p>",
        "<table class=size><thead><tr><th>limit</th><th>measure</th><th>measured</th><th>limit</th>"
        "<th>verdict</th><th>source (read on)</th></tr></thead><tbody>",
    ]
    for v in size.verdicts:
        cls = {"fits": "status-passed", "over": "status-failed"}.get(v.status, "status-error infra")
        out.append(
            f"<tr><td>{_e(v.label)}</td><td>{_e(v.measure)}</td>"
            f"<td class=num>{_e(_bytes(v.measured_bytes))}</td>"
            f"<td class=num>{_e(_bytes(v.limit_bytes))}</td>"
            f'<td class="{cls}">{_e(v.text if v.text is not None else v.status)}</td>'
            f"<td>{_e(v.source or '')} ({_e(v.read_on or '')})</td></tr>"
        )
    out.append("</tbody></table>")
    return "\n".join(out)


def _kv_table(caption: str, rows: list[tuple[str, Cell]]) -> str:
    body = "".join(
        f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows if v not in (None, "")
    )
    return f"<table class=kv><caption>{_e(caption)}</caption><tbody>{body}</tbody></table>"


# -- formatting ---------------------------------------------------------------------------


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _num(value: float | None) -> str:
    # NaN (the cosine of a NaN output) is undefined, as a missing value is.
    if value is None or math.isnan(value):
        return "-"
    if math.isinf(value):
        return "non-finite"
    return f"{value:.3g}"


def _db(value: float) -> str:
    if math.isinf(value):
        return "exact (∞)" if value > 0 else "non-finite"
    return f"{value:.1f} dB"


def _ms(value: float | None) -> str | None:
    return None if value is None else f"{value:.4g} ms"


def _bytes(value: int | None) -> str | None:
    """Decimal units, as the stores state their limits."""
    if value is None:
        return None
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f} {unit} ({value:,} bytes)"
    return f"{value} bytes"


def _value(value: float | str | None, kind: str) -> str:
    if isinstance(value, float):
        if kind == "sqnr":
            return _db(value)
        if kind == "latency":
            return f"{value:.4g} ms"
        return _num(value) if kind == "max_abs" else f"{value:.4g}"
    return "-" if value is None else str(value)
