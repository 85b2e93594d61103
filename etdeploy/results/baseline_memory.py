"""Memory against a baseline run: a job fails when, in some phase, its peak or a
part of its account grew by more than a set share (default 10%) over the
baseline's; the regression names the phase and the part that grew.

Compared part by part: what the program and the runtime decide (program file
pages, planned buffers, ExecuTorch's allocators, the inputs, the runtime and
delegate heap). The rest (the runner before the program, library pages paged in,
the allocator's free pages, the remainder) varies from run to run with what the
machine did before, and counts only through the peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from etdeploy.results.result import RunResult
from etdeploy.results.result_memory import PART_LABELS, MemoryPhase
from etdeploy.units import format_bytes

DEFAULT_MEMORY_GROWTH = 0.10

# Growth below these is noise whatever its share: a part counted in whole pages
# (fault-around maps up to 16 neighbouring file pages at once, mm/filemap.c
# fault_around_bytes, 64 KiB by default) or in the allocator's rounding.
PAGE_FLOOR_BYTES = 64 * 1024
EXACT_FLOOR_BYTES = 4 * 1024
COMPARED_PARTS: dict[str, int] = {
    "program_files": PAGE_FLOOR_BYTES,
    "planned": EXACT_FLOOR_BYTES,
    "method_allocator": EXACT_FLOOR_BYTES,
    "temp_allocator": EXACT_FLOOR_BYTES,
    "inputs": EXACT_FLOOR_BYTES,
    "runtime_heap": PAGE_FLOOR_BYTES,
}
PEAK_FLOOR_BYTES = 256 * 1024


@dataclass(frozen=True)
class MemoryGrowth:
    """What grew in one phase: the part (or "peak") and its sizes, in bytes."""

    phase: MemoryPhase
    part: str
    before: int
    now: int
    peak_before: int

    @property
    def grown(self) -> int:
        return self.now - self.before

    def message(self, growth: float) -> str:
        what = "peak" if self.part == "peak" else PART_LABELS.get(self.part, self.part)
        share = f"+{self.grown / self.before:.0%}" if self.before > 0 else "new"
        peak = (
            f"; peak {format_bytes(self.peak_before)} -> {format_bytes(self.phase.peak_bytes)}"
            if self.part != "peak"
            else ""
        )
        return (
            f"memory, {self.phase.label}: {what} {format_bytes(self.before)} -> "
            f"{format_bytes(self.now)} ({share}, more than +{growth:.0%}){peak}"
        )


def memory_growth(old: RunResult, current: RunResult, growth: float) -> MemoryGrowth | None:
    """The largest growth past `growth` (a share) of any phase's compared part or
    peak; a grown peak names the part that grew most. None when nothing grew past it."""
    if old.memory is None or current.memory is None:
        return None
    found: list[MemoryGrowth] = []
    for phase in current.memory.account:
        before = old.memory.phase(phase.phase)
        if before is None:
            continue
        for part, floor in COMPARED_PARTS.items():
            was, now = before.part_bytes(part), phase.part_bytes(part)
            if now - was > max(growth * was, floor):
                found.append(MemoryGrowth(phase, part, was, now, before.peak_bytes))
        peak_grown = phase.peak_bytes - before.peak_bytes
        if peak_grown > max(growth * before.peak_bytes, PEAK_FLOOR_BYTES) and not any(
            g.phase is phase for g in found
        ):
            # Which part carried it: the one that grew most, the remainder included.
            part = max(
                (p.part for p in phase.parts),
                key=lambda name: phase.part_bytes(name) - before.part_bytes(name),
            )
            found.append(
                MemoryGrowth(
                    phase, part, before.part_bytes(part), phase.part_bytes(part),
                    before.peak_bytes,
                )
            )  # fmt: skip
    return max(found, key=lambda g: g.grown, default=None)
