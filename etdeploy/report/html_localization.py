"""The HTML report's section of a `run --localize`: the tapped values in graph
order, the origin and the amplifiers marked (or the first divergence), the
hint for an ill-conditioned model, and what was tried to reproduce it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from etdeploy.report.html_format import db, e, num, size
from etdeploy.results.result import Localization, TapResult
from etdeploy.results.result_localization import describe_amplifiers, describe_own_error

_STATUS_CLASS = {
    "localized": "status-failed",
    "ill_conditioned": "status-failed",
    "clean": "status-passed",
    "not_localizable": "status-error infra",
    "unexplained": "status-error infra",
}


def localization_block(found: Localization) -> str:
    badge = _STATUS_CLASS.get(found.status, "")
    out = [
        "<h4>Localization</h4>",
        f'<p><span class="badge {badge}">{e(found.status.replace("_", " "))}</span> '
        f"{e(found.reason)}</p>",
        f"<p class=muted>against {e(found.reference)}; sample(s) {e(', '.join(found.samples))}"
        + (f"; taps {e(found.granularity)}" if found.granularity else "")
        + (f"; module {e(found.module)}" if found.module else "")
        + "</p>",
    ]
    if found.taps:
        marks = _marks(found)
        out.append(
            "<table class=taps><thead><tr><th>#</th><th>op</th><th>node</th><th>module</th>"
            "<th>source</th><th>partition</th><th>value</th><th>error</th><th>SQNR</th>"
            "<th>ULPs</th><th>vs inputs</th><th>own vs bound</th><th>status</th></tr></thead>"
            "<tbody>"
        )
        out += [_tap_row(tap, marks.get(tap.node)) for tap in found.taps]
        out.append("</tbody></table>")
    if origin := found.origin:
        out.append(
            f"<p><b>origin</b>: {e(origin.op)} in {e(origin.module or '(the model)')} "
            f"at <code>{e(origin.source or '?')}</code> ({e(_partition(origin.partition, origin.kernel))})"
            + (f": <code>{e(origin.code)}</code>" if origin.code else "")
            + f" — its own error: {e(describe_own_error(origin.error))}</p>"
        )
        if found.amplifiers:
            out.append(f"<p><b>amplified</b>: {e(describe_amplifiers(found.amplifiers))}</p>")
        if found.hint:
            out.append(f"<p><b>hint</b>: {e(found.hint)}</p>")
    elif first := found.first_divergence:
        out.append(
            f"<p><b>first divergence</b>: {e(first.op)} in {e(first.module or '(the model)')} "
            f"at <code>{e(first.source or '?')}</code> ({e(_partition(first.partition, first.kernel))})"
            + (f": <code>{e(first.code)}</code>" if first.code else "")
            + "</p>"
        )
    retried = [a for a in found.attempts if a.reproduced is False]
    if retried:
        out.append("<ul class=muted>")
        out += [
            f"<li>{e(a.granularity)} ({a.taps} taps): did not reproduce: {e(a.note)}</li>"
            for a in retried
        ]
        out.append("</ul>")
    program = found.program
    if program is not None:
        ratio = (
            program.size_bytes / program.untapped_size_bytes if program.untapped_size_bytes else 0
        )
        out.append(
            f"<p class=muted>tapped program {e(size(program.size_bytes))} "
            f"({ratio:.2f}x the untapped one); {program.full_taps} full and "
            f"{program.summary_taps} summary tap(s) within a budget of "
            f"{e(size(program.budget_bytes))}" + "</p>"
        )
        out += [
            f"<p class=muted>left untapped ({e(reason)}): {e(', '.join(nodes))}</p>"
            for reason, nodes in _untapped(program.untapped, program.why_untapped).items()
        ]
    return "\n".join(out)


def _partition(partition: str, kernel: str | None) -> str:
    return f"{partition} {kernel}" if kernel else partition


def _marks(found: Localization) -> dict[str, str]:
    """The rows to mark: the origin and the amplifiers (or the first divergence)."""
    marks = {a.node: f"AMPLIFIER ×{a.factor:,.0f}" for a in found.amplifiers}
    if found.origin is not None:
        marks[found.origin.node] = "ORIGIN"
    elif found.first_divergence is not None:
        marks[found.first_divergence.node] = "FIRST DIVERGENCE"
    return marks


def _untapped(nodes: Sequence[str], why: Mapping[str, str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for node in nodes:
        grouped.setdefault(why.get(node, "of dynamic size, over the budget"), []).append(node)
    return grouped


def _tap_row(tap: TapResult, mark: str | None) -> str:
    m = tap.metrics
    error = f"{m.steps:.1f} steps" if m.steps is not None else f"{num(m.rel)} of |max|"
    sqnr = "-" if m.sqnr_db is None else db(m.sqnr_db)
    if tap.growth is not None:
        versus = f"{tap.growth:.3g}x"
    else:
        versus = "exact in" if tap.carried_in == 0 else "-"
    culprit = mark in ("ORIGIN", "FIRST DIVERGENCE")
    style = ' class="status-failed"' if culprit else (" class=muted" if tap.status == "ok" else "")
    status = mark or (f"{tap.status} (= {tap.same_as})" if tap.same_as else tap.status)
    own = "-"
    if tap.local is not None:
        own = (
            f"{tap.local.steps:.1f} steps"
            if tap.local.steps is not None
            else f"{tap.local.ratio:.2g}x"
        )
    return (
        f"<tr{style}><td class=num>{tap.index}</td><td>{e(tap.op)}</td><td>{e(tap.node)}</td>"
        f"<td>{e(tap.module or '(model)')}</td>"
        f'<td title="{e(tap.code or "")}">{e(tap.source or "-")}</td>'
        f"<td>{e(_partition(tap.partition, tap.kernel))}</td><td>{e(tap.reducer)}</td>"
        f"<td class=num>{e(error)}</td><td class=num>{e(sqnr)}</td>"
        f"<td class=num>{e(num(m.ulps))}</td><td class=num>{e(versus)}</td>"
        f"<td class=num>{e(own)}</td><td>{e(status)}</td></tr>"
    )
