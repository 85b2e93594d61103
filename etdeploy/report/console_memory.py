"""The memory account and the --shapes points on the console: plain aligned lines
(a CI log keeps them whole, whatever its width), and their FAIL lines."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from etdeploy.results.result_memory import PART_LABELS, UNEXPLAINED
from etdeploy.results.result_shapes import smallest_point_cost
from etdeploy.units import format_bytes, format_ms

if TYPE_CHECKING:
    from etdeploy.results.result import Memory, RunResult, ShapePoint


def _bytes(value: int | None) -> str:
    return "-" if value is None else format_bytes(value)


def _aligned(rows: list[list[str]], right_from: int = 1) -> list[str]:
    """Rows as lines, columns padded to their widest cell (numbers to the right)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.rjust(widths[i]) if i >= right_from else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ).rstrip()
        for row in rows
    ]


def account_lines(memory: Memory) -> list[str]:
    """The account as a table: a row per part, a column per phase, the peak last."""
    phases = memory.account
    header = ["  part", *(p.label for p in phases)]
    rows = [header]
    for part, label in PART_LABELS.items():
        values = [p.part_bytes(part) for p in phases]
        if part != UNEXPLAINED and not any(values):
            continue
        cells = [_bytes(v) for v in values]
        if part == UNEXPLAINED:
            cells = [f"{_bytes(p.unexplained_bytes)} ({p.unexplained_share:+.1%})" for p in phases]
        rows.append([f"  {label}", *cells])
    rows.append(["  peak", *(_peak(p.peak_bytes, p.peak_scope) for p in phases)])
    rows.append(["  PSS at the peak's reading", *(_bytes(p.pss_bytes) for p in phases)])
    return _aligned(rows)


def _peak(value: int, scope: str) -> str:
    # A peak the kernel could not reset runs from the process's start.
    return _bytes(value) + ("" if scope == "phase" else " (since start)")


def render_memory(result: RunResult, out: Console) -> None:
    """The planned arena and peak, the account per phase, and the limit."""
    memory = result.memory
    if memory is None:
        return
    if not memory.account:
        out.print(
            f"memory: planned arena {_bytes(memory.planned_bytes)}; "
            f"runner peak RSS {_bytes(memory.peak_rss_bytes)}",
            highlight=False,
        )
    else:
        peak = memory.peak_phase
        buffers = ", ".join(_bytes(size) for size in memory.buffers) or "none"
        where = f" ({peak.label})" if peak is not None else ""
        out.print(
            f"memory: peak {_bytes(memory.peak_bytes)}{where}; planned buffers: {buffers}; "
            f"measured by {memory.measured_by} (heap: {memory.heap_source or 'not measured'})",
            highlight=False, soft_wrap=True,
        )  # fmt: skip
        for line in account_lines(memory):
            out.print(line, markup=False, highlight=False, soft_wrap=True)
    if memory.limit is not None:
        # The message says it: "peak … is within …" or "peak memory … exceeds the limit …".
        said = escape(memory.limit.message)
        said = said if memory.limit.passed else f"[bold red]{said}[/]"
        out.print(f"memory limit: {said}", highlight=False, soft_wrap=True)


def render_shapes(points: tuple[ShapePoint, ...], out: Console) -> None:
    """Each --shapes point: its shapes, parity, latency and peak memory; then what
    the smallest point costs against the largest."""
    rows = [["  point", "shapes", "samples", "parity", "worst max abs", "SQNR dB", "median",
             "peak memory"]]  # fmt: skip
    for p in points:
        rows.append([
            f"  {p.point}", p.shape_text, str(p.samples), "pass" if p.passed else "FAIL",
            "-" if p.worst_max_abs is None else f"{p.worst_max_abs:.2e}",
            "-" if p.worst_sqnr_db is None else f"{p.worst_sqnr_db:.1f}",
            format_ms(p.latency_median_ms), _bytes(p.peak_bytes),
        ])  # fmt: skip
    out.print(f"shapes: {len(points)} point(s) of the dynamic range", highlight=False)
    for line in _aligned(rows, right_from=2):
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    cost = smallest_point_cost(points)
    if cost:
        out.print(f"  {escape(cost)}", highlight=False, soft_wrap=True)


def failure_lines(result: RunResult, out: Console) -> None:
    """A FAIL line for a memory limit passed and for each shape point that failed."""
    memory = result.memory
    if memory is not None and memory.limit is not None and not memory.limit.passed:
        out.print(f"[bold red]FAIL[/] {escape(memory.limit.message)}", highlight=False,
                  soft_wrap=True)  # fmt: skip
    for point in result.shapes or ():
        if not point.passed:
            out.print(
                f"[bold red]FAIL[/] at shapes {escape(point.point)} ({escape(point.shape_text)}): "
                f"{escape(point.reason)}",
                highlight=False, soft_wrap=True,
            )  # fmt: skip
