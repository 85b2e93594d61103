"""The task-accuracy section of a job in the HTML report: the metric for each program,
the paired differences with their intervals, and the samples device and eager
disagree on, worst first."""

from __future__ import annotations

import math

from etdeploy.report.html_format import e
from etdeploy.results.result import PairedDifference, TaskAccuracy


def accuracy_block(found: TaskAccuracy) -> str:
    as_pct = found.task == "classification"
    quantized = found.quantized_vs_eager is not None
    status = "ok" if found.passed else "bad"
    heads = ["metric", "float eager", *(["quantized eager"] if quantized else []), "device"]
    rows = []
    for score in found.scores:
        cells = [score.eager, *([score.quantized] if quantized else []), score.device]
        rows.append(
            f"<tr><th>{e(score.metric)}</th>"
            + "".join(f"<td class=num>{e(_value(v, as_pct))}</td>" for v in cells)
            + "</tr>"
        )
    paired = [p for p in (found.quantized_vs_eager, found.device_vs_eager) if p is not None]
    out = [
        f"<h4>Task accuracy: {e(found.task)} of {e(found.output)} on {found.samples} labelled "
        f"samples <span class=muted>({e(found.labels)})</span></h4>",
        f'<p class="{status}">{e(found.reason)}</p>',
        "<table><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in heads) + "</tr></thead>",
        "<tbody>" + "".join(rows) + "</tbody></table>",
        "<ul>" + "".join(f"<li>{e(_paired(p, as_pct))}</li>" for p in paired) + "</ul>",
    ]
    if found.disagreements:
        out.append(
            f"<details><summary>{found.disagreeing} sample(s) where device and eager disagree "
            "(worst first)</summary><table><thead><tr><th>sample</th><th>label</th>"
            "<th>eager</th><th>device</th><th>margin</th><th>file for --localize</th></tr>"
            "</thead><tbody>"
        )
        for d in found.disagreements:
            out.append(
                f"<tr><td>{e(d.sample)}</td><td>{e(d.label)}</td><td>{e(d.eager)}</td>"
                f"<td>{e(d.device)}</td><td class=num>{d.margin:.3g}</td>"
                f"<td><code>{e(d.input or '-')}</code></td></tr>"
            )
        out.append("</tbody></table></details>")
    return "\n".join(out)


def _value(value: float | None, as_pct: bool) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.2%}" if as_pct else f"{value:.4g}"


def _paired(paired: PairedDifference, as_pct: bool) -> str:
    scale, unit = (100, " pp") if as_pct else (1, "")
    p = "" if paired.p_value is None else f", p = {paired.p_value:.2g}"
    return (
        f"{paired.program} vs {paired.reference}: {paired.difference * scale:+.3g}{unit} "
        f"(95% CI {paired.ci_low * scale:+.3g}..{paired.ci_high * scale:+.3g}{unit}){p} "
        f"— {paired.method}"
    )
