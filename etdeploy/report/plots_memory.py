"""The memory plot of the HTML report: a stacked bar per job and phase, one
segment per part of the account (the unexplained remainder hatched), so the
segments of a bar add up to the phase's measured peak; a job's memory limit is a
dashed mark across its bars."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from etdeploy.report.plots_base import LIMIT_COLOUR, Job, _cap, _height, _short
from etdeploy.results.result_memory import PART_LABELS, UNEXPLAINED, MemoryPhase

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from etdeploy.report.plots_base import Drawn

# One colour per part, in stacking order; the process it started in is grey.
PART_COLOURS = {
    "runner": "#bdbdbd",
    "libraries": "#9e9e9e",
    "program_files": "#1565c0",
    "planned": "#2e7d32",
    "method_allocator": "#66bb6a",
    "temp_allocator": "#a5d6a7",
    "inputs": "#8d6e63",
    "runtime_heap": "#ef6c00",
    "allocator_free": "#ffcc80",
    UNEXPLAINED: "#ffffff",
}


def plot_memory(jobs: Sequence[Job], figure: type[Figure]) -> Drawn:
    rows: list[tuple[str, MemoryPhase, int | None]] = []
    for job in jobs:
        memory = job.result.memory
        if memory is None:
            continue
        limit = memory.limit.limit_bytes if memory.limit is not None else None
        for phase in memory.account:
            rows.append((_short(f"{job.key.short_label}: {phase.label}"), phase, limit))
    if not rows:
        return None
    rows, note = _cap(rows, lambda row: float(row[1].peak_bytes), "largest peaks")
    fig = figure(figsize=(11, _height(len(rows))))
    ax = fig.add_subplot()
    scale, unit = _unit(max(max(r[1].peak_bytes for r in rows), *(r[2] or 0 for r in rows)))
    labelled: set[str] = set()
    for y, (_, phase, limit) in enumerate(rows):
        left = 0.0
        for part in PART_LABELS:
            size = phase.part_bytes(part) / scale
            if size <= 0:
                continue  # a negative remainder (parts above the peak) is in the table
            unexplained = part == UNEXPLAINED
            ax.barh(
                y, size, left=left, color=PART_COLOURS[part],
                edgecolor="#b71c1c" if unexplained else "none",
                hatch="///" if unexplained else None, linewidth=0.6,
                label=PART_LABELS[part] if part not in labelled else None,
            )  # fmt: skip
            labelled.add(part)
            left += size
        ax.text(phase.peak_bytes / scale, y, f" {phase.peak_bytes / scale:.3g} {unit}",
                va="center", fontsize=8)  # fmt: skip
        if limit is not None:
            ax.plot([limit / scale] * 2, [y - 0.45, y + 0.45], color=LIMIT_COLOUR,
                    linestyle="--", linewidth=1.4,
                    label="limit" if "limit" not in labelled else None)  # fmt: skip
            labelled.add("limit")
    ax.set_yticks(range(len(rows)), [label for label, _, _ in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel(f"{unit} at the phase's peak (parts sum to the measured peak)")
    ax.grid(axis="x", alpha=0.3)
    # The legend in stacking order, whatever order the bars first used each part in.
    order = [*PART_LABELS.values(), "limit"]
    handles, labels = ax.get_legend_handles_labels()
    ranked = sorted(zip(handles, labels, strict=True), key=lambda hl: order.index(hl[1]))
    ax.legend([h for h, _ in ranked], [t for _, t in ranked], loc="lower left",
              bbox_to_anchor=(1.0, 0.0), fontsize=8, frameon=False)  # fmt: skip
    return fig, note


def _unit(largest: float) -> tuple[float, str]:
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if largest >= scale:
            return scale, unit
    return 1.0, "B"
