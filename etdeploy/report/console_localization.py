"""The localization on the console (`etdeploy run --localize`): the taps in graph order
with the origin and the amplifiers marked, then what was found, each on its line."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from etdeploy.results.result import Amplifier, Localization, TapResult
from etdeploy.results.result_localization import (
    describe_amplifiers,
    describe_error,
    describe_own_error,
    where,
)


def _num(value: float, spec: str) -> str:
    # An exact match's SQNR is infinite: "inf", as format() spells it.
    return format(value, spec)


def render_localization(found: Localization, out: Console) -> None:
    """The taps in graph order with the origin and the amplifiers marked, then
    what was found, each on its line. A CI log is read wide: piped, the table
    is not squeezed to 80 columns, and the lines do not wrap."""
    from rich import box

    def say(text: str) -> None:
        out.print(text, highlight=False, soft_wrap=True)

    origin = found.origin.node if found.origin else None
    amplified = {a.node: a for a in found.amplifiers}
    first = found.first_divergence.node if found.first_divergence else None
    if found.taps:
        title = (
            f"localization: {len(found.taps)} taps ({found.granularity}) vs {found.reference}; "
            f"sample{'s' if len(found.samples) > 1 else ''} {', '.join(found.samples)}"
        )
        table = Table(title=escape(title), box=box.SIMPLE_HEAD, title_justify="left")
        columns = ("#", "op", "module", "source", "partition", "value", "error", "SQNR dB",
                   "ULPs", "vs inputs", "own vs bound", "status")  # fmt: skip
        for column in columns:
            right = column in ("#", "error", "SQNR dB", "ULPs", "vs inputs", "own vs bound")
            table.add_column(column, justify="right" if right else "left", no_wrap=True)
        for tap in found.taps:
            m = tap.metrics
            error = f"{m.steps:.1f} steps" if m.steps is not None else f"{m.rel:.2e}"
            if tap.partition == "CPU":
                partition = f"CPU {tap.kernel or ''}".strip()
            else:
                partition = f"{tap.partition} #{tap.delegate}"
            row = [
                str(tap.index), tap.op, tap.module or "(model)", tap.source or "-", partition,
                "summary" if tap.reducer != "full" else "full", error, "-" if m.sqnr_db is None else _num(m.sqnr_db, ".1f"), f"{m.ulps:.3g}",
                _growth(tap), _own(tap), _tap_status(tap, origin, amplified, first),
            ]  # fmt: skip
            marked = tap.node == (origin or first)
            style = "bold red" if marked else ("red" if tap.status == "departs" else "")
            table.add_row(*(escape(cell) for cell in row), style=style or None)
        _print_wide(table, out)
    program = found.program
    if program is not None and program.untapped:
        why = program.why_untapped
        reasons: dict[str, list[str]] = {}
        for node in program.untapped:
            reasons.setdefault(why.get(node, "of dynamic size, over the budget"), []).append(node)
        for reason, nodes in reasons.items():
            say(
                f"localize: {len(nodes)} value(s) not tapped ({escape(reason)}): {escape(', '.join(nodes))}"
            )
    # When nothing was built, the LOCALIZE line says why, once.
    if any(a.taps for a in found.attempts):
        for attempt in found.attempts:
            if attempt.reproduced is False or not attempt.taps:
                say(f"localize ({attempt.granularity}): {escape(attempt.note)}")
    if found.origin is not None:
        o = found.origin
        say(
            f"origin: {escape(where(o))}  {escape(o.code or '')}  "
            f"— its own error: {escape(describe_own_error(o.error))}"
        )
        # Where the device's value first differs from eager's, when that is not the
        # origin (an origin over its bound after values that differ within theirs).
        departs = next((t for t in found.taps if t.metrics.max_abs > 0 and not t.context), None)
        if departs is not None and departs.node != o.node:
            say(
                f"first difference from {escape(found.reference)}: {escape(where(departs))} "
                f"— {escape(describe_error(departs.metrics))}"
            )
        if found.amplifiers:
            say(f"amplified: {escape(describe_amplifiers(found.amplifiers))}")
    elif (divergence := found.first_divergence) is not None and divergence.source:
        say(
            f"first divergence: {escape(divergence.source)}  {escape(divergence.code or '')}  "
            f"— {escape(describe_error(divergence.metrics))}"
        )
    colour = {"localized": "bold yellow", "ill_conditioned": "bold yellow", "clean": "green"}.get(
        found.status, "bold red"
    )
    say(f"[{colour}]LOCALIZE[/] {escape(found.reason)}")
    if found.hint:
        say(f"  hint: {escape(found.hint)}")


def _own(tap: TapResult) -> str:
    """The operator's own error against its bound (over 1: float32 does not excuse it)."""
    if tap.local is None:
        return "-"
    if tap.local.steps is not None:
        return f"{tap.local.steps:.1f} steps"
    return f"{tap.local.ratio:.2g}x"


def _tap_status(
    tap: TapResult, origin: str | None, amplified: dict[str, Amplifier], first: str | None
) -> str:
    if tap.node == origin:
        return "ORIGIN"
    if tap.node in amplified:
        return f"AMPLIFIER ×{amplified[tap.node].factor:,.0f}"
    if tap.node == first and origin is None:
        return "FIRST DIVERGENCE"
    if tap.same_as:
        return f"{tap.status} (= {tap.same_as})"
    return tap.status


def _growth(tap: TapResult) -> str:
    """How much the tap's relative error outgrew its inputs'; from exact inputs
    (a model input, weights) the ratio to float32's epsilon says little."""
    if tap.growth is None:
        return "-"
    return "exact in" if tap.carried_in == 0 else f"{tap.growth:.3g}x"


def _print_wide(table: Table, out: Console) -> None:
    """A table at its natural width when piped (rich would squeeze it to 80
    columns and cut every cell), as plain lines; on a terminal, as usual."""
    if out.is_terminal:
        out.print(table)
        return
    import io

    from rich.console import Console

    buffer = io.StringIO()
    Console(file=buffer, width=240, color_system=None).print(table)
    for line in buffer.getvalue().splitlines():
        out.print(line.rstrip(), markup=False, highlight=False, soft_wrap=True)
