"""The memory stage of a run: the runner's readings turned into the account
(etdeploy.memory.account), the limit applied (etdeploy.memory.limit), and the
--shapes points' verdicts folded into the run's status.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from etdeploy.memory.account import account
from etdeploy.memory.limit import MaxMemory, judge_limit
from etdeploy.pipeline.execute import Executed
from etdeploy.program import Program
from etdeploy.results.result_memory import Memory
from etdeploy.results.result_shapes import ShapePoint


def memory_of(program: Program, executed: Executed) -> Memory:
    """The memory block of one runner call: the manifest's planned arena, the
    runner's peak RSS and, from our runner, the account per phase."""
    reading = executed.memory
    phases = account(reading) if reading is not None else ()
    return Memory(
        planned_bytes=program.planned_bytes,
        peak_rss_bytes=executed.peak_rss_bytes,
        peak_bytes=max((p.peak_bytes for p in phases), default=None),
        phases=phases if reading is not None else None,
        planned_buffers=reading.planned_buffers if reading is not None else None,
        measured_by=reading.source if reading is not None else None,
        heap_source=reading.heap_source if reading is not None else None,
    )


@dataclass(frozen=True)
class JudgedMemory:
    """The memory account with the limit judged on it and on every shape point,
    and the points' own verdicts: one input of the run's verdict (pipeline.verify)."""

    memory: Memory
    points: tuple[ShapePoint, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        limit = self.memory.limit
        return (limit is None or limit.passed) and all(p.passed for p in self.points)


def judge_memory(
    memory: Memory, points: tuple[ShapePoint, ...], limit: MaxMemory | None
) -> JudgedMemory:
    """The limit (if one is set) against the run's peak and every shape point's."""
    if limit is None:
        return JudgedMemory(memory, points)
    accounts = [("", memory)] + [
        (f"at shapes {p.point}", p.memory) for p in points if p.memory is not None
    ]
    judged = judge_limit(limit, accounts)
    warnings = (
        (f"{limit.source} was not checked: {judged.message}",) if judged.peak_bytes is None else ()
    )
    return JudgedMemory(replace(memory, limit=judged), points, warnings)
