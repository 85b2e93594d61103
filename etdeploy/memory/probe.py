"""The runner's `memory` object (android_harness/src/memory_probe.h, our runner's
--memory) as typed readings.

The runner reads its process at the edges of each phase (load, first execution,
steady state) and, during the load, just before a delegate frees the program
bytes it compiled from; per phase it keeps the kernel's peak (VmHWM, reset at
the phase's start where the kernel allows) and the reading closest to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from etdeploy.errors import RunnerError

MEMORY_SCHEMA = "etdeploy.runner_memory/1"

# The phases in the order a run goes through them.
PHASES = ("load", "first_execution", "steady_state")


@dataclass(frozen=True)
class Snapshot:
    """One reading of the runner's process, in bytes; None where the platform
    cannot say (the program's pages on macOS, PSS on a kernel before 4.14)."""

    rss: int | None = None
    rss_anon: int | None = None
    rss_file: int | None = None
    pss: int | None = None
    hwm: int | None = None
    footprint: int | None = None  # macOS: the task's physical footprint
    program_rss: int | None = None  # resident pages of the mapped .pte/.ptd
    program_pss: int | None = None
    files_rss: int | None = None  # every other mapped file: the runner, its libraries
    heap_rss: int | None = None  # the C allocator's own mappings ([heap])
    heap: int | None = None  # handed out by malloc and not freed
    heap_mmapped: int | None = None  # of it: chunks in a mapping of their own
    method_allocator: int = 0
    temp_allocator: int = 0
    runner_io: int = 0  # the runner's copies of the inputs


@dataclass(frozen=True)
class PhaseReading:
    """One phase: its peak, whether that peak is the phase's own (the kernel's
    counter was reset at its start) or the process's so far, and the reading
    taken closest to the peak."""

    name: str
    peak: int | None
    peak_reset: bool
    temp_allocator_peak: int
    checkpoints: int
    at_peak: Snapshot
    end: Snapshot


@dataclass(frozen=True)
class RunnerMemory:
    """Everything the runner measured of one call's first sample."""

    source: str  # linux-proc | macos-task | unavailable
    heap_source: str | None  # mallinfo2 | mallinfo | malloc_zone_statistics
    planned_buffers: tuple[int, ...]
    baseline: Snapshot
    phases: tuple[PhaseReading, ...]
    probe_ms: float = 0.0

    def phase(self, name: str) -> PhaseReading | None:
        return next((p for p in self.phases if p.name == name), None)


def _bad(problem: str) -> RunnerError:
    return RunnerError(
        f"the runner's memory readings are not usable: {problem}",
        "the runner and etdeploy disagree on the format; rebuild the runner with "
        "`etdeploy runner build --rebuild`",
    )


def _count(raw: Mapping[str, Any], key: str, where: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"{where}.{key} is not a byte count")
    return value


def _snapshot(raw: Any, where: str) -> Snapshot:
    if not isinstance(raw, Mapping):
        raise _bad(f"{where} is not an object")

    def count(name: str) -> int | None:
        return _count(raw, name, where)

    return Snapshot(
        rss=count("rss"),
        rss_anon=count("rss_anon"),
        rss_file=count("rss_file"),
        pss=count("pss"),
        hwm=count("hwm"),
        footprint=count("footprint"),
        program_rss=count("program_rss"),
        program_pss=count("program_pss"),
        files_rss=count("files_rss"),
        heap_rss=count("heap_rss"),
        heap=count("heap"),
        heap_mmapped=count("heap_mmapped"),
        method_allocator=count("method_allocator") or 0,
        temp_allocator=count("temp_allocator") or 0,
        runner_io=count("runner_io") or 0,
    )


def parse_runner_memory(raw: Any) -> RunnerMemory | None:
    """The `memory` object of a runner result document; None when absent."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise _bad("memory is not an object")
    if raw.get("schema") != MEMORY_SCHEMA:
        raise _bad(f"schema is {raw.get('schema')!r}, expected {MEMORY_SCHEMA!r}")
    planned = raw.get("planned_buffers", [])
    if not isinstance(planned, list) or not all(
        isinstance(size, int) and not isinstance(size, bool) for size in planned
    ):
        raise _bad("planned_buffers is not a list of sizes")
    phases = raw.get("phases", [])
    if not isinstance(phases, list):
        raise _bad("phases is not a list")
    readings = []
    for i, phase in enumerate(phases):
        where = f"phases[{i}]"
        if not isinstance(phase, Mapping) or phase.get("name") not in PHASES:
            raise _bad(f"{where} names no phase of {', '.join(PHASES)}")
        readings.append(
            PhaseReading(
                name=str(phase["name"]),
                peak=_count(phase, "peak", where),
                peak_reset=bool(phase.get("peak_reset")),
                temp_allocator_peak=_count(phase, "temp_allocator_peak", where) or 0,
                checkpoints=_count(phase, "checkpoints", where) or 0,
                at_peak=_snapshot(phase.get("at_peak"), f"{where}.at_peak"),
                end=_snapshot(phase.get("end"), f"{where}.end"),
            )
        )
    probe_ms = raw.get("probe_ms")
    return RunnerMemory(
        source=str(raw.get("source") or "unavailable"),
        heap_source=raw.get("heap_source") if isinstance(raw.get("heap_source"), str) else None,
        planned_buffers=tuple(planned),
        baseline=_snapshot(raw.get("baseline", {}), "baseline"),
        phases=tuple(readings),
        probe_ms=float(probe_ms) if isinstance(probe_ms, (int, float)) else 0.0,
    )
