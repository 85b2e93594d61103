"""One job of the HTML report (etdeploy.report.html): a collapsed <details>
whose summary line says what a daily reader needs (status, latency, why it
failed), opened where there is something to read (a failure, an error, a
regression). The matrix links to #job-N inside it, and a browser opens a
collapsed section it is sent into.

What every job shares (the store limits and their sources) is the page's, not
repeated here: a job's size is one line against those limits.
"""

from __future__ import annotations

import math

from etdeploy.report.html_accuracy import accuracy_block
from etdeploy.report.html_format import (
    Cell,
    count,
    db,
    e,
    kv_table,
    ms,
    num,
    regression_value,
    size,
)
from etdeploy.report.html_localization import localization_block
from etdeploy.report.html_memory import memory_block
from etdeploy.report.plots_base import Job
from etdeploy.report.text import joined_logs, metrics_by_output
from etdeploy.results.baseline import Regression
from etdeploy.results.jobs import error_type, failure_kind, failure_message
from etdeploy.results.result import Latency, RunResult, SizeSummary, Verdict
from etdeploy.results.result_memory import PART_LABELS
from etdeploy.units import format_ms

# A result has one metrics row per output and sample; past this the table stays
# closed even on a failure, and only the per-output summary shows.
_METRIC_ROWS_OPEN = 24
# At most this many rows of the per-sample table: the worst by max abs error.
_METRIC_ROWS_SHOWN = 64


def status_class(result: RunResult) -> str:
    if result.status == "error":
        return "status-error " + ("infra" if result.is_infrastructure else "input")
    return f"status-{result.status}"


def status_label(result: RunResult, regressed: bool) -> str:
    """The short word of a matrix cell and a job's badge: a passing job that
    regressed does not say pass."""
    if result.status == "passed":
        return "REGRESSED" if regressed else "pass"
    if result.status == "failed":
        return f"FAIL {failure_kind(result)}"
    return f"ERROR {'infra' if result.is_infrastructure else 'input'}"


def job_section(job: Job, regressions: list[Regression], base: RunResult | None) -> str:
    result = job.result
    # Open where there is something to read; a passing job is one line until asked.
    opened = " open" if result.status != "passed" or regressions else ""
    badge_class = (
        "status-failed" if regressions and result.status == "passed" else status_class(result)
    )
    out = [
        # job-<status>, not status-<status>: the section keeps a white background.
        f'<details class="job job-{result.status}{" regressed" if regressions else ""}"{opened} '
        f'data-key="{e(job.key.label)}">',
        f'<summary><span class="badge {badge_class}">{e(status_label(result, bool(regressions)))}</span>'
        f" <b>{e(job.key.label)}</b> <span class=muted>{e(_summary_note(result, regressions))}</span>"
        "</summary>",
        # The matrix's links point here: inside the <details>, so following one opens it.
        f'<div class="job-body" id="job-{job.position}">',
    ]
    if result.status == "failed":
        out.append(f'<p class="reason">{e(failure_message(result))}</p>')
    elif result.status == "passed":
        reason = result.verdict.reason if result.verdict is not None else ""
        out.append(f'<p class="reason">{e(reason)}</p>')
    if regressions:
        out.append('<ul class="regressions">')
        out += [f"<li>{e(r.kind)}: {e(r.message)}</li>" for r in regressions]
        out.append("</ul>")
    if result.error is not None:
        out.append(_error_block(result))
    out.append('<div class="cols">')
    out.append(_facts(result))
    if result.latency_ms is not None:
        out.append(_latency_table(result.latency_ms, base.latency_ms if base else None))
    out.append(_memory_delegation(result))
    out.append("</div>")
    out.append(memory_block(result, base))
    if result.verdict is not None:
        out.append(_verdict_block(result.verdict))
    if result.accuracy is not None:
        out.append(accuracy_block(result.accuracy))
    if result.localization is not None:
        out.append(localization_block(result.localization))
    host = result.host_check
    if host is not None:
        out.append("<h4>Host check (executorch's Python runtime on this machine)</h4><ul>")
        out.append(f"<li>device vs host: {e(host.device_vs_host.reason)}</li>")
        out.append(f"<li>host vs reference: {e(host.host_vs_reference.reason)}</li>")
        out.append("</ul>")
    if result.size is not None:
        out.append(_size_block(result.size))
    if result.warnings:
        out.append("<h4>Warnings</h4><ul class=warnings>")
        out += [f"<li>{e(w)}</li>" for w in result.warnings]
        out.append("</ul>")
    logs = joined_logs(result)
    if logs:
        # Open by default only where the log is the evidence: a run that errored.
        log_open = " open" if result.status == "error" else ""
        out.append(
            f"<details{log_open}><summary>log (clipped)</summary><pre>{e(logs)}</pre></details>"
        )
    out.append("</div></details>")
    return "\n".join(out)


def _summary_note(result: RunResult, regressions: list[Regression]) -> str:
    """The rest of a job's one line: why it is not a pass, else its numbers."""
    if result.status != "passed":
        why = failure_message(result) if result.status == "failed" else (
            result.error.message if result.error is not None else ""
        )  # fmt: skip
        return f"{why} · {count(len(regressions), 'regression')}" if regressions else why
    if regressions:
        # Kind and numbers: the whole message is in the section and the regressions table.
        first = regressions[0]
        where = first.output or (PART_LABELS.get(first.part, first.part) if first.part else None)
        what = f"{first.kind} regression" + (f" ({where})" if where else "")
        change = (
            f"{regression_value(first.baseline, first.kind)} -> "
            f"{regression_value(first.current, first.kind)}"
        )
        more = f" (+{len(regressions) - 1} more)" if len(regressions) > 1 else ""
        return f"{what}: {change}{more}"
    parts = []
    if result.latency_ms is not None and result.latency_ms.median is not None:
        parts.append(f"median {format_ms(result.latency_ms.median)}")
    worst = result.verdict.worst if result.verdict is not None else None
    if worst is not None:
        parts.append(f"SQNR {db(worst.sqnr_db)}")
    return " · ".join(parts)


def _error_block(result: RunResult) -> str:
    error = result.error
    if error is None:
        return ""
    who = "device, transport or runner" if result.is_infrastructure else "bad input or usage"
    out = [
        f'<p class="reason">{e(error_type(result))}: {e(error.message)}</p>',
        f'<p class="muted">{e(who)}; exit code {e(result.exit_code)}; '
        f"retryable: {e(error.retryable)}</p>",
    ]
    if error.hint:
        out.append(f'<p class="hint">hint: {e(error.hint)}</p>')
    if error.command:
        out.append(f"<pre>{e(error.command)}</pre>")
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
            ("program", f"{(artifact.sha256 or '?')[:12]}… {size(artifact.size_bytes)}"),
            ("pte", artifact.pte),
            ("built with", ", ".join(f"{k} {v}" for k, v in built.items())),
        ]
    runner = result.runner
    if runner is not None:
        rows.append(("runner", f"{runner.flavor} {runner.version or ''} ({runner.abi})"))
    return kv_table("job", rows)


def _latency_table(latency: Latency, base: Latency | None) -> str:
    rows: list[tuple[str, Cell]] = [
        ("n", latency.n),
        ("load", ms(latency.load)),
        ("min", ms(latency.min)),
        ("median", ms(latency.median)),
        ("p90", ms(latency.p90)),
        ("max", ms(latency.max)),
        ("trimmed mean", ms(latency.trimmed_mean)),
        ("stdev", ms(latency.stdev)),
    ]
    if base is not None and base.median is not None:
        rows.append(("baseline median", ms(base.median)))
    return kv_table("latency", rows)


def _memory_delegation(result: RunResult) -> str:
    memory = result.memory
    rows: list[tuple[str, Cell]] = [
        ("planned arena", size(memory.planned_bytes if memory is not None else None)),
        ("peak RSS", size(memory.peak_rss_bytes if memory is not None else None)),
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
    out = [kv_table("memory and delegation", rows)]
    if delegation is not None and delegation.by_op:
        out.append(
            "<table class=by-op><thead><tr><th>op</th><th>delegated</th><th>not</th></tr></thead><tbody>"
        )
        for op, counts in delegation.by_op.items():
            out.append(
                f"<tr><td>{e(op)}</td><td class=num>{e(counts.delegated)}</td>"
                f"<td class=num>{e(counts.non_delegated)}</td></tr>"
            )
        out.append("</tbody></table>")
    return "<div>" + "".join(out) + "</div>"


def judged_by_allclose(verdict: Verdict) -> bool:
    """Whether allclose against the reference decides this verdict. A quantized
    build is judged by its error budget instead (the quantization's accuracy,
    the device in quantization steps of the quantized program), and its outputs
    are not expected to be allclose to the float model. A verdict without a
    budget (written before budgets were) was judged by allclose."""
    return not verdict.budget or any(stage.rule == "allclose" for stage in verdict.budget)


def _verdict_block(verdict: Verdict) -> str:
    out = ["<h4>Outputs against the reference</h4>"]
    if verdict.on_noise:
        out.append('<p class="hint">judged on random inputs, not real samples</p>')
    worst = verdict.worst
    if worst is not None:
        out.append(
            f"<p>worst: <b>{e(worst.name)}</b> on sample {e(worst.sample)}: "
            f"max abs {e(num(worst.max_abs))}, SQNR {e(db(worst.sqnr_db))}, "
            f"cosine {e(num(worst.cosine))}</p>"
        )
    out.append(_budget_block(verdict))
    allclose_decides = judged_by_allclose(verdict)
    # Marked, and said why below the table, where allclose is only informative.
    mark = "" if allclose_decides else "<sup>†</sup>"
    metrics = verdict.metrics
    out.append(
        "<table class=outputs><thead><tr><th>output</th><th>samples</th><th>worst max abs</th>"
        f"<th>worst SQNR</th><th>min cosine</th><th>allclose{mark}</th><th>top-1 agree</th></tr>"
        "</thead><tbody>"
    )
    for (_, name), rows in metrics_by_output(verdict).items():
        # A NaN cosine (a NaN output) says nothing about the others' minimum.
        cosines = [r.cosine for r in rows if not math.isnan(r.cosine)]
        top1 = [r.top1_agree for r in rows if r.top1_agree is not None]
        allclose = f"{sum(r.allclose for r in rows)}/{len(rows)}"
        out.append(
            f"<tr><td>{e(name)}</td><td class=num>{len(rows)}</td>"
            f"<td class=num>{e(num(max(r.max_abs for r in rows)))}</td>"
            f"<td class=num>{e(db(min(r.sqnr_db for r in rows)))}</td>"
            f"<td class=num>{e(num(min(cosines)) if cosines else '-')}</td>"
            f"<td{'' if allclose_decides else ' class=muted'}>{allclose}{mark}</td>"
            f"<td>{f'{sum(top1)}/{len(top1)}' if top1 else '-'}</td></tr>"
        )
    out.append("</tbody></table>")
    if not allclose_decides:
        out.append(f'<p class="muted note">{_allclose_note(verdict)}</p>')
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
        # A test set of thousands: its worst rows, in sample order; the JSON has every one.
        worst_rows = set(
            sorted(range(len(metrics)), key=lambda i: -metrics[i].max_abs)[:_METRIC_ROWS_SHOWN]
        )
        shown = [r for i, r in enumerate(metrics) if i in worst_rows]
        for r in shown:
            out.append(
                f"<tr><td>{e(r.name)}</td><td>{e(r.sample)}</td>"
                f"<td>{e(list(r.shape))}</td><td class=num>{e(num(r.max_abs))}</td>"
                f"<td class=num>{e(num(r.max_rel))}</td>"
                f"<td class=num>{e(num(r.mean_abs))}</td>"
                f"<td class=num>{e(db(r.sqnr_db))}</td><td class=num>{e(num(r.cosine))}</td>"
                f"<td>{e(r.allclose)}</td><td>{e(r.top1_agree)}</td></tr>"
            )
        out.append("</tbody></table>")
        if len(shown) < len(metrics):
            out.append(
                f'<p class="muted note">the {len(shown)} largest errors of {len(metrics)}; '
                "the result's JSON has every sample</p>"
            )
        out.append("</details>")
    return "\n".join(out)


def _allclose_note(verdict: Verdict) -> str:
    """Why allclose fails on a passing quantized build, in the verdict's own limits."""
    thresholds = verdict.thresholds
    tolerance = f" (atol {thresholds.atol:g}, rtol {thresholds.rtol:g})" if thresholds else ""
    rules = "; ".join(f"{s.stage}: {s.limit}" for s in verdict.budget)
    return e(
        f"† allclose{tolerance} against the float model is shown for reference only: "
        "a quantized build is not expected to be that close to float. It is judged by "
        f"its error budget above ({rules})."
    )


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
            f"<tr><td>{e(stage.stage)}</td><td>{e(stage.measured)}</td>"
            f"<td class=num>{e(num(stage.max_abs))}</td><td class=num>{e(db(stage.sqnr_db))}</td>"
            f"<td class=num>{top1}</td><td class=num>{steps}</td>"
            f"<td class=muted>{e(stage.limit)}</td><td>{mark}</td></tr>"
        )
    out.append("</tbody></table>")
    kinds = ", ".join(
        f"{k.name}: {k.kind}{'' if k.declared else ' (guessed from its shape)'}"
        for k in verdict.kinds
    )
    if kinds:
        out.append(f"<p class=muted>output kinds: {e(kinds)}</p>")
    return "<h4>Error budget</h4>" + "\n".join(out)


def _size_block(summary: SizeSummary) -> str:
    """One line against the page's store-limits table; a row for each limit the
    program does not simply fit."""
    raw = summary.total_raw_bytes if summary.total_raw_bytes is not None else summary.raw_bytes
    download = (
        summary.total_download_bytes
        if summary.total_download_bytes is not None
        else summary.download_bytes
    )
    verdicts = summary.verdicts
    trouble = [v for v in verdicts if v.status != "fits"]
    if not trouble:
        closest = max(
            verdicts, key=lambda v: v.measured_bytes / max(v.limit_bytes, 1), default=None
        )
        closest_text = (
            f"; closest: {closest.label} at {100 * closest.measured_bytes / max(closest.limit_bytes, 1):.2g}%"
            if closest is not None
            else ""
        )
        verdict_text = f"fits all {count(len(verdicts), 'store limit')}{closest_text}"
    else:
        verdict_text = f"<b>{e(count(len(trouble), 'limit'))} not met</b>"
    out = [
        f'<p class="size-line"><b>Size</b>: raw {e(size(raw))}, download {e(size(download))} '
        f"<span class=muted>({e(summary.estimate or '')})</span>; "
        f'{verdict_text if trouble else e(verdict_text)} <a href="#store-limits">(limits)</a></p>'
    ]
    if trouble:
        out.append(
            "<table class=size><thead><tr><th>limit</th><th>measure</th><th>measured</th>"
            "<th>limit</th><th>verdict</th></tr></thead><tbody>"
        )
        for v in trouble:
            cls = "status-failed" if v.status == "over" else "status-error infra"
            out.append(
                f"<tr><td>{e(v.label)}</td><td>{e(v.measure or '')}</td>"
                f"<td class=num>{e(size(v.measured_bytes))}</td>"
                f"<td class=num>{e(size(v.limit_bytes))}</td>"
                f'<td class="{cls}">{e(v.text if v.text is not None else v.status)}</td></tr>'
            )
        out.append("</tbody></table>")
    return "\n".join(out)
