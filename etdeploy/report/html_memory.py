"""A job's memory in the HTML report (etdeploy.report.html_job): the account per
phase (its parts sum to the phase's peak, the unexplained remainder its own row),
the limit it was held to, and the --shapes points with what the smallest costs.
The stacked bar per phase is in the plots (etdeploy.report.plots.plot_memory)."""

from __future__ import annotations

from etdeploy.report.html_format import e, size_short
from etdeploy.results.result import RunResult
from etdeploy.results.result_memory import PART_LABELS, UNEXPLAINED, Memory
from etdeploy.results.result_shapes import smallest_point_cost


def memory_block(result: RunResult, base: RunResult | None) -> str:
    """The account, the limit and the shape points; empty for a result without them."""
    out: list[str] = []
    memory = result.memory
    if memory is not None and memory.account:
        out.append("<h4>Memory per phase</h4>")
        out.append(_account_table(memory, base.memory if base is not None else None))
    if memory is not None and memory.limit is not None:
        cls = "pass" if memory.limit.passed else "fail"
        out.append(f"<p>memory limit: <span class={cls}>{e(memory.limit.message)}</span></p>")
    if result.shapes:
        out.append(_shapes_table(result))
    return "\n".join(out)


def _account_table(memory: Memory, base: Memory | None) -> str:
    phases = memory.account
    head = "".join(f"<th>{e(p.label)}</th>" for p in phases)
    rows = [f"<table class=memory><thead><tr><th>part</th>{head}</tr></thead><tbody>"]
    for part, label in PART_LABELS.items():
        values = [p.part_bytes(part) for p in phases]
        if part != UNEXPLAINED and not any(values):
            continue
        cells = []
        for p in phases:
            value = p.part_bytes(part)
            note = f" ({p.unexplained_share:+.1%})" if part == UNEXPLAINED else ""
            cells.append(f"<td class=num>{e(size_short(value))}{e(note)}</td>")
        rows.append(f"<tr><td>{e(label)}</td>{''.join(cells)}</tr>")
    peaks = "".join(
        f"<td class=num><b>{e(size_short(p.peak_bytes))}</b>"
        f"{'' if p.peak_scope == 'phase' else ' (since start)'}</td>"
        for p in phases
    )
    rows.append(f"<tr><th>peak</th>{peaks}</tr>")
    if base is not None and base.account:
        before = "".join(
            f"<td class=num>{e(size_short(b.peak_bytes)) if (b := base.phase(p.phase)) else '-'}</td>"
            for p in phases
        )
        rows.append(f"<tr><td class=muted>baseline peak</td>{before}</tr>")
    pss = "".join(
        f"<td class=num>{e(size_short(p.pss_bytes)) if p.pss_bytes is not None else '-'}</td>"
        for p in phases
    )
    rows.append(f"<tr><td class=muted>PSS at the peak's reading</td>{pss}</tr>")
    rows.append("</tbody></table>")
    buffers = ", ".join(size_short(b) for b in memory.buffers) or "none"
    rows.append(
        f"<p class=muted>planned buffers (MethodMeta): {e(buffers)}; measured by "
        f"{e(memory.measured_by or '?')}, heap by {e(memory.heap_source or 'nothing')}</p>"
    )
    return "\n".join(rows)


def _shapes_table(result: RunResult) -> str:
    points = result.shapes or ()
    out = [
        "<h4>Dynamic shapes</h4><table class=shapes><thead><tr><th>point</th><th>shapes</th>"
        "<th>samples</th><th>parity</th><th>worst max abs</th><th>median</th>"
        "<th>peak memory</th></tr></thead><tbody>"
    ]
    for p in points:
        mark = "<span class=pass>pass</span>" if p.passed else "<span class=fail>FAIL</span>"
        worst = "-" if p.worst_max_abs is None else f"{p.worst_max_abs:.2e}"
        median = "-" if p.latency_median_ms is None else f"{p.latency_median_ms:.4g} ms"
        peak = "-" if p.peak_bytes is None else size_short(p.peak_bytes)
        out.append(
            f"<tr><td>{e(p.point)}</td><td>{e(p.shape_text)}</td><td class=num>{p.samples}</td>"
            f'<td title="{e(p.reason)}">{mark}</td><td class=num>{e(worst)}</td>'
            f"<td class=num>{e(median)}</td><td class=num>{e(peak)}</td></tr>"
        )
    out.append("</tbody></table>")
    cost = smallest_point_cost(points)
    if cost:
        out.append(f"<p class=muted>{e(cost)}</p>")
    return "\n".join(out)
