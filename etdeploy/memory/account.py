"""The account: per phase, where the runner's memory went, in parts that sum to
the phase's measured peak, the remainder a part of its own ("unexplained").

From the reading closest to the phase's peak (RunnerMemory), against the process
before the program was loaded (its baseline):

- runner: the resident set before the program (the runner, its libraries, the
  thread pool);
- libraries: pages of mapped files other than the program touched since (kernel
  and delegate code paged in, library data written);
- program_files: resident pages of the mapped .pte/.ptd (weights the portable
  kernels read in place; a delegate's blob until it frees it);
- planned, method_allocator, temp_allocator: what ExecuTorch's allocators hold:
  the planned buffers (MethodMeta's sizes), the method allocator's bytes, the
  temp allocator's peak in the phase;
- inputs: the runner's copies of the inputs;
- runtime_heap: heap growth (malloc's in-use bytes) that the above do not
  explain: XNNPACK's packed weights and workspace, the runtime's own;
- allocator_free: pages the allocator's heap mapping gained beyond its in-use
  growth (freed or not yet handed out, still resident);
- unexplained: the peak minus all of the above (anonymous mappings no allocator
  counts, thread stacks, a transient between readings). Negative when the parts
  overstate (malloc'd bytes never touched).
"""

from __future__ import annotations

from etdeploy.memory.probe import PhaseReading, RunnerMemory, Snapshot
from etdeploy.results.result_memory import UNEXPLAINED, MemoryPart, MemoryPhase


def account(reading: RunnerMemory) -> tuple[MemoryPhase, ...]:
    """One MemoryPhase per measured phase, in run order."""
    return tuple(_phase(reading, phase) for phase in reading.phases if phase.peak is not None)


def _grown(now: int | None, before: int | None) -> int:
    return (now or 0) - (before or 0)


def _phase(reading: RunnerMemory, phase: PhaseReading) -> MemoryPhase:
    base, at = reading.baseline, phase.at_peak
    planned = sum(reading.planned_buffers)
    owned = planned + at.method_allocator + at.temp_allocator + at.runner_io
    parts = [
        ("runner", base.rss or 0),
        ("libraries", max(0, _grown(at.files_rss, base.files_rss))),
        ("program_files", at.program_rss or 0),
        ("planned", planned),
        ("method_allocator", at.method_allocator),
        ("temp_allocator", phase.temp_allocator_peak),
        ("inputs", at.runner_io),
        ("runtime_heap", max(0, _grown(at.heap, base.heap) - owned)),
        ("allocator_free", _allocator_free(at, base)),
    ]
    peak = phase.peak or 0
    unexplained = peak - sum(size for _, size in parts)
    return MemoryPhase(
        phase=phase.name,
        peak_bytes=peak,
        parts=(*(MemoryPart(k, v) for k, v in parts), MemoryPart(UNEXPLAINED, unexplained)),
        peak_scope="phase" if phase.peak_reset else "process",
        rss_bytes=at.rss,
        pss_bytes=at.pss,
        program_pss_bytes=at.program_pss,
    )


def _allocator_free(at: Snapshot, base: Snapshot) -> int:
    """Resident pages the heap mapping gained beyond what malloc handed out from it
    (its in-use bytes outside chunks mapped on their own)."""
    if at.heap_rss is None or at.heap is None or base.heap is None:
        return 0
    in_arena_now = at.heap - (at.heap_mmapped or 0)
    in_arena_before = base.heap - (base.heap_mmapped or 0)
    return max(0, _grown(at.heap_rss, base.heap_rss) - (in_arena_now - in_arena_before))
