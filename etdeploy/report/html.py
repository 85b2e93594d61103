"""One self-contained HTML file for a run or a farm: the matrix at a glance, the
plots, then every job in detail.

Self-contained means it opens from an attachment or an artefact store with no
network: the CSS is inline, the plots are PNGs in data: URIs drawn with
matplotlib's Agg canvas (no pyplot, so a caller's own backend is left alone),
and nothing is fetched. Every string from a result is escaped.
"""

from __future__ import annotations

import base64
import html
import io
import math
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from etdeploy.atomic import atomic_write
from etdeploy.report.baseline import Regression, compare_to_baseline, max_abs_of, sqnr_of
from etdeploy.report.common import (
    JobKey,
    error_type,
    failure_kind,
    failure_message,
    is_infrastructure,
    job_key,
    joined_logs,
    unique,
)
from etdeploy.report.schema import summarize

# A result has one metrics row per output and sample; past this the table goes
# behind a <details> and only the per-output summary shows.
_METRIC_ROWS_OPEN = 24
_PLOT_LABEL_CHARS = 48
# Rows per plot; past this a plot shows the worst rows (a PNG over 2**16 pixels
# tall cannot be drawn, and nobody reads 500 bars).
_MAX_PLOT_ROWS = 80
# The colours of the matrix, reused in the plots so a reader maps one to the other.
_COLOURS = {"passed": "#2e7d32", "failed": "#c62828", "infra": "#e65100", "input": "#6a1b9a"}

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
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def write_html(
    results: Sequence[dict[str, Any]],
    path: Path,
    *,
    baseline: Sequence[dict[str, Any]] | None = None,
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
    jobs = [(i, r, job_key(r)) for i, r in enumerate(results)]
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
    parts += ["<h2>Plots</h2>", _plots_html(jobs), "<h2>Jobs</h2>"]
    parts += [
        _job_section(i, r, key, flagged.get(key, []), base_by_key.get(key)) for i, r, key in jobs
    ]
    parts.append("</body></html>\n")
    atomic_write(Path(path), "\n".join(parts).encode("utf-8"))


# -- header, matrix, regressions --------------------------------------------------------


def _header(
    results: list[dict[str, Any]], regressions: Sequence[Regression], has_baseline: bool
) -> str:
    s = summarize(results)
    starts = sorted(str(r["started_at"]) for r in results if r.get("started_at"))
    versions = ", ".join(sorted({str(r["etdeploy"]) for r in results if r.get("etdeploy")})) or "?"
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


def _status_class(result: dict[str, Any]) -> str:
    status = result.get("status")
    if status == "error":
        return "status-error " + ("infra" if is_infrastructure(result) else "input")
    return f"status-{status}" if status in ("passed", "failed") else "status-error input"


def _cell_text(result: dict[str, Any]) -> tuple[str, str]:
    """(label, detail) of a matrix cell."""
    status = result.get("status")
    if status == "passed":
        median = (result.get("latency_ms") or {}).get("median")
        return "pass", f"{median:.4g} ms" if median is not None else ""
    if status == "failed":
        kind = failure_kind(result)
        worst = (result.get("verdict") or {}).get("worst") or {}
        if kind == "numerics" and worst:
            return "FAIL numerics", f"max abs {_num(max_abs_of(worst))}"
        return f"FAIL {kind}", ""
    error = result.get("error") or {}
    who = "infra" if is_infrastructure(result) else "input"
    return f"ERROR {who}", str(error.get("kind", ""))


def _matrix(
    jobs: list[tuple[int, dict[str, Any], JobKey]], flagged: dict[JobKey, list[Regression]]
) -> str:
    if not jobs:
        return '<p class="muted">No results.</p>'
    rows = sorted(unique((k.model, k.variant) for _, _, k in jobs))
    devices = sorted(unique(k.device for _, _, k in jobs))
    # The last result of a key is the one shown (a retried job's final attempt).
    cell: dict[tuple[str, str, str], tuple[int, dict[str, Any], JobKey]] = {}
    for index, result, key in jobs:
        cell[(key.model, key.variant, key.device)] = (index, result, key)
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
            index, result, key = found
            label, detail = _cell_text(result)
            classes = f"cell {_status_class(result)}"
            regressed = flagged.get(key, [])
            if regressed:
                classes += " regressed"
                note = f"{len(regressed)} regression(s)"
                detail = f"{detail} · {note}" if detail else note
            out.append(
                f'<td class="{classes}" data-status="{_e(result.get("status"))}" '
                f'data-key="{_e(key.label)}" title="{_e(key.label)}">'
                f'<a href="#job-{index}">{_e(label)}<small>{_e(detail)}</small></a></td>'
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


def _job_section(
    index: int,
    result: dict[str, Any],
    key: JobKey,
    regressions: list[Regression],
    base: dict[str, Any] | None,
) -> str:
    status = str(result.get("status"))
    out = [
        f'<section class="job {_status_class(result)}" id="job-{index}">',
        f'<h3>{_e(key.label)}<span class="badge {_status_class(result)}">{_e(status)}</span></h3>',
    ]
    if status == "failed":
        out.append(f'<p class="reason">{_e(failure_message(result))}</p>')
    elif status == "passed":
        out.append(f'<p class="reason">{_e((result.get("verdict") or {}).get("reason", ""))}</p>')
    if regressions:
        out.append('<ul class="regressions">')
        out += [f"<li>{_e(r.kind)}: {_e(r.message)}</li>" for r in regressions]
        out.append("</ul>")
    if result.get("error"):
        out.append(_error_block(result))
    out.append('<div class="cols">')
    out.append(_facts(result))
    if result.get("latency_ms"):
        out.append(_latency_table(result["latency_ms"], (base or {}).get("latency_ms")))
    out.append(_memory_delegation(result))
    out.append("</div>")
    verdict = result.get("verdict")
    if verdict:
        out.append(_verdict_block(verdict))
    host = result.get("host_check")
    if host:
        out.append("<h4>Host check (executorch's Python runtime on this machine)</h4><ul>")
        for name, check in host.items():
            if isinstance(check, dict):
                out.append(f"<li>{_e(name.replace('_', ' '))}: {_e(check.get('reason', ''))}</li>")
        out.append("</ul>")
    if result.get("size"):
        out.append(_size_block(result["size"]))
    if result.get("warnings"):
        out.append("<h4>Warnings</h4><ul class=warnings>")
        out += [f"<li>{_e(w)}</li>" for w in result["warnings"]]
        out.append("</ul>")
    logs = joined_logs(result)
    if logs:
        # Open by default only where the log is the evidence: a run that errored.
        opened = " open" if status == "error" else ""
        out.append(
            f"<details{opened}><summary>log (clipped)</summary><pre>{_e(logs)}</pre></details>"
        )
    out.append("</section>")
    return "\n".join(out)


def _error_block(result: dict[str, Any]) -> str:
    error = result["error"]
    who = "device, transport or runner" if is_infrastructure(result) else "bad input or usage"
    out = [
        f'<p class="reason">{_e(error_type(result))}: {_e(error.get("message", ""))}</p>',
        f'<p class="muted">{_e(who)}; exit code {_e(result.get("exit_code"))}; '
        f"retryable: {_e(bool(error.get('retryable')))}</p>",
    ]
    if error.get("hint"):
        out.append(f'<p class="hint">hint: {_e(error["hint"])}</p>')
    if error.get("command"):
        out.append(f"<pre>{_e(error['command'])}</pre>")
    return "\n".join(out)


def _facts(result: dict[str, Any]) -> str:
    job, device = result.get("job") or {}, result.get("device") or {}
    artifact, runner = result.get("artifact") or {}, result.get("runner") or {}
    rows: list[tuple[str, Any]] = [
        ("job id", job.get("id")),
        ("started", result.get("started_at")),
        ("seconds", result.get("seconds")),
        ("iterations", f"{job.get('iterations')} (+{job.get('warmup')} warm-up)"),
        ("device", " ".join(str(device.get(k)) for k in ("name", "model", "soc") if device.get(k))),
        (
            "os / abi",
            " ".join(str(device.get(k)) for k in ("os", "os_version", "abi") if device.get(k)),
        ),
        ("transport", device.get("transport")),
    ]
    if artifact:
        built = artifact.get("built_with") or {}
        rows += [
            (
                "program",
                f"{str(artifact.get('sha256') or '?')[:12]}… {_bytes(artifact.get('size_bytes'))}",
            ),
            ("pte", artifact.get("pte")),
            ("built with", ", ".join(f"{k} {v}" for k, v in built.items())),
        ]
    if runner:
        rows.append(
            (
                "runner",
                f"{runner.get('flavor')} {runner.get('version') or ''} ({runner.get('abi')})",
            )
        )
    return _kv_table("job", rows)


def _latency_table(latency: dict[str, Any], base: dict[str, Any] | None) -> str:
    rows = [
        (name, _ms(latency.get(name)))
        for name in ("load", "min", "median", "p90", "max", "trimmed_mean", "stdev")
    ]
    rows.insert(0, ("n", latency.get("n")))
    if base and base.get("median") is not None:
        rows.append(("baseline median", _ms(base.get("median"))))
    return _kv_table("latency", [(k.replace("_", " "), v) for k, v in rows])


def _memory_delegation(result: dict[str, Any]) -> str:
    memory = result.get("memory") or {}
    rows: list[tuple[str, Any]] = [
        ("planned arena", _bytes(memory.get("planned_bytes"))),
        ("peak RSS", _bytes(memory.get("peak_rss_bytes"))),
    ]
    delegation = (result.get("artifact") or {}).get("delegation")
    if delegation:
        total = delegation.get("delegated_nodes", 0) + delegation.get("non_delegated_nodes", 0)
        rows += [
            (
                "delegated",
                f"{delegation.get('share', 0) * 100:.1f}% ({delegation.get('delegated_nodes')}/{total} nodes)",
            ),
            ("subgraphs", delegation.get("delegated_subgraphs")),
        ]
    if not memory and not delegation:
        return ""
    out = [_kv_table("memory and delegation", rows)]
    by_op = (delegation or {}).get("by_op") or {}
    if by_op:
        out.append(
            "<table class=by-op><thead><tr><th>op</th><th>delegated</th><th>not</th></tr></thead><tbody>"
        )
        for op, counts in by_op.items():
            out.append(
                f"<tr><td>{_e(op)}</td><td class=num>{_e(counts.get('delegated'))}</td>"
                f"<td class=num>{_e(counts.get('non_delegated'))}</td></tr>"
            )
        out.append("</tbody></table>")
    return "<div>" + "".join(out) + "</div>"


def _verdict_block(verdict: dict[str, Any]) -> str:
    out = ["<h4>Outputs against the reference</h4>"]
    if verdict.get("on_noise"):
        out.append('<p class="hint">judged on random inputs, not real samples</p>')
    worst = verdict.get("worst")
    if worst:
        out.append(
            f"<p>worst: <b>{_e(worst.get('name'))}</b> on sample {_e(worst.get('sample'))}: "
            f"max abs {_e(_num(max_abs_of(worst)))}, SQNR {_e(_db(sqnr_of(worst)))}, "
            f"cosine {_e(_num(worst.get('cosine')))}</p>"
        )
    metrics = verdict.get("metrics") or []
    by_output: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for row in metrics:
        by_output.setdefault((row.get("output"), row.get("name")), []).append(row)
    out.append(
        "<table class=outputs><thead><tr><th>output</th><th>samples</th><th>worst max abs</th>"
        "<th>worst SQNR</th><th>min cosine</th><th>allclose</th><th>top-1 agree</th></tr></thead><tbody>"
    )
    for (_, name), rows in by_output.items():
        cosines = [r["cosine"] for r in rows if r.get("cosine") is not None]
        top1 = [r["top1_agree"] for r in rows if r.get("top1_agree") is not None]
        out.append(
            f"<tr><td>{_e(name)}</td><td class=num>{len(rows)}</td>"
            f"<td class=num>{_e(_num(max(max_abs_of(r) for r in rows)))}</td>"
            f"<td class=num>{_e(_db(min(sqnr_of(r) for r in rows)))}</td>"
            f"<td class=num>{_e(_num(min(cosines)) if cosines else '-')}</td>"
            f"<td>{sum(bool(r.get('allclose')) for r in rows)}/{len(rows)}</td>"
            f"<td>{f'{sum(top1)}/{len(top1)}' if top1 else '-'}</td></tr>"
        )
    out.append("</tbody></table>")
    if metrics:
        opened = " open" if len(metrics) <= _METRIC_ROWS_OPEN and not verdict.get("passed") else ""
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
                f"<tr><td>{_e(r.get('name'))}</td><td>{_e(r.get('sample'))}</td>"
                f"<td>{_e(r.get('shape'))}</td><td class=num>{_e(_num(max_abs_of(r)))}</td>"
                f"<td class=num>{_e(_num(r.get('max_rel')))}</td>"
                f"<td class=num>{_e(_num(r.get('mean_abs')))}</td>"
                f"<td class=num>{_e(_db(sqnr_of(r)))}</td><td class=num>{_e(_num(r.get('cosine')))}</td>"
                f"<td>{_e(r.get('allclose'))}</td><td>{_e(r.get('top1_agree'))}</td></tr>"
            )
        out.append("</tbody></table></details>")
    return "\n".join(out)


def _size_block(size: dict[str, Any]) -> str:
    out = [
        "<h4>Size against store limits</h4>",
        f"<p>raw {_e(_bytes(size.get('total_raw_bytes', size.get('raw_bytes'))))}, download "
        f"{_e(_bytes(size.get('total_download_bytes', size.get('download_bytes'))))} "
        f"<span class=muted>({_e(size.get('estimate', ''))})</span>; "
        f"{'passes' if size.get('passed') else '<b>fails</b>'}</p>",
        "<table class=size><thead><tr><th>limit</th><th>measure</th><th>measured</th><th>limit</th>"
        "<th>verdict</th><th>source (read on)</th></tr></thead><tbody>",
    ]
    for v in size.get("verdicts") or []:
        cls = {"fits": "status-passed", "over": "status-failed"}.get(
            v.get("status"), "status-error infra"
        )
        out.append(
            f"<tr><td>{_e(v.get('label'))}</td><td>{_e(v.get('measure'))}</td>"
            f"<td class=num>{_e(_bytes(v.get('measured_bytes')))}</td>"
            f"<td class=num>{_e(_bytes(v.get('limit_bytes')))}</td>"
            f'<td class="{cls}">{_e(v.get("text", v.get("status")))}</td>'
            f"<td>{_e(v.get('source', ''))} ({_e(v.get('read_on', ''))})</td></tr>"
        )
    out.append("</tbody></table>")
    return "\n".join(out)


def _kv_table(caption: str, rows: list[tuple[str, Any]]) -> str:
    body = "".join(
        f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows if v not in (None, "")
    )
    return f"<table class=kv><caption>{_e(caption)}</caption><tbody>{body}</tbody></table>"


# -- plots --------------------------------------------------------------------------------


def _plots_html(jobs: list[tuple[int, dict[str, Any], JobKey]]) -> str:
    out = []
    for title, draw in (
        ("Latency per iteration", _plot_latency),
        ("Error against the reference, per output", _plot_errors),
        ("Delegation coverage", _plot_delegation),
        ("Size against store limits", _plot_size),
    ):
        drawn = _render(draw, jobs)
        out.append(f"<h3>{_e(title)}</h3>")
        if drawn is None:
            out.append('<p class="muted">no data</p>')
            continue
        uri, note = drawn
        if note:
            out.append(f'<p class="muted">{_e(note)}</p>')
        out.append(f'<img class="plot" alt="{_e(title)}" src="{uri}">')
    return "\n".join(out)


def _render(
    draw: Any, jobs: list[tuple[int, dict[str, Any], JobKey]]
) -> tuple[str, str | None] | None:
    """Draw with `draw(jobs, Figure)` -> (figure, note) or None when it has
    nothing to show; the figure as a PNG data: URI, and the note."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with warnings.catch_warnings():
        # A model name with a glyph DejaVu lacks draws as a box; not worth a warning.
        warnings.filterwarnings("ignore", message="Glyph .* missing")
        drawn = draw(jobs, Figure)
        if drawn is None:
            return None
        fig, note = drawn
        FigureCanvasAgg(fig)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=96, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii"), note


def _cap(rows: list[Any], badness: Any, what: str) -> tuple[list[Any], str | None]:
    """At most _MAX_PLOT_ROWS of `rows`: the worst by `badness` (higher is worse),
    in their original order, and a note saying what was left out."""
    if len(rows) <= _MAX_PLOT_ROWS:
        return rows, None
    ranked = sorted(range(len(rows)), key=lambda i: badness(rows[i]), reverse=True)
    keep = sorted(ranked[:_MAX_PLOT_ROWS])
    return [rows[i] for i in keep], f"showing the {_MAX_PLOT_ROWS} {what} of {len(rows)}"


def _short(text: str) -> str:
    return text if len(text) <= _PLOT_LABEL_CHARS else text[: _PLOT_LABEL_CHARS - 1] + "…"


def _colour(result: dict[str, Any]) -> str:
    status = result.get("status")
    if status == "error":
        return _COLOURS["infra" if is_infrastructure(result) else "input"]
    return _COLOURS.get(str(status), "#555")


def _height(rows: int) -> float:
    return 1.2 + 0.32 * rows


def _plot_latency(jobs: list[tuple[int, dict[str, Any], JobKey]], figure: Any) -> Any:
    rows = [(r, k) for _, r, k in jobs if (r.get("latency_ms") or {}).get("iterations")]
    if not rows:
        return None
    rows, note = _cap(rows, lambda row: row[0]["latency_ms"].get("median") or 0.0, "slowest jobs")
    fig = figure(figsize=(9, _height(len(rows))))
    ax = fig.add_subplot()
    everything: list[float] = []
    for y, (result, _) in enumerate(rows):
        times = [float(t) for t in result["latency_ms"]["iterations"]]
        # A strip of every iteration shows outliers and bimodality a box hides;
        # thinned evenly past 400 points so a long run stays readable.
        step = max(1, len(times) // 400)
        shown = times[::step]
        jitter = [((i * 0.618) % 1 - 0.5) * 0.5 for i in range(len(shown))]
        ax.scatter(
            shown, [y + j for j in jitter], s=14, alpha=0.6, color=_colour(result), linewidths=0
        )
        median = result["latency_ms"].get("median")
        if median is not None:
            ax.plot([median, median], [y - 0.35, y + 0.35], color="black", linewidth=2)
        everything += times
    positive = [t for t in everything if t > 0]
    if positive and max(positive) / min(positive) > 30:
        ax.set_xscale("log")  # jobs from microseconds to seconds on one axis
    ax.set_yticks(range(len(rows)), [_short(k.label) for _, k in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("ms per iteration (black bar: median)")
    ax.grid(axis="x", alpha=0.3)
    return fig, note


def _plot_errors(jobs: list[tuple[int, dict[str, Any], JobKey]], figure: Any) -> Any:
    rows: list[tuple[str, float, float, str]] = []
    for _, result, key in jobs:
        by_output: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
        for row in (result.get("verdict") or {}).get("metrics") or []:
            by_output.setdefault((row.get("output"), row.get("name")), []).append(row)
        for (_, name), metrics in by_output.items():
            worst_abs = max(max_abs_of(m) for m in metrics)
            worst_sqnr = min(sqnr_of(m) for m in metrics)
            # Coloured by the numerics verdict: a job failed on size had fine outputs.
            good = (result.get("verdict") or {}).get("passed")
            colour = _COLOURS["passed"] if good else _COLOURS["failed"]
            rows.append((_short(f"{key.label}: {name}"), worst_abs, worst_sqnr, colour))
    if not rows:
        return None
    rows, note = _cap(rows, lambda row: -row[2], "outputs with the lowest SQNR")
    fig = figure(figsize=(11, _height(len(rows))))
    left, right = fig.subplots(1, 2, sharey=True)
    ys = list(range(len(rows)))
    finite_abs = [a for _, a, _, _ in rows if 0 < a < math.inf]
    floor = min(finite_abs) / 10 if finite_abs else 1e-9
    top = max(finite_abs) if finite_abs else 1.0
    for y, (_, err, _, colour) in zip(ys, rows, strict=True):
        if err == 0:
            left.text(floor, y, " exact (0)", va="center", fontsize=8)
        elif math.isinf(err):
            left.barh(y, top * 10, color="#b71c1c", left=floor)
            left.text(floor, y, " non-finite", va="center", fontsize=8, color="white")
        else:
            left.barh(y, err - floor, left=floor, color=colour)
    left.set_xscale("log")
    left.set_xlabel("worst max abs error (log)")
    finite_sqnr = [s for _, _, s, _ in rows if math.isfinite(s)]
    cap = max([*finite_sqnr, 0.0]) + 10
    for y, (_, _, sqnr, colour) in zip(ys, rows, strict=True):
        if math.isinf(sqnr) and sqnr > 0:
            right.text(0, y, " exact (∞ dB)", va="center", fontsize=8)
        elif math.isinf(sqnr):
            right.text(0, y, " non-finite output", va="center", fontsize=8, color="#b71c1c")
        else:
            right.barh(y, sqnr, color=colour)
    right.set_xlim(min([*finite_sqnr, 0.0]), cap)
    right.set_xlabel("worst SQNR (dB, higher is better)")
    left.set_yticks(ys, [label for label, _, _, _ in rows])
    left.set_ylim(len(rows) - 0.5, -0.5)
    for ax in (left, right):
        ax.grid(axis="x", alpha=0.3)
    return fig, note


def _plot_delegation(jobs: list[tuple[int, dict[str, Any], JobKey]], figure: Any) -> Any:
    # One bar per program, not per device: the same .pte has the same coverage everywhere.
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for _, result, key in jobs:
        delegation = (result.get("artifact") or {}).get("delegation")
        if delegation:
            seen[(key.model, key.variant)] = delegation
    if not seen:
        return None
    shown, note = _cap(
        list(seen.items()), lambda item: -float(item[1].get("share", 0)), "programs least delegated"
    )
    fig = figure(figsize=(8, _height(len(shown))))
    ax = fig.add_subplot()
    for y, (_, d) in enumerate(shown):
        share = float(d.get("share", 0)) * 100
        ax.barh(y, 100, color="#eeeeee")
        ax.barh(y, share, color="#1565c0")
        total = d.get("delegated_nodes", 0) + d.get("non_delegated_nodes", 0)
        ax.text(
            101,
            y,
            f"{share:.0f}% ({d.get('delegated_nodes', 0)}/{total} nodes)",
            va="center",
            fontsize=8,
        )
    ax.set_yticks(range(len(shown)), [_short(f"{m}[{v}]") for (m, v), _ in shown])
    ax.set_ylim(len(shown) - 0.5, -0.5)
    ax.set_xlim(0, 130)
    ax.set_xticks([0, 25, 50, 75, 100])
    ax.set_xlabel("share of graph nodes the backend claimed (%)")
    return fig, note


def _plot_size(jobs: list[tuple[int, dict[str, Any], JobKey]], figure: Any) -> Any:
    rows: list[tuple[str, float, str]] = []
    programs: dict[tuple[str, str], dict[str, Any]] = {}
    for _, result, key in jobs:
        if result.get("size"):
            programs[(key.model, key.variant)] = result["size"]
    for (model, variant), size in programs.items():
        for v in size.get("verdicts") or []:
            limit = v.get("limit_bytes") or 0
            if limit > 0:
                share = 100.0 * float(v.get("measured_bytes", 0)) / limit
                colour = {"fits": _COLOURS["passed"], "over": _COLOURS["failed"]}.get(
                    v.get("status"), _COLOURS["infra"]
                )
                rows.append(
                    (_short(f"{model}[{variant}]: {v.get('label', v.get('key'))}"), share, colour)
                )
    if not rows:
        return None
    rows, note = _cap(rows, lambda row: row[1], "limits closest to full")
    fig = figure(figsize=(9, _height(len(rows))))
    ax = fig.add_subplot()
    smallest = min([s for _, s, _ in rows if s > 0] or [1.0])
    base = 10 ** math.floor(math.log10(smallest) - 1)
    for y, (_, share, colour) in enumerate(rows):
        ax.barh(y, max(share, base) - base, left=base, color=colour)
        ax.text(max(share, base), y, f" {share:.3g}%", va="center", fontsize=8)
    ax.axvline(100, color="#b71c1c", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlim(base, max(1000.0, max(s for _, s, _ in rows) * 3))
    ax.set_yticks(range(len(rows)), [label for label, _, _ in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("measured size as % of the limit (log; dashed: the limit)")
    return fig, note


# -- formatting ---------------------------------------------------------------------------


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _num(value: Any) -> str:
    if value is None:
        return "-"
    value = float(value)
    if math.isinf(value):
        return "non-finite"
    return f"{value:.3g}"


def _db(value: float) -> str:
    if math.isinf(value):
        return "exact (∞)" if value > 0 else "non-finite"
    return f"{value:.1f} dB"


def _ms(value: Any) -> str | None:
    return None if value is None else f"{float(value):.4g} ms"


def _bytes(value: Any) -> str | None:
    """Decimal units, as the stores state their limits."""
    if value is None:
        return None
    n = int(value)
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit} ({n:,} bytes)"
    return f"{n} bytes"


def _value(value: float | str | None, kind: str) -> str:
    if isinstance(value, float):
        if kind == "sqnr":
            return _db(value)
        if kind == "latency":
            return f"{value:.4g} ms"
        return _num(value) if kind == "max_abs" else f"{value:.4g}"
    return "-" if value is None else str(value)
