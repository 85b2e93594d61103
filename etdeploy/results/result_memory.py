"""The memory block of a result: the planned arena and peak RSS of /1, and the
account of issue 26: per phase (load, first execution, steady state) the parts
the memory went to, summing to the phase's measured peak, the unexplained
remainder a part of its own; and the limit the run was held to.

Importable from etdeploy.results.result. Kept free of heavy imports.
"""

from __future__ import annotations

from dataclasses import dataclass

from etdeploy.results.record import Record, omitted_if_none

# The parts of a phase's account, in the order they stack, with what each is.
PART_LABELS: dict[str, str] = {
    "runner": "runner and libraries before the program",
    "libraries": "library pages touched since",
    "program_files": "program file pages (.pte/.ptd)",
    "planned": "planned buffers",
    "method_allocator": "method allocator",
    "temp_allocator": "temp allocator (peak)",
    "inputs": "runner's input copies",
    "runtime_heap": "runtime and delegate heap",
    "allocator_free": "allocator's free pages",
    "unexplained": "unexplained",
}
UNEXPLAINED = "unexplained"
PHASE_LABELS = {
    "load": "load",
    "first_execution": "first execution",
    "steady_state": "steady state",
}


@dataclass(frozen=True)
class MemoryPart(Record):
    part: str  # a key of PART_LABELS
    bytes: int  # the unexplained part may be negative: parts read above the peak

    @property
    def label(self) -> str:
        return PART_LABELS.get(self.part, self.part)


@dataclass(frozen=True)
class MemoryPhase(Record):
    """One phase's account: `parts` sum to `peak_bytes`."""

    phase: str  # load | first_execution | steady_state
    peak_bytes: int
    parts: tuple[MemoryPart, ...]
    # "phase": the kernel's peak counter was reset when the phase began, so the
    # peak is this phase's own; "process": it could not be, and the peak is the
    # process's so far (the account still sums to it).
    peak_scope: str = "phase"
    # The reading closest to the peak: resident set and proportional set size.
    rss_bytes: int | None = omitted_if_none()
    pss_bytes: int | None = omitted_if_none()
    program_pss_bytes: int | None = omitted_if_none()

    @property
    def label(self) -> str:
        return PHASE_LABELS.get(self.phase, self.phase)

    def part_bytes(self, part: str) -> int:
        return sum(p.bytes for p in self.parts if p.part == part)

    @property
    def unexplained_bytes(self) -> int:
        return self.part_bytes(UNEXPLAINED)

    @property
    def unexplained_share(self) -> float:
        return self.unexplained_bytes / self.peak_bytes if self.peak_bytes else 0.0

    @property
    def largest(self) -> MemoryPart | None:
        """The largest part the program brought (not the process it started in,
        not the remainder): what to look at first when the phase is too big."""
        own = [p for p in self.parts if p.part not in ("runner", UNEXPLAINED)]
        return max(own, key=lambda p: p.bytes, default=None)


@dataclass(frozen=True)
class MemoryLimit(Record):
    """The limit a run's peak was held to (--max-memory, a device's max_memory)."""

    limit_bytes: int
    source: str  # where it was set: "--max-memory", "devices.pixel8.max_memory", ...
    peak_bytes: int | None
    passed: bool
    message: str
    phase: str | None = omitted_if_none()  # the phase of the highest peak


@dataclass(frozen=True)
class Memory(Record):
    planned_bytes: int | None = None
    peak_rss_bytes: int | None = None
    # The account (issue 26; optional, a /1 reader ignores it): the highest phase
    # peak, each phase's parts, the planned buffers one by one (MethodMeta), how
    # the runner measured, and the limit.
    peak_bytes: int | None = omitted_if_none()
    phases: tuple[MemoryPhase, ...] | None = omitted_if_none()
    planned_buffers: tuple[int, ...] | None = omitted_if_none()
    measured_by: str | None = omitted_if_none()  # linux-proc | macos-task
    heap_source: str | None = omitted_if_none()  # mallinfo2 | mallinfo | ...
    limit: MemoryLimit | None = omitted_if_none()

    @property
    def account(self) -> tuple[MemoryPhase, ...]:
        """The phases' accounts; none for a result the runner measured no memory for."""
        return self.phases or ()

    @property
    def buffers(self) -> tuple[int, ...]:
        return self.planned_buffers or ()

    def phase(self, name: str) -> MemoryPhase | None:
        return next((p for p in self.account if p.phase == name), None)

    @property
    def peak_phase(self) -> MemoryPhase | None:
        return max(self.account, key=lambda p: p.peak_bytes, default=None)
